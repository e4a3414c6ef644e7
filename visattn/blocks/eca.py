"""Efficient Channel Attention (Wang, Wu, Zhu, Li, Zuo, Hu; CVPR 2020, "ECA-Net: Efficient Channel
Attention for Deep Convolutional Neural Networks")."""

from __future__ import annotations

import torch
import torch.nn as nn
import torch.nn.functional as F
from timm.layers import make_divisible

from ._utils import (
    check_choice,
    check_positive_int,
    get_layer,
    resolve_eca_kernel,
    spatial_mean,
)
from .capture import record_attention
from .identity import ScaledSigmoid
from .registry import register_block


@register_block("eca", family="channel", paper="Wang et al., CVPR 2020")
class EfficientChannelAttention(nn.Module):
    r"""ECA block: SE without dimensionality reduction, a 1-D convolution across channels.

    $$
    y = \mathrm{GAP}(x), \qquad
    \omega = \sigma\big(\mathrm{C1D}_k(y)\big), \qquad
    k = \left| \frac{\log_2 C}{\gamma} + \frac{b}{\gamma} \right|_{\mathrm{odd}}, \qquad
    \tilde{x}_c = \omega_c \, x_c
    $$

    Follows Eqs. (9)-(12) of the paper:

    * ``y = GAP(x)`` (global average pooling, one value per channel),
    * ``w = sigmoid(C1D_k(y))``: a 1-D convolution of size ``k`` over the channel axis, shared by
      all channels, no bias, zero padding (Eq. (10)),
    * ``k = |log2(C) / gamma + b / gamma|_odd`` with ``gamma=2, b=1`` (Eq. (12), the nearest odd
      number; e.g. ``k=3`` for C=64, ``k=5`` for C=256),
    * scale ``out_c = w_c * x_c``.

    Unlike timm's ``EcaModule`` the adaptive kernel is not raised to at least 3 (the paper and the
    official code allow ``k=1`` for ``C < 4``); ``min_kernel=3`` raises it as timm does.

    timm's variants (not in the paper):

    * ``padding="circular"`` is timm's ``ceca`` (``CecaModule``): the channel axis is padded
      circularly, so the first and last channels are neighbours;
    * ``mlp=True`` is timm's ``ecam`` (``EcaModule(use_mlp=True)``): a 1-D conv ``1 -> m``
      (kernel 1, bias), ReLU, then the size-``k`` conv ``m -> 1`` (with bias), with
      ``m = mlp_channels`` or timm's ``make_divisible(C / 8, 8)``.

    Shapes: ``(N, C, H, W) -> (N, C, H, W)``; attention map ``(N, C, 1, 1)``.

    Parameters (default options): ``k = |log2(C)/2 + 1/2|_odd``; ``mlp=True``: ``m k + 2 m + 1``.

    Args:
        channels: input channels ``C``.
        kernel_size: explicit positive odd ``k`` (``gamma``/``b`` then unused); ``None`` (default)
            adapts it to ``C``.
        gamma: ``gamma`` of Eq. (12).
        b: ``b`` of Eq. (12).
        padding: ``"zero"`` (paper) or ``"circular"`` (timm's ``ceca``) along the channel axis.
        mlp: timm's ``ecam`` channel MLP before the size-``k`` conv.
        mlp_channels: ``m`` for ``mlp=True``; ``None`` = ``make_divisible(C / 8, 8)`` (timm).
        min_kernel: lower bound of the adaptive ``k`` (odd; 1: the paper, 3: timm's modules).
        gate_layer: gate (name or class), sigmoid in the paper.
    """

    def __init__(
        self,
        channels: int,
        kernel_size: int | None = None,
        gamma: float = 2.0,
        b: float = 1.0,
        padding: str = "zero",
        mlp: bool = False,
        mlp_channels: int | None = None,
        gate_layer: str | type[nn.Module] = "sigmoid",
        min_kernel: int = 1,
    ) -> None:
        super().__init__()
        kernel_size = resolve_eca_kernel(channels, kernel_size, gamma, b, min_kernel)
        check_choice("padding", padding, ("zero", "circular"))
        self.kernel_size = kernel_size
        self.circular_pad = kernel_size // 2 if padding == "circular" else 0
        zero_pad = 0 if padding == "circular" else kernel_size // 2
        self.mlp: nn.Module | None = None
        if mlp:
            if mlp_channels is None:
                mlp_channels = make_divisible(channels / 8, 8)
            check_positive_int("mlp_channels", mlp_channels)
            self.mlp = nn.Sequential(nn.Conv1d(1, mlp_channels, 1), nn.ReLU())
        elif mlp_channels is not None:
            raise ValueError("option 'mlp_channels' only applies with mlp=True")
        c_in = mlp_channels if mlp else 1
        self.conv = nn.Conv1d(c_in, 1, kernel_size, padding=zero_pad, bias=bool(mlp))
        self.gate = get_layer(gate_layer, "gate_layer")()

    def init_identity(self) -> None:
        """native: the size-k conv zero, gate 2*sigmoid (ScaledSigmoid), so w = 1."""
        nn.init.zeros_(self.conv.weight)
        if self.conv.bias is not None:
            nn.init.zeros_(self.conv.bias)
        self.gate = ScaledSigmoid(2.0)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        n, c = x.shape[:2]
        y = spatial_mean(x, keepdim=False).view(n, 1, c)
        if self.mlp is not None:
            y = self.mlp(y)
        if self.circular_pad > 0:
            y = F.pad(y, (self.circular_pad, self.circular_pad), mode="circular")
        w = self.gate(self.conv(y)).view(n, c, 1, 1)
        if not torch.jit.is_scripting():
            record_attention(self, w)
        return x * w

    def extra_repr(self) -> str:
        return f"kernel_size={self.kernel_size}, circular={bool(self.circular_pad)}"
