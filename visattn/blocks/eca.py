"""Efficient Channel Attention (Wang, Wu, Zhu, Li, Zuo, Hu; CVPR 2020, "ECA-Net: Efficient Channel
Attention for Deep Convolutional Neural Networks")."""

from __future__ import annotations

import torch
import torch.nn as nn

from ._utils import check_positive_int, eca_kernel_size, get_layer
from .capture import record_attention
from .registry import register_block


@register_block("eca", family="channel", paper="Wang et al., CVPR 2020")
class EfficientChannelAttention(nn.Module):
    """ECA block: SE without dimensionality reduction, a 1-D convolution across channels.

    Follows Eqs. (9)-(12) of the paper:

    * ``y = GAP(x)`` (global average pooling, one value per channel),
    * ``w = sigmoid(C1D_k(y))``: a 1-D convolution of size ``k`` over the channel axis, shared by
      all channels, no bias, zero padding (Eq. (10)),
    * ``k = |log2(C) / gamma + b / gamma|_odd`` with ``gamma=2, b=1`` (Eq. (12), the nearest odd
      number; e.g. ``k=3`` for C=64, ``k=5`` for C=256),
    * scale ``out_c = w_c * x_c``.

    Unlike timm's ``EcaModule`` the adaptive kernel is not raised to at least 3 (the paper and the
    official code allow ``k=1`` for ``C < 4``).

    Shapes: ``(N, C, H, W) -> (N, C, H, W)``; attention map ``(N, C, 1, 1)``.

    Parameters (default options): ``k = |log2(C)/2 + 1/2|_odd``.

    Args:
        channels: input channels ``C``.
        kernel_size: explicit positive odd ``k`` (``gamma``/``b`` then unused); ``None`` (default)
            adapts it to ``C``.
        gamma: ``gamma`` of Eq. (12).
        b: ``b`` of Eq. (12).
        gate_layer: gate (name or class), sigmoid in the paper.
    """

    def __init__(
        self,
        channels: int,
        kernel_size: int | None = None,
        gamma: float = 2.0,
        b: float = 1.0,
        gate_layer: str | type[nn.Module] = "sigmoid",
    ) -> None:
        super().__init__()
        if kernel_size is None:
            if isinstance(gamma, bool) or not isinstance(gamma, (int, float)) or gamma <= 0:
                raise ValueError(f"option 'gamma' must be a positive number, got {gamma!r}")
            if isinstance(b, bool) or not isinstance(b, (int, float)):
                raise ValueError(f"option 'b' must be a number, got {b!r}")
            kernel_size = eca_kernel_size(channels, gamma, b)
        check_positive_int("kernel_size", kernel_size, odd=True)
        self.kernel_size = kernel_size
        self.conv = nn.Conv1d(1, 1, kernel_size, padding=kernel_size // 2, bias=False)
        self.gate = get_layer(gate_layer, "gate_layer")()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        n, c = x.shape[:2]
        y = self.conv(x.mean((2, 3)).view(n, 1, c))
        w = self.gate(y).view(n, c, 1, 1)
        if not torch.jit.is_scripting():
            record_attention(self, w)
        return x * w

    def extra_repr(self) -> str:
        return f"kernel_size={self.kernel_size}"
