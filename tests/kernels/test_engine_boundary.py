"""kernels/engine is Django-free: the worker processes import it without settings.

Two checks, since each misses what the other sees: reading every import statement
(including those inside functions, which run only on some paths) and importing the
worker's modules in a fresh interpreter.
"""

import subprocess
import sys
from pathlib import Path

from tests.imports import imported_modules, module_name

ROOT = Path(__file__).resolve().parents[2]
ENGINE = ROOT / "kernels" / "engine"
# The project's apps and Django: the engine may import none of them.
FORBIDDEN = ("django", "kernels", "pages", "sessions", "tutor", "config")


def engine_modules() -> list[str]:
    return sorted(module_name(path, ROOT) for path in ENGINE.rglob("*.py"))


def outside_the_engine(module: str) -> bool:
    if module == "kernels.engine" or module.startswith("kernels.engine."):
        return False
    return module.split(".")[0] in FORBIDDEN


def test_it_imports_nothing_of_django_or_the_apps() -> None:
    files = sorted(ENGINE.rglob("*.py"))
    assert len(files) > 5
    crossings = {
        f"{path.relative_to(ROOT)}: {module}"
        for path in files
        for module in imported_modules(path, ".".join(path.relative_to(ROOT).parent.parts))
        if outside_the_engine(module)
    }
    assert not crossings


def test_it_reads_imports_inside_functions_and_relative_ones(tmp_path: Path) -> None:
    module = tmp_path / "sample.py"
    module.write_text(
        "def later():\n    import django.conf\n\n"
        "def relative():\n    from .. import models\n    from ..engine import pool\n"
    )
    imported = imported_modules(module, "kernels.engine")
    assert {m for m in imported if outside_the_engine(m)} == {
        "django.conf",
        "kernels",
        "kernels.models",
    }


def test_it_loads_no_django_when_imported() -> None:
    # The worker imports the runner's modules lazily; import them all, as a job does.
    modules = engine_modules()
    script = (
        "import importlib, sys\n"
        f"for name in {modules!r}:\n"
        "    importlib.import_module(name)\n"
        "apps = ('django', 'pages', 'sessions', 'tutor', 'config')\n"
        "loaded = [m for m in sys.modules if m.split('.')[0] in apps\n"
        "          or (m.startswith('kernels.') and not m.startswith('kernels.engine'))]\n"
        "print(' '.join(sorted(loaded)))\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", script],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == []
