"""Shared pytest fixtures."""

from __future__ import annotations

import pytest
import torch


@pytest.fixture(autouse=True)
def _seed() -> None:
    """Every test starts from the same random state, so failures reproduce."""
    torch.manual_seed(0)
