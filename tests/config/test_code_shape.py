"""The shape the code keeps: modules and functions short enough to read in one go.

A module over 600 lines or a function over 80 is allowed only with a comment that says
why, starting "# Kept whole:" (at the top of the module, or on the line above the def).
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
from django.conf import settings

APPS = ("config", "kernels", "pages", "sessions", "tutor")
MAX_MODULE_LINES = 600
MAX_FUNCTION_LINES = 80
EXCUSE = "# Kept whole:"


def modules() -> list[Path]:
    root = Path(settings.BASE_DIR)
    return sorted(
        path
        for app in APPS
        for path in (root / app).rglob("*.py")
        if "migrations" not in path.parts
    )


def long_functions(path: Path) -> list[str]:
    lines = path.read_text().splitlines()
    found = []
    for node in ast.walk(ast.parse("\n".join(lines))):
        if not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            continue
        first = min([node.lineno, *(d.lineno for d in node.decorator_list)])
        length = (node.end_lineno or node.lineno) - node.lineno + 1
        excused = first >= 2 and lines[first - 2].strip().startswith(EXCUSE)
        if length > MAX_FUNCTION_LINES and not excused:
            found.append(f"{path.name}:{node.lineno} {node.name}() is {length} lines")
    return found


@pytest.mark.parametrize("path", modules(), ids=lambda p: str(p.relative_to(settings.BASE_DIR)))
def test_modules_and_functions_stay_short(path: Path) -> None:
    lines = path.read_text().splitlines()
    if len(lines) > MAX_MODULE_LINES:
        assert any(line.startswith(EXCUSE) for line in lines[:40]), (
            f"{path.name} is {len(lines)} lines: split it by purpose, or say why not"
        )
    assert long_functions(path) == []


def test_the_check_finds_a_long_function(tmp_path: Path) -> None:
    body = "\n".join(f"    x{i} = {i}" for i in range(MAX_FUNCTION_LINES))
    path = tmp_path / "long.py"
    path.write_text(f"def long():\n{body}\n")
    assert long_functions(path) == [f"long.py:1 long() is {MAX_FUNCTION_LINES + 1} lines"]
    path.write_text(f"{EXCUSE} one table, read top to bottom.\ndef long():\n{body}\n")
    assert long_functions(path) == []
