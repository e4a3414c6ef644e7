"""The suite's guard against order-dependent results from log handlers (tests/conftest.py): a
handler left on a test's closed output stream is given an open one, and no other is touched."""

from __future__ import annotations

import io
import logging

from helpers.logs import rebind_closed_handlers


def test_a_handler_left_on_a_closed_stream_writes_to_the_open_one() -> None:
    logger = logging.getLogger("visattn_tests.handler_made_inside_a_test")
    captured, kept = io.StringIO(), io.StringIO()  # a test's captured stream, another
    left, other = logging.StreamHandler(captured), logging.StreamHandler(kept)
    logger.propagate = False
    logger.addHandler(left)
    logger.addHandler(other)
    try:
        captured.close()  # the test ended
        now = io.StringIO()
        changed = rebind_closed_handlers(now)
        assert left in changed and other not in changed
        logger.warning("a later test logs")  # before the guard: "I/O operation on closed file"
        assert now.getvalue() == kept.getvalue() == "a later test logs\n"
        assert left.stream is now and other.stream is kept
    finally:
        logger.removeHandler(left)
        logger.removeHandler(other)
