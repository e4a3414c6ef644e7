"""Error text shared by the layers that report another layer's exception in one line."""

from __future__ import annotations

__all__ = ["OptionError", "first_line"]


class OptionError(ValueError):
    """An option whose value cannot work; the message names the option and the values it may
    take, so a command line can print it in one line."""


def first_line(exc: BaseException, *, limit: int | None = None) -> str:
    """``"<type>: <first non-blank line of the message>"`` (``"<type>"`` for an empty message),
    cut to ``limit`` characters if given."""
    first = next((ln.strip() for ln in str(exc).splitlines() if ln.strip()), "")
    text = f"{type(exc).__name__}: {first}" if first else type(exc).__name__
    return text if limit is None else text[:limit]
