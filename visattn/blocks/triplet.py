"""Triplet attention (Misra, Nalamada, Arasanipalai, Hou; WACV 2021, "Rotate to Attend:
Convolutional Triplet Attention Module")."""

from __future__ import annotations

import torch
import torch.nn as nn

from ._utils import check_positive_int, get_layer
from .capture import record_attention
from .identity import ScaledSigmoid
from .registry import register_block


class _ZPoolConv(nn.Module):
    """One branch's map before the gate: Z-pool ``[max; mean]`` over one axis (already done by the
    caller), a ``k x k`` conv ``2 -> 1`` without bias, then BN: ``(N, 2, A, B) -> (N, 1, A, B)``."""

    def __init__(self, kernel_size: int) -> None:
        super().__init__()
        self.conv = nn.Conv2d(2, 1, kernel_size, padding=kernel_size // 2, bias=False)
        self.bn = nn.BatchNorm2d(1, eps=1e-5, momentum=0.01)

    def forward(self, z: torch.Tensor) -> torch.Tensor:
        return self.bn(self.conv(z))


@register_block("triplet", family="hybrid", paper="Misra et al., WACV 2021")
class TripletAttention(nn.Module):
    """Triplet attention: three branches, each a spatial-attention gate on a different plane.

    Follows Sec. 3 of the paper. Each branch reduces the input over one axis with the Z-pool
    ``Z(x) = [MaxPool_0d(x); AvgPool_0d(x)]`` (two maps), applies a ``k x k`` conv (``2 -> 1``,
    no bias) and batch norm, and a sigmoid gate ``g``:

    * ``hw`` branch: pool over ``C``, gate ``g_hw`` on the ``(H, W)`` plane, ``(N, 1, H, W)``;
    * ``cw`` branch: pool over ``H`` (the paper rotates the tensor to bring ``H`` first), gate
      ``g_cw`` on the ``(C, W)`` plane, ``(N, C, 1, W)``;
    * ``hc`` branch: pool over ``W``, gate ``g_hc`` on the ``(H, C)`` plane, ``(N, C, H, 1)``.

    Output ``y = x * (g_hw + g_cw + g_hc) / 3`` (the paper's average of the three refined tensors;
    ``no_spatial=True``, the paper's ablation without the ``hw`` branch, averages two).

    The paper rotates the tensor by 90 degrees; like the official code this block permutes it
    (transpose without the flip). For a learned ``k x k`` kernel the two differ only by a flip of
    the kernel, so they define the same family of functions. Planes are laid out as in the
    official code (``(C, W)`` and ``(H, C)``), so its weights can be copied in.

    The batch norm follows the official ``BasicConv``: eps 1e-5, momentum 0.01 (the paper gives
    no value).

    Shapes: ``(N, C, H, W) -> (N, C, H, W)``; attention map ``(g_hw + g_cw + g_hc) / 3``,
    ``(N, C, H, W)`` (so ``y = map * x``).

    Parameters (default options, ``k = 7``): ``3 (2 k^2 + 2)`` = 300 (conv ``2 k^2`` and BN ``2``
    per branch; ``2 (2 k^2 + 2)`` with ``no_spatial=True``).

    Args:
        channels: input channels ``C`` (the block's size does not depend on it).
        kernel_size: positive odd ``k`` of the branch convs (7 in the paper).
        no_spatial: drop the ``hw`` (spatial) branch.
        gate_layer: gate (name or class), sigmoid in the paper.
        zero_init_hw: start the ``hw`` branch's BN scale at zero, as the official ResNets
            initialise it (their ``SpatialGate`` BN weights): that gate starts at
            ``sigmoid(0) = 1/2`` everywhere.
    """

    def __init__(
        self,
        channels: int,
        kernel_size: int = 7,
        no_spatial: bool = False,
        gate_layer: str | type[nn.Module] = "sigmoid",
        zero_init_hw: bool = False,
    ) -> None:
        super().__init__()
        check_positive_int("kernel_size", kernel_size, odd=True)
        if zero_init_hw and no_spatial:
            raise ValueError("option 'zero_init_hw' needs the hw branch (no_spatial=False)")
        self.no_spatial = bool(no_spatial)
        self.cw = _ZPoolConv(kernel_size)
        self.hc = _ZPoolConv(kernel_size)
        self.hw = nn.Identity() if self.no_spatial else _ZPoolConv(kernel_size)
        if zero_init_hw:
            nn.init.zeros_(self.hw.bn.weight)
        self.gate = get_layer(gate_layer, "gate_layer")()

    def init_identity(self) -> None:
        """native: each branch's BN weight and bias zero, gate 2*sigmoid (ScaledSigmoid), so
        every gate is 1 and their average is exactly 1."""
        for branch in (self.cw, self.hc, self.hw):
            if isinstance(branch, _ZPoolConv):
                nn.init.zeros_(branch.bn.weight)
                nn.init.zeros_(branch.bn.bias)
        self.gate = ScaledSigmoid(2.0)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # (C, W) plane: pool over H -> (N, 2, C, W); gate back to (N, C, 1, W)
        g_cw = self.gate(self.cw(torch.stack((x.amax(2), x.mean(2)), 1))).transpose(1, 2)
        # (H, C) plane: pool over W -> (N, C, H) -> (N, 2, H, C); gate back to (N, C, H, 1)
        z_hc = torch.stack((x.amax(3), x.mean(3)), 1).transpose(2, 3)
        g_hc = self.gate(self.hc(z_hc)).permute(0, 3, 2, 1)
        if self.no_spatial:
            a = (g_cw + g_hc) / 2
        else:
            g_hw = self.gate(self.hw(torch.cat((x.amax(1, True), x.mean(1, True)), 1)))
            a = (g_hw + g_cw + g_hc) / 3
        if not torch.jit.is_scripting():
            record_attention(self, a)
        return x * a

    def extra_repr(self) -> str:
        return f"no_spatial={self.no_spatial}"
