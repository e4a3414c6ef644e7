"""Split attention (Zhang, Wu, Zhang, Zhu, Lin, Zhang, Sun, He, Mueller, Manmatha, Li, Smola;
2020, "ResNeSt: Split-Attention Networks", CVPRW 2022)."""

from __future__ import annotations

import torch
import torch.nn as nn

from ._utils import (
    check_positive_int,
    init_conv_io,
    reduced_channels,
    same_memory_format,
    spatial_mean,
)
from .capture import record_attention
from .conventions import Reduced
from .registry import register_block

# format bookkeeping outside the traced graph (torch.fx cannot branch on a proxy)
torch.fx.wrap("same_memory_format")

__all__ = ["SplitAttention"]


@register_block(
    "splat",
    family="channel",
    paper="Zhang et al., ResNeSt 2020",
    replaces_conv=True,
    reduced=Reduced(width="rd_channels", base=lambda c, options: c * options["radix"]),
)
class SplitAttention(nn.Module):
    """Split-attention conv: ``R`` splits per cardinal group, mixed by an r-softmax.

    Follows Sec. 3.1 of the paper in its radix-major form (Sec. 3.3, Fig. 4, the official code):

    * splits: one conv with ``G R`` groups gives ``R`` splits ``U_1..U_R`` of ``C'`` channels
      each (split ``i`` holds the ``G`` cardinal groups' ``i``-th split), each followed by BN and
      ReLU;
    * ``U^ = sum_i U_i`` (Eq. 1), ``s = GAP(U^)``;
    * ``a_i(c) = exp(G^c_i(s)) / sum_j exp(G^c_j(s))`` for ``R > 1``, ``sigmoid(G^c(s))`` for
      ``R = 1`` (Eq. 3), with ``G = fc2 . ReLU . BN . fc1`` (1x1 convs with bias, grouped by
      cardinality; ``fc1: C' -> d``, ``fc2: d -> R C'``), the softmax taken over the splits within
      each cardinal group;
    * ``V(c) = sum_i a_i(c) U_i(c)`` (Eq. 2).

    ``d = max(C R / reduction, min_rd_channels)`` as in the official code (``C`` the input
    channels; timm rounds it to a multiple of 8). The convs include BN and ReLU, so at ``conv``
    the norm and activation after the replaced conv are redundant (``includes_norm_act``;
    ResNeSt drops them).

    Shapes: ``(N, C, H, W) -> (N, C', H / s, W / s)`` (sizes rounded up as for any padded strided
    conv). Attention map ``(N, C', 1, 1)``: the weight of the first split (``R = 2``: the second is
    ``1 - a_1``; ``R = 1``: the sigmoid gate).

    Parameters (``k`` kernel, ``G`` groups, ``norm=True``):
    ``C C' k^2 / G + 3 R C' + 3 d + (C' d + d R C') / G`` (``norm=False``: ``- 2 R C' - 2 d``).

    Args:
        channels: input channels ``C``.
        out_channels: output channels ``C'`` (default ``C``).
        stride: stride of the conv. (ResNeSt's network tweak "average downsampling" strides with a
            3x3 average pool instead; that is a placement detail and not part of this block.)
        radix: splits per cardinal group ``R`` (paper 2).
        groups: cardinality ``G`` (ResNeSt-50: 1).
        kernel_size: conv kernel (3).
        dilation: conv dilation.
        reduction: ``d = C R / reduction`` (official 4).
        min_rd_channels: lower bound of ``d`` (official 32).
        rd_channels: explicit ``d`` (overrides the two above).
        norm: BN after the conv and after ``fc1`` (paper and official code; timm's ``SplitAttn``
            leaves them out unless given a norm layer).
    """

    includes_norm_act = True

    def __init__(
        self,
        channels: int,
        out_channels: int | None = None,
        stride: int = 1,
        radix: int = 2,
        groups: int = 1,
        kernel_size: int = 3,
        dilation: int = 1,
        reduction: float = 4,
        min_rd_channels: int = 32,
        rd_channels: int | None = None,
        norm: bool = True,
    ) -> None:
        super().__init__()
        out = init_conv_io(self, channels, out_channels, stride)
        for option, value in (
            ("radix", radix),
            ("groups", groups),
            ("dilation", dilation),
            ("min_rd_channels", min_rd_channels),
        ):
            check_positive_int(option, value)
        check_positive_int("kernel_size", kernel_size, odd=True)
        if channels % (groups * radix):
            raise ValueError(
                f"options 'groups'={groups} x 'radix'={radix} must divide channels={channels}"
            )
        if out % groups:
            raise ValueError(f"option 'groups'={groups} must divide out_channels={out}")
        if rd_channels is not None:
            check_positive_int("rd_channels", rd_channels)
            d = rd_channels
        else:
            d = reduced_channels(channels * radix, reduction, min_channels=min_rd_channels)
        if d % groups:
            raise ValueError(f"option 'groups'={groups} must divide the attention width d={d}")
        self.radix, self.groups, self.rd_channels = radix, groups, d

        self.conv = nn.Conv2d(
            channels,
            out * radix,
            kernel_size,
            stride,
            padding=dilation * (kernel_size - 1) // 2,
            dilation=dilation,
            groups=groups * radix,
            bias=False,
        )
        self.bn0 = nn.BatchNorm2d(out * radix) if norm else nn.Identity()
        self.act0 = nn.ReLU(inplace=True)
        self.fc1 = nn.Conv2d(out, d, 1, groups=groups)
        self.bn1 = nn.BatchNorm2d(d) if norm else nn.Identity()
        self.act1 = nn.ReLU(inplace=True)
        self.fc2 = nn.Conv2d(d, out * radix, 1, groups=groups)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        u = self.act0(self.bn0(self.conv(x)))  # (N, R C', H, W), split-major
        n, r, c = u.shape[0], self.radix, self.out_channels
        splits = u.view(n, r, c, u.shape[2], u.shape[3])
        # the splits' sum in float32 (it may pass float16's range where no split does)
        wide = torch.promote_types(u.dtype, torch.float32)
        s = spatial_mean(splits.sum(1, dtype=wide)).to(u.dtype)
        logits = self.fc2(self.act1(self.bn1(self.fc1(s))))  # (N, R C', 1, 1), group-major
        if r > 1:
            # within cardinal group g the logits are ordered (split, channel): softmax over splits
            a = logits.view(n, self.groups, r, c // self.groups).softmax(dim=2)
            a = a.transpose(1, 2).reshape(n, r, c, 1, 1)
        else:
            a = torch.sigmoid(logits).view(n, 1, c, 1, 1)
        if not torch.jit.is_scripting():
            record_attention(self, a[:, 0])
        return same_memory_format((splits * a).sum(1), x)

    def extra_repr(self) -> str:
        return (
            f"{self.in_channels}, {self.out_channels}, stride={self.stride}, radix={self.radix}, "
            f"groups={self.groups}, rd_channels={self.rd_channels}"
        )
