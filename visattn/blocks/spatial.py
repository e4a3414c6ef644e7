"""Spatial attention gate of CBAM (Woo, Park, Lee, Kweon; ECCV 2018, "CBAM: Convolutional Block
Attention Module"), usable on its own."""

from __future__ import annotations

import torch
import torch.nn as nn

from ._utils import channel_mean_max, check_positive_int, get_layer
from .capture import record_attention
from .identity import ScaledSigmoid
from .registry import register_block

# a leaf for torch.fx: its fused backward is chosen by a test on requires_grad, which symbolic
# tracing cannot follow; a traced graph calls it as one function
torch.fx.wrap("channel_mean_max")


class SpatialGate(nn.Module):
    """The spatial attention map ``M_s(F)`` of CBAM Eq. (3), ``(N, C, H, W) -> (N, 1, H, W)``.

    ``M_s(F) = sigmoid(f^{k x k}([AvgPool_c(F); MaxPool_c(F)]))``: the channel-wise mean and max
    maps are concatenated (mean first, as in the paper) and convolved by one ``k x k`` conv
    ``2 -> 1`` with ``k // 2`` zero padding. ``use_bn=True`` gives the official code's variant
    (conv without bias, then ``BatchNorm2d(1)``); the default is the paper's conv (with bias) and
    sigmoid. ``light=True`` is timm's ``LightSpatialAttn``: the two maps are averaged into one,
    ``0.5 (AvgPool_c + MaxPool_c)``, and the conv is ``1 -> 1``.
    Not registered: :class:`SpatialAttention` and CBAM use it.
    """

    def __init__(
        self,
        kernel_size: int = 7,
        use_bn: bool = False,
        gate_layer: str | type[nn.Module] = "sigmoid",
        light: bool = False,
    ) -> None:
        super().__init__()
        check_positive_int("kernel_size", kernel_size, odd=True)
        self.light = bool(light)
        c_in = 1 if light else 2
        self.conv = nn.Conv2d(c_in, 1, kernel_size, padding=kernel_size // 2, bias=not use_bn)
        self.bn = nn.BatchNorm2d(1) if use_bn else nn.Identity()
        self.gate = get_layer(gate_layer, "gate_layer")()

    def init_identity(self) -> None:
        """Zero the map's last layer (the BN with ``use_bn``, else the conv); gate 2*sigmoid."""
        last = self.bn if isinstance(self.bn, nn.BatchNorm2d) else self.conv
        nn.init.zeros_(last.weight)
        if last.bias is not None:
            nn.init.zeros_(last.bias)
        self.gate = ScaledSigmoid(2.0)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        pooled = channel_mean_max(x)  # (N, 2, H, W): [mean; max]
        if self.light:
            pooled = 0.5 * pooled[:, :1] + 0.5 * pooled[:, 1:]
        return self.gate(self.bn(self.conv(pooled)))


@register_block("spatial", family="spatial", paper="Woo et al., ECCV 2018")
class SpatialAttention(nn.Module):
    """CBAM's spatial attention as a stand-alone block: ``F'' = M_s(F) * F`` (Eqs. (1), (3)).

    ``M_s(F) = sigmoid(f^{k x k}([AvgPool_c(F); MaxPool_c(F)]))`` with ``AvgPool_c``/``MaxPool_c``
    the mean and max over channels (``(N, 1, H, W)`` each) and ``f`` one ``k x k`` conv ``2 -> 1``.

    Paper vs official code (``Jongchan/attention-module``): the paper writes conv + sigmoid, which
    is the default here (the conv has a bias). The official code puts a ``BatchNorm2d(1)`` after a
    bias-free conv (``use_bn=True``; timm's ``SpatialAttn`` does the same) and concatenates
    ``[max; mean]`` instead of ``[mean; max]`` (a permutation of the conv's input channels, so the
    same function class).

    Shapes: ``(N, C, H, W) -> (N, C, H, W)``; attention map ``(N, 1, H, W)``.

    Parameters (default options): ``2 k^2 + 1`` = 99 for ``k = 7``, whatever ``C``
    (``use_bn=True``: ``2 k^2 + 2``).

    Args:
        channels: input channels ``C`` (the gate's size does not depend on it).
        kernel_size: positive odd ``k``; 7 in the paper (3 is its ablation).
        use_bn: official-code variant with BatchNorm after a bias-free conv.
        gate_layer: gate (name or class), sigmoid in the paper.
    """

    def __init__(
        self,
        channels: int,
        kernel_size: int = 7,
        use_bn: bool = False,
        gate_layer: str | type[nn.Module] = "sigmoid",
    ) -> None:
        super().__init__()
        self.spatial = SpatialGate(kernel_size, use_bn=use_bn, gate_layer=gate_layer)

    def init_identity(self) -> None:
        """native: the conv (its BN with use_bn=True) zero, gate 2*sigmoid, so M_s = 1."""
        self.spatial.init_identity()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        s = self.spatial(x)
        if not torch.jit.is_scripting():
            record_attention(self, s)
        return x * s
