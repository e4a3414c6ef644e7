"""Efficient Local Attention (Xu, Wan; 2024, "ELA: Efficient Local Attention for Deep
Convolutional Neural Networks", arXiv:2403.01123)."""

from __future__ import annotations

import math

import torch
import torch.nn as nn

from ._utils import axis_mean, check_positive_int, gate_hw, get_layer
from .capture import is_capturing, record_attention
from .identity import ScaledSigmoid
from .registry import register_block

# plain torch.fx traces (and torchvision's) call them as one node: they test the layout
torch.fx.wrap("axis_mean")
torch.fx.wrap("gate_hw")


@register_block("ela", family="hybrid", paper="Xu & Wan, 2024")
class EfficientLocalAttention(nn.Module):
    """ELA block: coordinate attention without channel reduction, 1-D convolutions and GroupNorm.

    Follows the paper's formulation of ELA:

    * strip pooling ``z^h_c(h) = 1/W sum_i x_c(h, i)`` ``(N, C, H)`` and
      ``z^w_c(w) = 1/H sum_j x_c(j, w)`` ``(N, C, W)`` (as coordinate attention);
    * ``y^h = sigma(G_n(F_h(z^h)))``, ``y^w = sigma(G_n(F_w(z^w)))``: ``F`` a 1-D convolution of
      size ``k`` along the strip (depthwise by default, no bias), ``G_n`` GroupNorm;
    * ``Y = x * y^h * y^w``.

    The paper's ELA-B (``k = 7``, 16 GroupNorm groups, depthwise) is the default; ELA-T is
    ``kernel_size=5, num_groups=32``, ELA-S/L use ``conv_groups=C // 8``. The authors' code applies
    the SAME convolution and GroupNorm to both strips (``shared=True``, default). timm's
    ``EfficientLocalAttn`` keeps one of each per direction (``shared=False``), normalises with ONE
    group (``num_groups=1``) and puts a SiLU between the norm and the sigmoid
    (``act_layer="silu"``).

    GroupNorm needs its groups to divide ``C``: ``gcd(num_groups, C)`` groups are used (16 for
    C=256, 8 for C=72).

    Shapes: ``(N, C, H, W) -> (N, C, H, W)``; attention map ``y^h * y^w`` ``(N, C, H, W)`` (only
    computed while ``capture_attention`` is active).

    Parameters (default options): ``k C + 2 C`` (``shared=False``: ``2 k C + 4 C``; ``conv_groups
    = g``: ``k C^2 / g`` per conv).

    Args:
        channels: input channels ``C``.
        kernel_size: positive odd 1-D kernel ``k`` (7 for ELA-B).
        num_groups: GroupNorm groups (16 for ELA-B; ``gcd(num_groups, C)`` used).
        conv_groups: groups of the 1-D conv; ``None`` = ``C`` (depthwise).
        shared: one conv and norm for both strips (authors' code) or one per strip (timm).
        act_layer: activation between norm and gate (name or class); ``"identity"`` in the paper.
        gate_layer: gate (name or class), sigmoid in the paper.
    """

    def __init__(
        self,
        channels: int,
        kernel_size: int = 7,
        num_groups: int = 16,
        conv_groups: int | None = None,
        shared: bool = True,
        act_layer: str | type[nn.Module] = "identity",
        gate_layer: str | type[nn.Module] = "sigmoid",
    ) -> None:
        super().__init__()
        check_positive_int("kernel_size", kernel_size, odd=True)
        check_positive_int("num_groups", num_groups)
        if conv_groups is None:
            conv_groups = channels
        check_positive_int("conv_groups", conv_groups)
        if channels % conv_groups:
            raise ValueError(f"option 'conv_groups'={conv_groups} must divide channels={channels}")
        groups = math.gcd(num_groups, channels)
        self.shared = bool(shared)

        def conv() -> nn.Conv2d:  # (k, 1): the strip is laid out along H
            return nn.Conv2d(
                channels,
                channels,
                (kernel_size, 1),
                padding=(kernel_size // 2, 0),
                groups=conv_groups,
                bias=False,
            )

        self.conv_h = conv()
        self.norm_h = nn.GroupNorm(groups, channels)
        self.conv_w = None if self.shared else conv()
        self.norm_w = None if self.shared else nn.GroupNorm(groups, channels)
        self.act = get_layer(act_layer, "act_layer")()
        self.gate = get_layer(gate_layer, "gate_layer")()

    def init_identity(self) -> None:
        """native: GroupNorm scale and shift zero, gate 2*sigmoid (ScaledSigmoid): y^h = y^w = 1."""
        for norm in (self.norm_h, self.norm_w):
            if norm is not None:
                nn.init.zeros_(norm.weight)
                nn.init.zeros_(norm.bias)
        self.gate = ScaledSigmoid(2.0)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        z_h = axis_mean(x, 3)  # (N, C, H, 1)
        z_w = axis_mean(x, 2).transpose(2, 3)  # (N, C, W, 1)
        if self.conv_w is None or self.norm_w is None:
            y_h = self.gate(self.act(self.norm_h(self.conv_h(z_h))))
            y_w = self.gate(self.act(self.norm_h(self.conv_h(z_w))))
        else:
            y_h = self.gate(self.act(self.norm_h(self.conv_h(z_h))))
            y_w = self.gate(self.act(self.norm_w(self.conv_w(z_w))))
        y_w = y_w.transpose(2, 3)  # (N, C, 1, W)
        if not torch.jit.is_scripting():  # noqa: SIM102 (scripting skips the inner test)
            if is_capturing(self):  # the (N, C, H, W) map costs a full pass: only when asked
                record_attention(self, y_h * y_w)
        return gate_hw(x, y_h, y_w)

    def extra_repr(self) -> str:
        return f"shared={self.shared}"
