"""Fixtures of the model and placement tests."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from helpers.placement import registered_conv_block


@pytest.fixture
def conv_block() -> Iterator[str]:
    """The name of a conv-replacing test block, registered for the duration of the test."""
    with registered_conv_block() as name:
        yield name
