"""Capture the attention weights that blocks apply during a forward pass.

Every registered block calls :func:`record_attention` with the weights it multiplies (or adds)
into its input. Outside :func:`capture_attention` that call is a single attribute test, so it
costs nothing and traces cleanly under ``torch.compile`` and ``torch.export``.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import torch
import torch.nn as nn

from .registry import is_block

__all__ = ["capture_attention", "is_capturing", "record_attention"]

_SINK = "_visattn_sink"


def is_capturing(module: nn.Module) -> bool:
    """True while a :func:`capture_attention` context collects ``module``'s map.

    Blocks whose applied weights are a product of factors (``x * a * b``) ask this before building
    the full ``(N, C, H, W)`` map, which would otherwise cost an extra pass on every forward. It
    reads module state, never data: a static branch for ``torch.compile``/``torch.export``.
    """
    return getattr(module, _SINK, None) is not None


def record_attention(module: nn.Module, weights: torch.Tensor) -> None:
    """Hand ``weights`` (the map ``module`` applied) to an active :func:`capture_attention`."""
    sink = getattr(module, _SINK, None)
    if sink is not None:
        sink(weights)


@contextmanager
def capture_attention(model: nn.Module) -> Iterator[dict[str, torch.Tensor]]:
    """Collect the attention maps of every registered block in ``model`` while the context is open.

    Yields a dict ``{module path: tensor}`` filled during forward passes inside the context: one
    entry per block that ran, holding the detached weights it applied (the last call wins when a
    block runs more than once). A model that is itself a block is recorded under ``""``. Nothing is
    kept once the context exits: the hooks are removed and the dict is cleared.
    """
    maps: dict[str, torch.Tensor] = {}
    blocks = [(path, m) for path, m in model.named_modules() if is_block(m)]
    if not blocks:
        raise ValueError(
            f"capture_attention: {type(model).__name__} contains no registered attention block"
        )

    def sink_for(path: str):
        def sink(w: torch.Tensor) -> None:
            maps[path] = w.detach()

        return sink

    for path, m in blocks:
        object.__setattr__(m, _SINK, sink_for(path))
    try:
        yield maps
    finally:
        for _, m in blocks:
            m.__dict__.pop(_SINK, None)
        maps.clear()
