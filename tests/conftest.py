"""Shared pytest fixtures."""

from __future__ import annotations

import pytest
import torch


@pytest.fixture(autouse=True)
def _seed() -> None:
    """Every test starts from the same random state, so failures reproduce."""
    torch.manual_seed(0)


@pytest.fixture(autouse=True)
def _one_torch_thread():
    """One intra-op thread: on 2 CPU cores shared with other jobs, OpenMP threads spinning against
    other processes make small forward passes many times slower. Results do not depend on it."""
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)
