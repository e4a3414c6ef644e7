"""Random weights for a module, so that no check can pass by a zero-initialised layer, unit
statistics or a block that starts as the identity."""

from __future__ import annotations

import torch
import torch.nn as nn
from torch.nn.modules.batchnorm import _BatchNorm


@torch.no_grad()
def randomize(
    module: nn.Module,
    seed: int | None = None,
    *,
    std: float | None = None,
    norms_only: bool = False,
) -> nn.Module:
    """Draw ``module``'s parameters and batch-norm statistics at random, in place; returns
    ``module`` (its mode and dtype unchanged).

    * every parameter from N(0, std^2); without ``std``: tensors of two or more dimensions
      (conv and linear weights) from N(0, 1/fan_in), where fan_in is the size of one output slice,
      and the others from N(0, 0.5^2);
    * every batch norm's running mean from N(0, 0.3^2) and running variance from U(0.5, 1.5);
      without ``std`` also its weight from U(0.5, 1.5) and its bias from N(0, 0.2^2), as in a
      trained network;
    * ``norms_only``: the batch norms only (a randomly initialised backbone standing in for a
      pretrained one; timm zero-initialises the last norm of each residual branch, which would
      make every branch trivial).

    Draws come from a generator seeded with ``seed``, or from torch's global one when ``seed`` is
    None (which the autouse fixture of tests/conftest.py seeds per test).
    """
    gen = None if seed is None else torch.Generator().manual_seed(seed)

    def normal(t: torch.Tensor, s: float) -> None:
        t.copy_(torch.randn(t.shape, generator=gen, dtype=t.dtype) * s)

    def uniform(t: torch.Tensor, low: float) -> None:
        t.copy_(torch.rand(t.shape, generator=gen, dtype=t.dtype) + low)

    if not norms_only:
        for p in module.parameters():
            if std is not None:
                normal(p, std)
            else:
                normal(p, p[0].numel() ** -0.5 if p.dim() > 1 else 0.5)
    for m in module.modules():
        if not isinstance(m, _BatchNorm):
            continue
        if std is None and m.affine:
            uniform(m.weight, 0.5)
            normal(m.bias, 0.2)
        if m.track_running_stats:
            normal(m.running_mean, 0.3)
            uniform(m.running_var, 0.5)
    return module


def assert_same_outputs(
    ours: nn.Module, ref: nn.Module, x: torch.Tensor, tol: float = 1e-10
) -> None:
    """``ours`` (loaded from a file: converted, through a tag, a hub or a round trip) and the
    reference ``ref`` give the same outputs on ``x``; both are cast to float64 and set to eval."""
    ours, ref = ours.double().eval(), ref.double().eval()
    with torch.no_grad():
        torch.testing.assert_close(ours(x.double()), ref(x.double()), rtol=tol, atol=tol)
