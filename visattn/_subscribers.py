"""Subscribers of a registry: callbacks told which names entered and left it, so that another
layer (the timm bridge) can follow a registry that knows nothing of it."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence

__all__ = ["Listener", "Subscribers"]

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
