"""Efficient multi-scale attention (Ouyang, He, Zhang, Luo, Guo, Zhan, Huang; ICASSP 2023,
"Efficient Multi-Scale Attention Module with Cross-Spatial Learning")."""

from __future__ import annotations

import torch
import torch.nn as nn

from ._utils import check_positive_int, same_memory_format
from .capture import is_capturing, record_attention
from .registry import register_block

torch.fx.wrap("same_memory_format")  # a leaf for torch.fx: it reads the input's strides

__all__ = ["EfficientMultiScaleAttention", "default_groups"]

MAX_GROUPS = 32  # the official code's default ``factor``


def default_groups(channels: int, limit: int = MAX_GROUPS) -> int:
    """The largest divisor of ``channels`` that is at most ``limit`` (32 -> 32, 72 -> 24)."""
    return max(g for g in range(1, min(channels, limit) + 1) if channels % g == 0)


@register_block("ema", family="hybrid", paper="Ouyang et al., ICASSP 2023")
class EfficientMultiScaleAttention(nn.Module):
    """EMA: grouped coordinate-style 1x1 branch and 3x3 branch, fused by cross-spatial learning.

    The input is split into ``G`` groups of ``c = C / G`` channels, folded into the batch (each
    group is processed alike, with shared weights). Per group ``X`` (``c x H x W``), Sec. 3 and
    Fig. 3 of the paper:

    * 1x1 branch: ``z_h = mean_W X`` ``(c, H)``, ``z_w = mean_H X`` ``(c, W)``; one shared 1x1 conv
      ``W_1: c -> c`` (bias) on their concatenation along the spatial axis, split back into
      ``f_h``, ``f_w``; ``X_1 = GN(X * sigmoid(f_h) * sigmoid(f_w))`` with GroupNorm of ``c``
      groups (one per channel, affine);
    * 3x3 branch: ``X_2 = W_3 X`` (3x3 conv ``c -> c``, bias, zero padding 1);
    * cross-spatial learning: ``w = softmax_c(GAP(X_1)) X_2 + softmax_c(GAP(X_2)) X_1``
      ``(1, H, W)`` (each softmax over the ``c`` channels, then a weighted sum of the other
      branch's channels);
    * output ``Y = X * sigmoid(w)``, the same spatial gate for all ``c`` channels of the group.

    ``groups`` defaults to the largest divisor of ``C`` not above 32 (the official code's
    ``factor=32``): 32 for ``C = 32, 64, ...``, 24 for ``C = 72``. An explicit ``groups`` must
    divide ``C`` (the official code only checks ``C // G > 0`` and, when ``G`` does not divide
    ``C``, its reshape mixes samples of the batch). No other difference from the official code
    (``YOLOonMe/EMA-attention-module``) is known.

    Recorded attention: the applied gate ``sigmoid(w)`` of every group, repeated over its ``c``
    channels: ``(N, C, H, W)``, ``Y = X * map``.

    Shapes: ``(N, C, H, W) -> (N, C, H, W)``.

    Parameters (``c = C / G``): ``10 c^2 + 4 c`` (``W_1``: ``c^2 + c``; ``W_3``: ``9 c^2 + c``;
    GroupNorm: ``2 c``).

    Args:
        channels: input channels ``C``.
        groups: ``G``, a divisor of ``C``; ``None`` picks the default above.
    """

    def __init__(self, channels: int, groups: int | None = None) -> None:
        super().__init__()
        if groups is None:
            groups = default_groups(channels)
        check_positive_int("groups", groups)
        if channels % groups:
            raise ValueError(f"option 'groups'={groups} must divide channels={channels}")
        c = channels // groups
        self.groups, self.group_channels = groups, c
        self.conv1x1 = nn.Conv2d(c, c, 1)
        self.conv3x3 = nn.Conv2d(c, c, 3, padding=1)
        self.gn = nn.GroupNorm(c, c)
        self.gate_scale = 1.0

    def init_identity(self) -> None:
        """native: 3x3 conv and GroupNorm affine start at zero, so w = 0; gate 2*sigmoid."""
        for t in (self.conv3x3.weight, self.conv3x3.bias, self.gn.weight, self.gn.bias):
            nn.init.zeros_(t)
        self.gate_scale = 2.0

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        n, ch, h, w = x.shape
        g = x.reshape(n * self.groups, self.group_channels, h, w)
        z = torch.cat([g.mean(dim=3, keepdim=True), g.mean(dim=2, keepdim=True).transpose(2, 3)], 2)
        f_h, f_w = torch.split(self.conv1x1(z), [h, w], dim=2)  # (nG, c, H, 1), (nG, c, W, 1)
        x1 = self.gn(g * torch.sigmoid(f_h) * torch.sigmoid(f_w).transpose(2, 3))
        x2 = self.conv3x3(g)
        s1 = torch.softmax(x1.mean(dim=(2, 3)), dim=-1).unsqueeze(1)  # (nG, 1, c)
        s2 = torch.softmax(x2.mean(dim=(2, 3)), dim=-1).unsqueeze(1)
        wts = s1.to(x2.dtype) @ x2.flatten(2) + s2.to(x1.dtype) @ x1.flatten(2)  # (nG, 1, HW)
        gate = torch.sigmoid(wts).reshape(n * self.groups, 1, h, w)
        if self.gate_scale != 1.0:
            gate = gate * self.gate_scale
        if not torch.jit.is_scripting():  # noqa: SIM102 (TorchScript needs it alone)
            if is_capturing(self):
                full = gate.expand(-1, self.group_channels, -1, -1)
                record_attention(self, full.reshape(n, ch, h, w))
        return same_memory_format((g * gate).reshape(n, ch, h, w), x)

    def extra_repr(self) -> str:
        return f"groups={self.groups}, group_channels={self.group_channels}"
