"""Checks of plain values that several layers share (placements, sweeps)."""

from __future__ import annotations

from typing import Any

__all__ = ["is_int"]


def is_int(v: Any) -> bool:
    """``v`` is an ``int`` and not a ``bool`` (YAML's ``true`` is not a count)."""
    return isinstance(v, int) and not isinstance(v, bool)
