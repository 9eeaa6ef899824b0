"""The apps in layers: each module imports only from its own layer and those below it.

Lowest first: the engine (kernels/engine, a library with no Django); config's plumbing
(settings, sign-in, locks, rate limits, the site's origin, the Celery app), which knows no
app; the archive (sessions: sessions, turns, program states, files, kernels); replay
(kernels: runs, forks, jobs, backends); the pages (views, URLs, template tags and the
context they build); the tutor; and on top the project's wiring (config's URLs, /healthz,
WSGI), which may import anything. Every import statement counts, at the top of a module
or inside a function, `import x` or `from x import y`, relative ones resolved.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.imports import imported_modules, modules_under, package_of

ROOT = Path(__file__).resolve().parents[2]
PLUMBING = (
    "settings",
    "accounts",
    "processes",
    "ratelimit",
    "cache",
    "context_processors",
    "celery",
)
# (layer, the modules and packages in it), lowest first.
LAYERS: list[tuple[str, tuple[str, ...]]] = [
    ("the engine", ("kernels.engine",)),
    ("config's plumbing", ("config", *(f"config.{name}" for name in PLUMBING))),
    ("the archive", ("sessions",)),
    ("replay", ("kernels",)),
    ("the pages", ("pages",)),
    ("the tutor", ("tutor",)),
    (
        "the project's wiring",
        ("config.urls", "config.views", "config.wsgi", "config.asgi"),
    ),
]
APPS = ("config", "kernels", "pages", "sessions", "tutor")


def layer_of(module: str) -> int | None:
    """The layer a module is in, by the longest name that holds it; None outside the
    project (the standard library, Django, other packages)."""
    best: tuple[int, int] | None = None
    for level, (_, names) in enumerate(LAYERS):
        for name in names:
            holds = module == name or module.startswith(f"{name}.")
            if holds and (best is None or len(name) > best[0]):
                best = (len(name), level)
    return None if best is None else best[1]


def upward(importer: str, imported: str) -> str:
    """Why importer may not import imported ("" if it may)."""
    mine, theirs = layer_of(importer), layer_of(imported)
    if mine is None or theirs is None or theirs <= mine:
        return ""
    return f"{LAYERS[mine][0]} may not import {LAYERS[theirs][0]}"


def crossings(root: Path) -> list[str]:
    """Each import under root that goes up a layer: the module, the import and why."""
    found = []
    for name, path in modules_under(root, APPS):
        for imported in sorted(imported_modules(path, package_of(name, path))):
            if why := upward(name, imported):
                found.append(f"{path.relative_to(root)} imports {imported}: {why}")
    return found


def test_every_module_of_the_project_is_in_a_layer() -> None:
    unplaced = [name for name, _ in modules_under(ROOT, APPS) if layer_of(name) is None]
    assert unplaced == []


def test_no_module_imports_a_layer_above_its_own() -> None:
    assert len(list(modules_under(ROOT, APPS))) > 100  # it read the project
    assert crossings(ROOT) == []


@pytest.mark.parametrize(
    ("importer", "imported", "allowed"),
    [
        ("kernels.replay", "sessions.models", True),
        ("pages.replay_views", "kernels.replay", True),
        ("tutor.views", "pages.host_context", True),
        ("config.views", "tutor.llm", True),
        ("sessions.importers.kernelbin", "kernels.engine.harness", True),
        ("kernels.replay", "config.processes", True),
        ("sessions.models", "django.db", True),
        ("sessions.export", "kernels.models", False),
        ("sessions.search", "pages.navigation", False),
        ("kernels.forks", "pages.fork_views", False),
        ("pages.urls", "tutor.views", False),
        ("kernels.engine.run", "kernels.replay", False),
        ("kernels.engine.run", "config.settings", False),
        ("config.processes", "kernels.replay", False),
        ("tutor.engine", "config.urls", False),
    ],
)
def test_the_rule(importer: str, imported: str, allowed: bool) -> None:
    assert (upward(importer, imported) == "") is allowed


def test_it_names_the_module_and_the_import_inside_functions_and_relative(
    tmp_path: Path,
) -> None:
    files = {
        "sessions/__init__.py": "",
        "sessions/export.py": "def later():\n    from kernels import models\n",
        "sessions/importers/__init__.py": "from . import writer\nimport pages.urls\n",
        "sessions/importers/writer.py": "from .. import models\nfrom ..search import index\n",
        "kernels/__init__.py": "",
        "kernels/replay.py": "from sessions.models import Session\nimport kernels.engine.run\n",
        "kernels/engine/run.py": "import numpy\nfrom .. import jobs\n",
        "pages/__init__.py": "",
        "tutor/__init__.py": "",
        "config/__init__.py": "",
    }
    for name, text in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    assert crossings(tmp_path) == [
        "kernels/engine/run.py imports kernels: the engine may not import replay",
        "kernels/engine/run.py imports kernels.jobs: the engine may not import replay",
        "sessions/export.py imports kernels: the archive may not import replay",
        "sessions/export.py imports kernels.models: the archive may not import replay",
        "sessions/importers/__init__.py imports pages.urls: the archive may not import the pages",
    ]
