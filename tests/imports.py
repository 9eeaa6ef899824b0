"""What a module imports, read from its source: every import statement, at the top and
inside functions (which run only on some paths), relative ones resolved. Used by the
tests that keep the engine free of Django and the apps in their layers."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path


def module_name(path: Path, root: Path) -> str:
    """The dotted name of the module at path, under root (a package is its __init__)."""
    return ".".join(path.relative_to(root).with_suffix("").parts).removesuffix(".__init__")


def modules_under(root: Path, packages: tuple[str, ...]) -> Iterator[tuple[str, Path]]:
    """(dotted name, path) of every module of these top-level packages under root."""
    for package in packages:
        for path in sorted((root / package).rglob("*.py")):
            yield module_name(path, root), path


def imported_modules(path: Path, package: str) -> set[str]:
    """Every module an import statement in the file names, as absolute names; for `from m
    import n`, both m and m.n (n may be a module or a name in m). package: the package a
    relative import in this file starts from (for a package's __init__, itself)."""
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.rsplit(".", node.level - 1)[0]
                module = f"{base}.{node.module}" if node.module else base
            else:
                module = node.module or ""
            names.add(module)
            names.update(f"{module}.{alias.name}" for alias in node.names)
    return names


def package_of(name: str, path: Path) -> str:
    """The package a relative import in the module starts from."""
    return name if path.name == "__init__.py" else name.rpartition(".")[0]
