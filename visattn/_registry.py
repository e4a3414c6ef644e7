"""The one registry type, and the close-match wording every "unknown name" error shares.

A :class:`Registry` maps names to entries (block infos, model specs, data sources, released
weight tags, weight converters): registration by :meth:`~Registry.add` or as a decorator
(:meth:`~Registry.register`), which stores the entry and does nothing else; removal; a
``with`` form for tests (:meth:`~Registry.temporarily`); aliases; listing with an ``fnmatch``
pattern and a filter; and lookups that fail with the registry's own error type and one wording:

    unknown <kind> 'nam'; did you mean 'name', 'same'? (<where to look>)

Options and keys are named the same way by :func:`unknown_options`:
``'reductio' (did you mean 'reduction'?)``. ``difflib`` is used here and nowhere else.
"""

from __future__ import annotations

import contextlib
import difflib
import fnmatch
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import Any, Generic, TypeVar

__all__ = [
    "Listener",
    "Registry",
    "Subscribers",
    "UnknownNameError",
    "close_matches",
    "did_you_mean",
    "unknown_options",
]

T = TypeVar("T")


class UnknownNameError(KeyError):
    """A name no registry holds; the message names the closest ones. (A ``KeyError``, shown as
    written: ``KeyError`` itself quotes its argument.)"""

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else ""


def close_matches(word: Any, choices: Iterable[str], n: int = 3, cutoff: float = 0.6) -> list[str]:
    """Up to ``n`` distinct ``choices`` close to ``word`` (``difflib``'s ratio at least
    ``cutoff``); a choice given twice (a name also passed as an extra choice) counts once."""
    return difflib.get_close_matches(str(word), list(dict.fromkeys(choices)), n=n, cutoff=cutoff)


def did_you_mean(word: Any, choices: Iterable[str], n: int = 3, cutoff: float = 0.6) -> str:
    """``"; did you mean 'a', 'b'?"`` for the choices close to ``word``, else ``""``."""
    close = close_matches(word, choices, n, cutoff)
    return f"; did you mean {', '.join(repr(c) for c in close)}?" if close else ""


def unknown_options(unknown: Iterable[Any], valid: Iterable[str]) -> str:
    """``"'reductio' (did you mean 'reduction'?), 'xyz'"``: each unknown option or key, with the
    closest valid one where there is one."""
    valid = list(valid)
    parts = []
    for k in unknown:
        close = close_matches(k, valid, n=1)
        parts.append(f"{str(k)!r}" + (f" (did you mean {close[0]!r}?)" if close else ""))
    return ", ".join(parts)


class Registry(Mapping[str, T], Generic[T]):
    """Names -> entries of one kind, in registration order.

    Args:
        kind: what an entry is, for messages (``"block"``, ``"model"``, ``"dataset"``).
        error: the exception type of an unknown name (:class:`UnknownNameError` or a subclass,
            or ``ValueError`` where callers expect one).
        hint: what an unknown-name message ends with: a string, or a function of the name
            (e.g. where to list the names).
        cutoff: how close a name must be to be suggested (``difflib``'s ratio).

    A mapping: ``name in reg``, ``reg[name]`` (exact names only), iteration over the names in
    registration order. :meth:`lookup` also resolves aliases and names the close matches.
    """

    def __init__(
        self,
        kind: str,
        *,
        error: type[Exception] = UnknownNameError,
        hint: str | Callable[[str], str] = "",
        cutoff: float = 0.6,
    ) -> None:
        self.kind = kind
        self.error = error
        self.hint = hint
        self.cutoff = cutoff
        self._entries: dict[str, T] = {}
        self._aliases: dict[str, str] = {}

    # ---- the mapping
    def __getitem__(self, name: str) -> T:
        return self._entries[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._entries)

    def __len__(self) -> int:
        return len(self._entries)

    def __repr__(self) -> str:
        return f"Registry({self.kind!r}, {len(self)} entries)"

    # ---- registration
    def add(self, name: str, entry: T) -> T:
        """Register ``entry`` under ``name``; a taken name (or alias) raises ``ValueError``."""
        if name in self._entries or name in self._aliases:
            raise ValueError(f"{self.kind} {name!r} is already registered")
        self._entries[name] = entry
        return entry

    def register(self, name: str) -> Callable[[T], T]:
        """Decorator form of :meth:`add`: stores the decorated object and returns it unchanged."""

        def decorator(entry: T) -> T:
            return self.add(name, entry)

        return decorator

    def remove(self, name: str) -> T:
        """Remove ``name`` (and its aliases); returns its entry. An unknown name raises the
        registry's error."""
        if name not in self._entries:
            raise self.unknown(name)
        self._aliases = {a: n for a, n in self._aliases.items() if n != name}
        return self._entries.pop(name)

    @contextlib.contextmanager
    def temporarily(self, name: str, entry: T) -> Iterator[T]:
        """Register ``entry`` for the duration of a ``with`` block, then remove it."""
        self.add(name, entry)
        try:
            yield entry
        finally:
            self.remove(name)

    def alias(self, alias: str, name: str) -> None:
        """Let ``alias`` look up ``name``'s entry (:meth:`lookup`); a taken alias raises."""
        if alias in self._entries or alias in self._aliases:
            raise ValueError(f"{self.kind} {alias!r} is already registered")
        self._aliases[alias] = name

    # ---- lookup and listing
    def lookup(self, name: Any, *, choices: Iterable[str] = ()) -> T:
        """The entry of ``name`` or of the alias ``name``; otherwise the registry's error naming
        the close matches among the names, the aliases and ``choices`` (other names the caller
        accepts, e.g. aliases resolved elsewhere)."""
        if isinstance(name, str):
            if name in self._entries:
                return self._entries[name]
            if name in self._aliases:
                return self._entries[self._aliases[name]]
        raise self.unknown(name, choices=choices)

    def unknown(self, name: Any, *, choices: Iterable[str] = ()) -> Exception:
        """The registry's error for an unknown ``name``, in the shared wording."""
        known = [*self._entries, *self._aliases, *choices]
        hint = self.hint(str(name)) if callable(self.hint) else self.hint
        tail = f" ({hint})" if hint else ""
        return self.error(
            f"unknown {self.kind} {name!r}{did_you_mean(name, known, cutoff=self.cutoff)}{tail}"
        )

    def names(
        self, pattern: str | None = None, where: Callable[[T], bool] | None = None
    ) -> list[str]:
        """Sorted names, those matching the ``fnmatch`` ``pattern`` and whose entry passes
        ``where``."""
        return sorted(
            n
            for n, e in self._entries.items()
            if (pattern is None or fnmatch.fnmatchcase(n, pattern)) and (where is None or where(e))
        )


# --------------------------------------------------------------------------- subscribers
# callbacks told which names entered and left a registry, so that another layer (the timm
# bridge) can follow a registry that knows nothing of it

#: ``listener(added, removed)``: the names that entered and left the registry
Listener = Callable[[Sequence[str], Sequence[str]], None]


class Subscribers:
    """The listeners of one registry."""

    def __init__(self) -> None:
        self._listeners: list[Listener] = []

    def subscribe(self, listener: Listener, current: Iterable[str]) -> Callable[[], None]:
        """Add ``listener``, first telling it of the ``current`` names as added; returns the
        function that unsubscribes it."""
        if not callable(listener):
            raise TypeError(f"a registry listener must be callable, got {listener!r}")
        self._listeners.append(listener)
        listener(sorted(current), [])

        def unsubscribe() -> None:
            if listener in self._listeners:
                self._listeners.remove(listener)

        return unsubscribe

    def notify(self, added: Sequence[str] = (), removed: Sequence[str] = ()) -> None:
        """Tell every listener, in subscription order, of ``added`` and ``removed`` names."""
        if added or removed:
            for listener in list(self._listeners):
                listener(list(added), list(removed))
