"""Small facts about a network that several modules need: the device (and dtype) its weights live
on, and a scope that runs it in eval mode and then restores the mode of each of its modules."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import torch
import torch.nn as nn

__all__ = ["device_of", "eval_mode", "factory_of"]


def _reference(net: nn.Module) -> torch.Tensor | None:
    """``net``'s first parameter, else its first buffer (a network of buffers only), else None."""
    ref = next(net.parameters(), None)
    return next(net.buffers(), None) if ref is None else ref


def device_of(net: nn.Module) -> torch.device:
    """The device of ``net``'s first parameter or buffer (the CPU for a network without)."""
    ref = _reference(net)
    return ref.device if ref is not None else torch.device("cpu")


def factory_of(net: nn.Module) -> dict[str, Any]:
    """``{"device", "dtype"}`` of ``net``'s first parameter or buffer, for tensors and modules
    made to join it (``torch.randn(..., **factory_of(net))``); ``{}`` for a network without. A
    non-float reference (an integer buffer) gives its device and float32."""
    ref = _reference(net)
    if ref is None:
        return {}
    return {"device": ref.device, "dtype": ref.dtype if ref.is_floating_point() else torch.float32}


@contextmanager
def eval_mode(net: nn.Module) -> Iterator[nn.Module]:
    """``net`` in eval mode inside the ``with`` block; when it exits, also on an error, every
    module has the mode it had before (a network in training with frozen, eval-mode norms keeps
    them frozen: ``net.train()`` alone would switch them back to training)."""
    modes = [(m, m.training) for m in net.modules()]
    net.eval()
    try:
        yield net
    finally:
        for m, mode in modes:
            m.training = mode
