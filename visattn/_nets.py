"""Two small facts about a network that several modules need: the device its parameters live on,
and a scope that runs it in eval mode and then restores the mode it had."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import torch
import torch.nn as nn

__all__ = ["device_of", "eval_mode"]


def device_of(net: nn.Module) -> torch.device:
    """The device of ``net``'s first parameter (the CPU for a network without parameters)."""
    param = next(net.parameters(), None)
    return param.device if param is not None else torch.device("cpu")


@contextmanager
def eval_mode(net: nn.Module) -> Iterator[nn.Module]:
    """``net`` in eval mode inside the ``with`` block, back in the mode it had (train or eval)
    when the block exits, also on an error."""
    was_training = net.training
    net.eval()
    try:
        yield net
    finally:
        net.train(was_training)
