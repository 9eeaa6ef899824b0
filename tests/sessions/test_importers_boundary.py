"""sessions/importers: each reader writes through the one writer and knows no other reader;
nothing in the folder depends on the export, which writes what kernelbin reads."""

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
IMPORTERS = ROOT / "sessions" / "importers"
CLAUDE_CODE = "sessions.importers.claude_code"
KERNELBIN = "sessions.importers.kernelbin"


def imported_modules(path: Path) -> set[str]:
    """Every module an import statement in the file names (the project uses no relative ones)."""
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            assert not node.level, f"{path.name}: relative import"
            names.add(node.module or "")
    return names


def imports_of(paths: list[Path]) -> set[str]:
    return {module for path in paths for module in imported_modules(path)}


def names(modules: set[str], prefix: str) -> set[str]:
    return {m for m in modules if m == prefix or m.startswith(f"{prefix}.")}


def test_the_readers_know_the_writer_not_each_other() -> None:
    claude_code = imports_of(sorted((IMPORTERS / "claude_code").glob("*.py")))
    kernelbin = imports_of([IMPORTERS / "kernelbin.py"])
    assert "sessions.importers.writer" in claude_code
    assert "sessions.importers.writer" in kernelbin
    assert names(claude_code, KERNELBIN) == set()
    assert names(kernelbin, CLAUDE_CODE) == set()


def test_the_writer_knows_no_reader() -> None:
    writer = imports_of([IMPORTERS / "writer.py"])
    assert names(writer, KERNELBIN) | names(writer, CLAUDE_CODE) == set()
    assert names(writer, "sessions.importers.files") == set()


def test_nothing_here_depends_on_the_export() -> None:
    modules = sorted(IMPORTERS.rglob("*.py"))
    assert len(modules) > 10
    assert names(imports_of(modules), "sessions.export") == set()
