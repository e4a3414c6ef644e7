"""Coordinate attention (Hou, Zhou, Feng; CVPR 2021, "Coordinate Attention for Efficient Mobile
Network Design")."""

from __future__ import annotations

import torch
import torch.nn as nn
from timm.layers import make_divisible

from ._utils import axis_mean, check_positive_int, gate_hw, get_layer, reduced_channels
from .capture import is_capturing, record_attention
from .conventions import Reduced
from .identity import ScaledSigmoid
from .registry import register_block

# plain torch.fx traces (and torchvision's) call them as one node: they test the layout
torch.fx.wrap("axis_mean")
torch.fx.wrap("gate_hw")


@register_block(
    "coord",
    family="hybrid",
    paper="Hou et al., CVPR 2021",
    reduced=Reduced(floor="min_channels", divisor="divisor"),
)
class CoordinateAttention(nn.Module):
    r"""Coordinate attention: channel attention factorised along the two spatial directions.

    $$
    z^h_c(h) = \frac{1}{W} \sum_{0 \le i < W} x_c(h, i), \qquad
    z^w_c(w) = \frac{1}{H} \sum_{0 \le j < H} x_c(j, w)
    $$

    $$
    f = \delta\big(F_1([z^h, z^w])\big), \qquad
    g^h = \sigma\big(F_h(f^h)\big), \quad g^w = \sigma\big(F_w(f^w)\big), \qquad
    y_c(i, j) = x_c(i, j) \, g^h_c(i) \, g^w_c(j)
    $$

    Follows Eqs. (4)-(9) of the paper:

    * directional pooling ``z^h_c(h) = 1/W sum_i x_c(h, i)`` ``(N, C, H, 1)`` and
      ``z^w_c(w) = 1/H sum_j x_c(j, w)`` ``(N, C, 1, W)`` (Eqs. (4)-(5));
    * ``f = delta(BN(F1([z^h, z^w])))``: both concatenated along the spatial axis, a shared 1x1
      conv ``C -> mip`` with ``mip = max(8, C // r)``, BN and h-swish ``delta`` (Eq. (6));
    * ``f`` split back into ``f^h``, ``f^w``; ``g^h = sigmoid(F_h(f^h))``,
      ``g^w = sigmoid(F_w(f^w))`` with 1x1 convs ``mip -> C`` (Eqs. (7)-(8));
    * ``y_c(i, j) = x_c(i, j) g^h_c(i) g^w_c(j)`` (Eq. (9)).

    ``r = 32`` and ``mip = max(8, C // r)`` follow the official code
    (``Andrew-Qibin/CoordAttention``).
    ``F_h``, ``F_w`` have a bias; ``F1`` has none (the BN after it makes it redundant; the official
    code keeps one).

    ``simple=True`` is timm's ``scoord`` (``SimpleCoordAttn``): no BN (``F1`` then has a bias)
    and the two directions are added before ONE gate, ``y = x * sigmoid(F_h(f^h) + F_w(f^w))``
    (timm's defaults there are ``act_layer="silu"`` and ``mip = make_divisible(C / 6, 8)``:
    ``act_layer="silu", reduction=6, divisor=8``, which the alias ``scoord`` sets).

    Shapes: ``(N, C, H, W) -> (N, C, H, W)``; attention map ``g^h * g^w`` ``(N, C, H, W)`` (only
    computed while ``capture_attention`` is active; with ``simple=True`` the single gate).

    Parameters (default options, ``mip = max(8, C // 32)``): ``3 C mip + 2 mip + 2 C``
    (``F1`` ``C mip``, BN ``2 mip``, ``F_h``/``F_w`` ``2 (mip C + C)``); ``simple=True``:
    ``3 C mip + mip + 2 C``.

    Args:
        channels: input channels ``C``.
        reduction: ratio ``r`` (32 in the official code).
        min_channels: lower bound of ``mip`` (8 in the official code).
        act_layer: activation ``delta`` (name or class), h-swish in the paper.
        gate_layer: gate (name or class), sigmoid in the paper.
        simple: timm's simplified coordinate attention (``scoord``), see above.
        divisor: ``d > 1`` rounds ``C / r`` to the nearest multiple of ``d`` instead of
            flooring it (timm's ``make_divisible``), still at least ``min_channels``.
    """

    def __init__(
        self,
        channels: int,
        reduction: float = 32,
        min_channels: int = 8,
        act_layer: str | type[nn.Module] = "hard_swish",
        gate_layer: str | type[nn.Module] = "sigmoid",
        simple: bool = False,
        divisor: int = 1,
    ) -> None:
        super().__init__()
        check_positive_int("divisor", divisor)
        mip = reduced_channels(channels, reduction, min_channels=min_channels)
        if divisor > 1:  # timm's rounding: nearest multiple (make_divisible, round_limit 0)
            mip = max(min_channels, make_divisible(channels / reduction, divisor, round_limit=0.0))
        gate = get_layer(gate_layer, "gate_layer")
        self.simple = bool(simple)
        self.conv1 = nn.Conv2d(channels, mip, 1, bias=self.simple)
        self.bn1 = nn.Identity() if self.simple else nn.BatchNorm2d(mip)
        self.act = get_layer(act_layer, "act_layer")()
        self.conv_h = nn.Conv2d(mip, channels, 1)
        self.conv_w = nn.Conv2d(mip, channels, 1)
        self.gate_h = gate()
        self.gate_w = gate()  # unused with simple=True: gate_h gates the sum

    def init_identity(self) -> None:
        """native: F_h and F_w zero, gates 2*sigmoid (ScaledSigmoid), so g^h = g^w = 1."""
        for conv in (self.conv_h, self.conv_w):
            nn.init.zeros_(conv.weight)
            nn.init.zeros_(conv.bias)
        self.gate_h, self.gate_w = ScaledSigmoid(2.0), ScaledSigmoid(2.0)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h, w = x.shape[2:]
        z_h = axis_mean(x, 3)  # (N, C, H, 1)
        z_w = axis_mean(x, 2).transpose(2, 3)  # (N, C, W, 1)
        f = self.act(self.bn1(self.conv1(torch.cat([z_h, z_w], dim=2))))
        f_h, f_w = torch.split(f, [h, w], dim=2)
        if self.simple:
            g = self.gate_h(self.conv_h(f_h) + self.conv_w(f_w).transpose(2, 3))
            if not torch.jit.is_scripting():
                record_attention(self, g)
            return x * g
        g_h = self.gate_h(self.conv_h(f_h))  # (N, C, H, 1)
        g_w = self.gate_w(self.conv_w(f_w.transpose(2, 3)))  # (N, C, 1, W)
        # not one `and` test: TorchScript only skips the body of a bare is_scripting() test
        if not torch.jit.is_scripting():  # noqa: SIM102  (scripted blocks record nothing)
            # the (N, C, H, W) map costs a full pass: only build it when asked
            if is_capturing(self):
                record_attention(self, g_h * g_w)
        return gate_hw(x, g_h, g_w)
