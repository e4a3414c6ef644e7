"""Large Selective Kernel (Li, Hou, Wang, Li, Yang, Cheng, Li; ICCV 2023, "Large Selective Kernel
Network for Remote Sensing Object Detection", LSKNet)."""

from __future__ import annotations

import torch
import torch.nn as nn

from ._utils import channel_mean_max, check_positive_int, reduced_channels
from .capture import record_attention
from .registry import register_block

# a leaf for torch.fx: its fused backward is chosen by a test on requires_grad
torch.fx.wrap("channel_mean_max")


def _check_pair(option: str, value: object) -> tuple[int, int]:
    if not isinstance(value, (tuple, list)) or len(value) != 2:
        raise ValueError(f"option '{option}' must be a pair of positive ints, got {value!r}")
    for v in value:
        check_positive_int(option, v)
    return int(value[0]), int(value[1])


@register_block("lsk", family="spatial", paper="Li et al., ICCV 2023 (LSKNet)")
class LargeSelectiveKernel(nn.Module):
    """LSK module: a decomposed large kernel whose two depths are selected per position.

    Follows the LSK module's equations in the paper (the spatial gating unit of LSKNet):

    * large-kernel decomposition: ``U_1 = F^dw_1(X)`` (``k_1 x k_1`` depthwise, dilation
      ``d_1``), ``U_2 = F^dw_2(U_1)`` (``k_2 x k_2`` depthwise, dilation ``d_2``); the defaults
      ``5x5`` then ``7x7`` with dilation 3 give LSKNet's receptive field 23;
    * ``U~_i = F^{1x1}_i(U_i)``, each ``C -> C/2``, ``U~ = [U~_1; U~_2]``;
    * spatial selection: ``SA_avg``, ``SA_max`` the mean and max of ``U~`` over its channels;
      ``SA^ = F^{2->2}([SA_avg; SA_max])`` a ``7x7`` conv; ``SA~_i = sigmoid(SA^_i)``;
    * ``S = F(SA~_1 * U~_1 + SA~_2 * U~_2)`` with ``F`` a 1x1 conv ``C/2 -> C``; ``Y = X * S``.

    Every conv has a bias, as in the authors' ``LSKblock`` (``zcablii/LSKNet``). No difference from
    that code is known. LSKNet wraps the module in ``1x1 conv, GELU, LSK, 1x1 conv`` plus a
    shortcut (its ``Attention``); that wrapper is part of the backbone, not of this block.

    Shapes: ``(N, C, H, W) -> (N, C, H, W)``; attention map ``S``, ``(N, C, H, W)``.

    Parameters (``C_h = C // 2``, defaults): ``3 C C_h + 2 C_h + 77 C + 198``
    (``1.5 C^2 + 78 C + 198`` for even ``C``); depthwise convs ``(k_1^2 + k_2^2 + 2) C``, the two
    ``1x1`` reductions ``2 (C C_h + C_h)``, the squeeze conv ``2 * 2 * 7^2 + 2``, the last conv
    ``C_h C + C``.

    Args:
        channels: input channels ``C`` (at least 2).
        kernel_sizes: ``(k_1, k_2)``, positive odd sizes of the two depthwise convs.
        dilations: ``(d_1, d_2)`` of the two depthwise convs.
    """

    def __init__(
        self,
        channels: int,
        kernel_sizes: tuple[int, int] = (5, 7),
        dilations: tuple[int, int] = (1, 3),
    ) -> None:
        super().__init__()
        k1, k2 = _check_pair("kernel_sizes", kernel_sizes)
        d1, d2 = _check_pair("dilations", dilations)
        for k in (k1, k2):
            check_positive_int("kernel_sizes", k, odd=True)
        half = reduced_channels(channels, 2, option="channels")
        self.conv0 = nn.Conv2d(
            channels, channels, k1, padding=d1 * (k1 - 1) // 2, dilation=d1, groups=channels
        )
        self.conv_spatial = nn.Conv2d(
            channels, channels, k2, padding=d2 * (k2 - 1) // 2, dilation=d2, groups=channels
        )
        self.conv1 = nn.Conv2d(channels, half, 1)
        self.conv2 = nn.Conv2d(channels, half, 1)
        self.conv_squeeze = nn.Conv2d(2, 2, 7, padding=3)
        self.conv = nn.Conv2d(half, channels, 1)

    def init_identity(self) -> None:
        """native: the last 1x1 conv's weight zero and its bias one, so S = 1."""
        nn.init.zeros_(self.conv.weight)
        nn.init.ones_(self.conv.bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        u1 = self.conv0(x)
        u2 = self.conv_spatial(u1)
        a1, a2 = self.conv1(u1), self.conv2(u2)
        sa = torch.sigmoid(self.conv_squeeze(channel_mean_max(torch.cat([a1, a2], dim=1))))
        s = self.conv(a1 * sa[:, 0:1] + a2 * sa[:, 1:2])
        if not torch.jit.is_scripting():
            record_attention(self, s)
        return x * s
