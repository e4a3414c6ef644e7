"""Log handlers that outlive the stream they were made with (see ``tests/conftest.py``)."""

from __future__ import annotations

import logging
from typing import TextIO


def rebind_closed_handlers(stream: TextIO) -> list[logging.StreamHandler]:
    """Give every stream handler of every logger whose stream is closed ``stream`` instead.

    Lightning, torchmetrics and huggingface_hub each add a handler when first imported (where
    the root logger has none), bound to ``sys.stderr`` as it is then. Inside a test that uses
    ``capsys`` or ``capfd`` that is the test's own stream, closed when the test ends, and every
    later test that logs through the library meets "I/O operation on closed file". Returns the
    handlers it changed."""
    changed = []
    for logger in [logging.getLogger(), *logging.Logger.manager.loggerDict.values()]:
        for handler in getattr(logger, "handlers", ()):
            old = getattr(handler, "stream", None)
            if isinstance(handler, logging.StreamHandler) and getattr(old, "closed", False):
                with handler.lock:  # not setStream: it flushes the closed stream first
                    handler.stream = stream
                changed.append(handler)
    return changed
