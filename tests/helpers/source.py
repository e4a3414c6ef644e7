"""The package's source read as syntax trees, for the tests of its structure (imports, function
sizes): which files, their module names, and the functions they define."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from dataclasses import dataclass

from helpers.paths import REPO


@dataclass(frozen=True)
class Source:
    """One Python file: its path relative to the repository, dotted module name and tree."""

    path: str
    module: str
    tree: ast.Module

    @property
    def is_package(self) -> bool:
        return self.path.endswith("__init__.py")


def sources(*roots: str) -> list[Source]:
    """Every ``.py`` file under the repository paths ``roots`` (folders or files), parsed."""
    found: list[Source] = []
    for root in roots:
        base = REPO / root
        for path in sorted(base.rglob("*.py")) if base.is_dir() else [base]:
            rel = path.relative_to(REPO)
            parts = list(rel.with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            found.append(Source(rel.as_posix(), ".".join(parts), ast.parse(path.read_text())))
    return found


def functions(tree: ast.AST) -> Iterator[tuple[str, ast.FunctionDef | ast.AsyncFunctionDef]]:
    """Every function and method in ``tree`` (nested ones too), with its qualified name."""

    def walk(node: ast.AST, prefix: str) -> Iterator[tuple[str, ast.AST]]:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                name = f"{prefix}{child.name}"
                if not isinstance(child, ast.ClassDef):
                    yield name, child
                yield from walk(child, f"{name}.")
            else:
                yield from walk(child, prefix)

    yield from walk(tree, "")
