"""Importing the benchmark scripts, which live in ``benchmarks/`` and are not a package."""

from __future__ import annotations

import importlib
import sys
from collections.abc import Iterator
from types import ModuleType

from helpers.paths import REPO


def benchmark_module(name: str) -> Iterator[ModuleType]:
    """Yield ``benchmarks/<name>.py`` imported, with ``benchmarks/`` on ``sys.path`` meanwhile
    (the scripts import their shared ``_common`` module from there)."""
    path = str(REPO / "benchmarks")
    sys.path.insert(0, path)
    try:
        yield importlib.import_module(name)
    finally:
        sys.path.remove(path)
