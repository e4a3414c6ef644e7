"""Strip attention: timm's ``StripAttn`` (Wightman, timm, 2025), a minimal gate built on the
strip pooling of Hou, Zhang, Cheng, Feng; CVPR 2020, "Strip Pooling: Rethinking Spatial Pooling for
Scene Parsing"."""

from __future__ import annotations

import torch
import torch.nn as nn

from ._utils import axis_mean, check_positive_int, get_layer
from .capture import record_attention
from .identity import ScaledSigmoid
from .registry import register_block

# plain torch.fx traces (and torchvision's) call them as one node: they test the layout
torch.fx.wrap("axis_mean")


@register_block("strip", family="hybrid", paper="timm 2025, after Hou et al., CVPR 2020")
class StripAttention(nn.Module):
    """Strip attention: ``y = x * sigmoid(F_h(z^h) + F_w(z^w))``.

    * strip pooling (Hou et al., 2020): ``z^h_c(h) = 1/W sum_i x_c(h, i)``
      ``(N, C, H, 1)``, ``z^w_c(w) = 1/H sum_j x_c(j, w)`` ``(N, C, 1, W)``;
    * optional refinement (``use_conv``): ``F_h``, ``F_w`` depthwise 1-D convs of size ``k``
      along each strip (``k // 2`` zero padding, no bias by default); otherwise identities;
    * the two strips are added by broadcasting into an ``(N, C, H, W)`` map, gated and applied.

    There is no paper for this block: it is timm's own minimal form (timm 1.0 series, 2025,
    ``timm.layers.coord_attn.StripAttn``), and it computes the same function as timm's module.
    Unlike Hou et al.'s strip pooling module, it has no 1x1 fusion convs and no residual path.

    Shapes: ``(N, C, H, W) -> (N, C, H, W)``; attention map ``(N, C, H, W)``.

    Parameters (default options, ``k = 3``): ``2 k C`` (``bias=True``: ``2 k C + 2 C``;
    ``use_conv=False``: 0).

    Args:
        channels: input channels ``C``.
        use_conv: refine each strip with a depthwise 1-D conv.
        kernel_size: positive odd ``k`` of those convs (3 in timm).
        bias: convs with bias.
        gate_layer: gate (name or class), sigmoid in timm.
    """

    def __init__(
        self,
        channels: int,
        use_conv: bool = True,
        kernel_size: int = 3,
        bias: bool = False,
        gate_layer: str | type[nn.Module] = "sigmoid",
    ) -> None:
        super().__init__()
        check_positive_int("kernel_size", kernel_size, odd=True)
        self.conv_h: nn.Module = nn.Identity()
        self.conv_w: nn.Module = nn.Identity()
        if use_conv:
            k, p = kernel_size, kernel_size // 2
            self.conv_h = nn.Conv2d(
                channels, channels, (k, 1), padding=(p, 0), groups=channels, bias=bias
            )
            self.conv_w = nn.Conv2d(
                channels, channels, (1, k), padding=(0, p), groups=channels, bias=bias
            )
        self.logit_scale: nn.Parameter | None = None  # identity form of use_conv=False only
        self.gate = get_layer(gate_layer, "gate_layer")()

    def init_identity(self) -> None:
        """native: strip convs zero (use_conv=False: gate-input scale = 0), gate 2*sigmoid."""
        convs = [m for m in (self.conv_h, self.conv_w) if isinstance(m, nn.Conv2d)]
        for conv in convs:
            nn.init.zeros_(conv.weight)
            if conv.bias is not None:
                nn.init.zeros_(conv.bias)
        if not convs:
            self.logit_scale = nn.Parameter(torch.zeros(1))
        self.gate = ScaledSigmoid(2.0)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        s = self.conv_h(axis_mean(x, 3)) + self.conv_w(axis_mean(x, 2))
        if self.logit_scale is not None:
            s = s * self.logit_scale
        a = self.gate(s)  # (N, C, H, W)
        if not torch.jit.is_scripting():
            record_attention(self, a)
        return x * a
