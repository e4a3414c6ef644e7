"""Capture the attention weights that blocks apply during a forward pass.

Every registered block calls :func:`record_attention` with the weights it multiplies (or adds)
into its input. Outside :func:`capture_attention` that call is a single attribute test, so it
costs nothing and traces cleanly under ``torch.compile``, ``torch.export`` and ``torch.fx``.
Blocks make the call under ``if not torch.jit.is_scripting():``, so a TorchScript-compiled block
skips it (a scripted model records no maps).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager

import torch
import torch.nn as nn

from .registry import is_block

__all__ = ["capture_attention", "is_capturing", "record_attention"]

_SINK = "_visattn_sinks"
Sink = Callable[[torch.Tensor], None]


def is_capturing(module: nn.Module) -> bool:
    """True while at least one :func:`capture_attention` context collects ``module``'s map.

    Blocks whose applied weights are a product of factors (``x * a * b``) ask this before building
    the full ``(N, C, H, W)`` map, which would otherwise cost an extra pass on every forward. It
    reads module state, never data: a static branch for ``torch.compile``/``torch.export``/fx.
    """
    return bool(getattr(module, _SINK, None))


def record_attention(module: nn.Module, weights: torch.Tensor) -> None:
    """Hand ``weights`` (the map ``module`` applied) to every active :func:`capture_attention`."""
    sinks = getattr(module, _SINK, None)
    if sinks:
        w = weights.detach()
        for sink in sinks:
            sink(w)


@contextmanager
def capture_attention(model: nn.Module) -> Iterator[dict[str, torch.Tensor]]:
    """Collect the attention maps of every registered block in ``model`` while the context is open.

    Yields a dict ``{module path: tensor}`` filled during forward passes inside the context: one
    entry per block that ran, holding the detached weights it applied (the last call wins when a
    block runs more than once). A model that is itself a block is recorded under ``""``.

    The dict keeps what was captured after the context exits, so it can be read after the
    ``with`` block; the hooks are removed on exit, and nothing else holds the maps. Captures may
    be nested or overlap (an inner one on ``model.layer2`` inside an outer one on ``model``): each
    sees every block of its own subtree, with paths relative to the module it was given.
    """
    maps: dict[str, torch.Tensor] = {}
    blocks = [(path, m) for path, m in model.named_modules() if is_block(m)]
    if not blocks:
        raise ValueError(
            f"capture_attention: {type(model).__name__} contains no registered attention block"
        )

    def sink_for(path: str) -> Sink:
        def sink(w: torch.Tensor) -> None:
            maps[path] = w

        return sink

    added: list[tuple[nn.Module, Sink]] = []
    for path, m in blocks:
        sink = sink_for(path)
        m.__dict__[_SINK] = (*m.__dict__.get(_SINK, ()), sink)
        added.append((m, sink))
    try:
        yield maps
    finally:
        for m, sink in added:
            rest = tuple(s for s in m.__dict__.get(_SINK, ()) if s is not sink)
            if rest:
                m.__dict__[_SINK] = rest
            else:
                m.__dict__.pop(_SINK, None)
