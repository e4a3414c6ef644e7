"""Shuffle attention of SA-Net (Zhang, Yang; ICASSP 2021, "SA-Net: Shuffle Attention for Deep
Convolutional Neural Networks")."""

from __future__ import annotations

import torch
import torch.nn as nn

from . import _stats
from ._utils import get_layer, same_memory_format, spatial_mean
from .capture import is_capturing, record_attention
from .registry import register_block

torch.fx.wrap("same_memory_format")  # a leaf for torch.fx: it reads the input's strides


@register_block("shuffle", family="hybrid", paper="Zhang et al., ICASSP 2021")
class ShuffleAttention(nn.Module):
    """Shuffle attention: per group, half the channels get a channel gate and half a spatial gate;
    then a channel shuffle mixes the groups.

    Follows Sec. 3 of the paper. The channels are split into ``G`` groups ``X_k`` and each group
    into two halves ``X_k1``, ``X_k2`` of ``C / (2G)`` channels:

    * channel branch (Eqs. (1)-(2)): ``s = GAP(X_k1)``, ``X'_k1 = sigmoid(W1 s + b1) * X_k1``;
    * spatial branch (Eq. (3)): ``X'_k2 = sigmoid(W2 GN(X_k2) + b2) * X_k2``, with group
      normalisation over each channel's ``H x W`` map (one channel per GN group, affine, as in
      the official code);
    * aggregation: ``[X'_k1, X'_k2]`` for every group in order, then a channel shuffle with 2
      groups (channel ``j`` of the first half and channel ``j`` of the second half become
      neighbours).

    ``W1, b1, W2, b2`` (shape ``C / (2G)``) and the GN affine are shared by all groups. They start
    as in the official code: weights 0, biases 1 (GN: 1 and 0).

    Groups: ``G = 64`` in the paper's ResNets. ``groups=None`` (default) takes 64 when ``2G``
    divides ``C``, else the largest ``G`` below 64 that does (16 for C=32, 36 for C=72); an
    explicit ``groups`` must satisfy it, and ``C`` must be even.

    Because of the shuffle the output's channels are a permutation of the gated input's, so the
    block has no natural identity form; ``init="identity"`` uses the generic wrapper.

    Shapes: ``(N, C, H, W) -> (N, C, H, W)``. The attention map recorded is the gate each input
    channel receives, in the input's channel order (``y = shuffle(map * x)``), ``(N, C, H, W)``
    (built only while ``capture_attention`` is active).

    Parameters: ``6 C / (2G) = 3 C / G`` (``W1, b1, W2, b2`` and the GN affine; 12 for C=256,
    G=64).

    Args:
        channels: input channels ``C``.
        groups: ``G``, or ``None`` for the rule above.
        gate_layer: gate (name or class), sigmoid in the paper.
    """

    def __init__(
        self,
        channels: int,
        groups: int | None = None,
        gate_layer: str | type[nn.Module] = "sigmoid",
    ) -> None:
        super().__init__()
        self.groups = _stats.resolve_groups(channels, groups, 64, split=2)
        half = channels // (2 * self.groups)
        self.half = half
        self.cweight = nn.Parameter(torch.zeros(1, half, 1, 1))
        self.cbias = nn.Parameter(torch.ones(1, half, 1, 1))
        self.sweight = nn.Parameter(torch.zeros(1, half, 1, 1))
        self.sbias = nn.Parameter(torch.ones(1, half, 1, 1))
        self.gn = nn.GroupNorm(half, half)
        self.gate = get_layer(gate_layer, "gate_layer")()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        n, c, h, w = x.shape
        xg = x.reshape(n * self.groups, 2 * self.half, h, w)
        x0, x1 = xg[:, : self.half], xg[:, self.half :]
        a0 = self.gate(self.cweight * spatial_mean(x0) + self.cbias)
        a1 = self.gate(self.sweight * self.gn(x1) + self.sbias)
        if not torch.jit.is_scripting():  # noqa: SIM102 (TorchScript must not see is_capturing)
            if is_capturing(self):
                a = torch.cat((a0.expand_as(x0), a1), 1).reshape(n, c, h, w)
                record_attention(self, a)
        out = torch.cat((x0 * a0, x1 * a1), 1)  # (N G, C / G, H, W), group by group
        # channel shuffle with 2 groups: (N, 2, C/2, H, W) -> (N, C/2, 2, H, W)
        out = out.reshape(n, 2, c // 2, h, w).transpose(1, 2).reshape(n, c, h, w)
        return same_memory_format(out, x)

    def extra_repr(self) -> str:
        return f"groups={self.groups}"
