"""Plain values that several layers share: the check of a count, the error of an option whose
value cannot work, and the one-line text of another layer's exception."""

from __future__ import annotations

from typing import Any

__all__ = ["OptionError", "first_line", "is_int"]


def is_int(v: Any) -> bool:
    """``v`` is an ``int`` and not a ``bool`` (YAML's ``true`` is not a count)."""
    return isinstance(v, int) and not isinstance(v, bool)


class OptionError(ValueError):
    """An option whose value cannot work; the message names the option and the values it may
    take, so a command line can print it in one line."""


def first_line(exc: BaseException, *, limit: int | None = None) -> str:
    """``"<type>: <first non-blank line of the message>"`` (``"<type>"`` for an empty message),
    cut to ``limit`` characters if given."""
    first = next((ln.strip() for ln in str(exc).splitlines() if ln.strip()), "")
    text = f"{type(exc).__name__}: {first}" if first else type(exc).__name__
    return text if limit is None else text[:limit]
