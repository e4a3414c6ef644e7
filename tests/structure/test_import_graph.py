"""The package's import graph, read from the source: no import circle among visattn modules
(imports at module level and inside functions both count), and no import inside a function
except of an optional extra's package, or of a visattn module that needs an extra its importer
does not (the command line's subcommands, the visualiser's checkpoint loading)."""

from __future__ import annotations

import ast
from dataclasses import dataclass
from functools import cache

import pytest
from helpers.paths import REPO
from helpers.source import Source, sources

from visattn._extras import EXTRAS

#: the import names of every optional extra's packages
EXTRA_PACKAGES = frozenset(name for names in EXTRAS.values() for name in names)


@dataclass(frozen=True)
class Import:
    """One import statement: where it is, what it imports, and whether a function holds it."""

    source: Source
    line: int
    target: str  # the dotted module imported
    in_function: bool

    def __str__(self) -> str:
        return f"{self.source.path}:{self.line}: {self.target}"


@cache
def _package() -> dict[str, Source]:
    return {s.module: s for s in sources("visattn")}


def _type_checking(node: ast.If) -> bool:
    test = node.test
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _targets(source: Source, node: ast.Import | ast.ImportFrom) -> list[str]:
    """The modules an import statement loads (a ``from X import name`` of a submodule loads
    ``X.name``)."""
    if isinstance(node, ast.Import):
        return [alias.name for alias in node.names]
    base = node.module or ""
    if node.level:
        parts = source.module.split(".")
        package = parts if source.is_package else parts[:-1]
        anchor = ".".join(package[: len(package) - node.level + 1])
        base = f"{anchor}.{base}" if base else anchor
    known = _package()
    subs = [f"{base}.{a.name}" for a in node.names if f"{base}.{a.name}" in known]
    return subs if len(subs) == len(node.names) else [base, *subs]


def _imports(source: Source) -> list[Import]:
    found: list[Import] = []

    def walk(node: ast.AST, in_function: bool) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.If) and _type_checking(child):
                continue  # not run
            if isinstance(child, ast.Import | ast.ImportFrom):
                found.extend(
                    Import(source, child.lineno, t, in_function) for t in _targets(source, child)
                )
            walk(child, in_function or isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef))

    walk(source.tree, False)
    return found


@cache
def _all_imports() -> tuple[Import, ...]:
    return tuple(i for s in _package().values() for i in _imports(s))


def _module(target: str) -> str | None:
    """The visattn module ``target`` names (itself or its nearest package), else None."""
    known = _package()
    while target and target not in known:
        target = target.rpartition(".")[0]
    return target or None


@cache
def _extras_needed(module: str) -> frozenset[str]:
    """The optional packages that importing ``module`` imports: those of its module-level
    imports and of the visattn modules they load, parent packages included."""
    needed: set[str] = set()
    seen: set[str] = set()
    todo = [module]
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        parts = name.split(".")
        todo += [".".join(parts[:i]) for i in range(1, len(parts))]  # parents import first
        for imp in _all_imports():
            if imp.source.module != name or imp.in_function:
                continue
            inner = _module(imp.target)
            if inner is not None:
                todo.append(inner)
            elif imp.target.split(".")[0] in EXTRA_PACKAGES:
                needed.add(imp.target.split(".")[0])
    return frozenset(needed)


def _allowed_in_function(imp: Import) -> bool:
    inner = _module(imp.target)
    if inner is None:
        return imp.target.split(".")[0] in EXTRA_PACKAGES
    return bool(_extras_needed(inner) - _extras_needed(imp.source.module))


def test_the_scan_sees_the_package() -> None:
    """The scan reads the package's modules and resolves relative imports (a broken scan would
    pass every check below)."""
    targets = {(i.source.module, i.target) for i in _all_imports()}
    assert ("visattn", "visattn.blocks") in targets
    assert ("visattn.training.load", "visattn.training.module") in targets
    assert any(i.in_function and i.target == "pytorch_grad_cam" for i in _all_imports())


def test_every_optional_extra_has_its_packages_listed() -> None:
    """``visattn._extras.EXTRAS`` names the packages of every extra of pyproject.toml that
    code imports (``dev`` and ``docs`` only gather tools)."""
    tomllib = pytest.importorskip("tomllib")  # Python 3.11+
    extras = tomllib.loads((REPO / "pyproject.toml").read_text())["project"][
        "optional-dependencies"
    ]
    assert set(extras) - {"dev", "docs"} == set(EXTRAS)


def test_imports_inside_functions_are_of_optional_extras_only() -> None:
    """An import inside a function either loads an optional extra (so that the module works
    without it) or a visattn module that needs an extra the importer does not; anything else
    belongs at the top of the module (an import hidden in a function usually works around an
    import circle)."""
    bad = [str(i) for i in _all_imports() if i.in_function and not _allowed_in_function(i)]
    assert not bad, "imports inside functions that belong at module level:\n" + "\n".join(bad)


def _cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan), or of one that
    imports itself."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for nxt in sorted(edges.get(node, ())):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                top = stack.pop()
                component.append(top)
                if top == node:
                    break
            if len(component) > 1 or node in edges.get(node, ()):
                found.append(sorted(component))

    for node in sorted(edges):
        if node not in index:
            visit(node)
    return found


def test_cycle_finder_finds_a_circle() -> None:
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert _cycles({"a": {"b"}, "b": set()}) == []


def test_no_import_circle_among_visattn_modules() -> None:
    """No module imports, directly or through others, a module that imports it back, whether the
    imports are at module level or inside functions. (A package's ``__init__`` importing its
    submodules is not a circle: Python loads a parent package before its submodules, and the
    graph has no edge from a submodule to its parent unless the submodule imports it.)"""
    edges: dict[str, set[str]] = {}
    for imp in _all_imports():
        inner = _module(imp.target)
        if inner is not None and inner != imp.source.module:
            edges.setdefault(imp.source.module, set()).add(inner)
    cycles = _cycles(edges)
    where = {
        cycle_key: [
            str(i)
            for i in _all_imports()
            if i.source.module in cycle_key and _module(i.target) in cycle_key
        ]
        for cycle_key in map(frozenset, cycles)
    }
    assert not cycles, "import circles:\n" + "\n\n".join("\n".join(w) for w in where.values())


@pytest.mark.parametrize(
    "module", ["visattn", "visattn.blocks", "visattn.models", "visattn.data", "visattn.export"]
)
def test_the_core_needs_no_optional_extra(module: str) -> None:
    """The blocks, models, datasets and export import only torch, torchvision and timm (and the
    standard library, numpy and PIL); their extras are imported where they are used."""
    assert _extras_needed(module) == frozenset()


#: the layers, lowest first: a module imports only from its own layer or a lower one. A module
#: takes the layer of the longest prefix listed; the package's and its subpackages' ``__init__``
#: files and ``__main__`` modules are front doors above every layer (not listed).
LAYERS: tuple[tuple[str, ...], ...] = (
    (
        "visattn._registry",
        "visattn._values",
        "visattn._nets",
        "visattn._extras",
        "visattn._safe_path",
        "visattn.constants",
        "visattn.files",
        "visattn.locks",
    ),
    ("visattn.blocks", "visattn.profile"),
    ("visattn.models", "visattn.export"),
    (
        "visattn.data",
        "visattn.integrations",
        "visattn.visualize.maps",
        "visattn.visualize.localization",
        "visattn.visualize.figures",
    ),
    ("visattn.training",),
    ("visattn.ablate", "visattn.visualize.command"),
)


def _layer(module: str) -> int | None:
    """The layer of ``module`` (None: a front door, above every layer)."""
    best: tuple[int, int] | None = None  # (prefix length, layer)
    for layer, prefixes in enumerate(LAYERS):
        for prefix in prefixes:
            if (module == prefix or module.startswith(prefix + ".")) and (
                best is None or len(prefix) > best[0]
            ):
                best = (len(prefix), layer)
    return None if best is None else best[1]


def _front_door(module: str) -> bool:
    """The package's ``__init__`` and ``__main__`` and those of ``visattn.visualize``, whose
    facade lends names from the layers under it."""
    return module in ("visattn", "visattn.visualize") or module.endswith(".__main__")


def test_every_module_has_a_layer() -> None:
    unplaced = [m for m in _package() if not _front_door(m) and _layer(m) is None]
    assert not unplaced, f"modules in no layer of LAYERS: {unplaced}"


def test_the_layer_check_sees_an_upward_import() -> None:
    assert (
        _layer("visattn.ablate.job")
        > _layer("visattn.training.cli")
        > _layer("visattn.visualize.maps")
    )
    assert _layer("visattn.visualize.command") > _layer("visattn.visualize.figures")


def test_no_module_imports_a_higher_layer() -> None:
    """Imports go down or sideways, never up: at module level and inside functions alike (a
    lower module that needs a higher one is in the wrong place)."""
    upward = []
    for imp in _all_imports():
        inner = _module(imp.target)
        if inner is None or _front_door(imp.source.module) or _front_door(inner):
            continue
        if _layer(inner) > _layer(imp.source.module):
            upward.append(f"{imp} (layer {_layer(imp.source.module)} -> {_layer(inner)})")
    assert not upward, "imports of a higher layer:\n" + "\n".join(upward)
