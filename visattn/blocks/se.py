"""Squeeze-and-Excitation (Hu, Shen, Sun; CVPR 2018, "Squeeze-and-Excitation Networks")."""

from __future__ import annotations

import torch
import torch.nn as nn
import torch.nn.functional as F

from ._utils import Excitation, check_choice, get_layer, reduced_channels, spatial_mean
from .capture import record_attention
from .registry import register_block


@register_block("se", family="channel", paper="Hu et al., CVPR 2018")
class SqueezeExcite(Excitation):
    r"""Squeeze-and-Excitation block.

    $$
    z_c = \frac{1}{HW} \sum_{i=1}^{H} \sum_{j=1}^{W} x_c(i, j), \qquad
    s = \sigma\big(W_2 \, \delta(W_1 z)\big), \qquad
    \tilde{x}_c = s_c \, x_c
    $$

    Follows Eqs. (2)-(4) of the paper:

    * squeeze   ``z_c = 1/(HW) sum_ij x_c(i, j)`` (``pool="max"`` takes the maximum instead),
    * excitation ``s = sigmoid(W2 relu(W1 z))`` with ``W1: C -> C/r``, ``W2: C/r -> C``,
    * scale     ``y_c = s_c * x_c``.

    The FC layers are 1x1 convolutions with bias, as in the official Caffe model.

    Shapes: ``(N, C, H, W) -> (N, C, H, W)``; attention map ``(N, C, 1, 1)``.

    Parameters (default options): ``2 * C * (C // r) + C // r + C``.

    Args:
        channels: input channels ``C``.
        reduction: ratio ``r``; ``C // r`` hidden units (an ``r`` leaving 0 is an error).
        pool: squeeze pooling, ``"avg"`` (paper) or ``"max"``.
        act_layer: hidden activation (name or class), ReLU in the paper.
        gate_layer: gate (name or class), sigmoid in the paper.
    """

    def __init__(
        self,
        channels: int,
        reduction: float = 16,
        pool: str = "avg",
        act_layer: str | type[nn.Module] = "relu",
        gate_layer: str | type[nn.Module] = "sigmoid",
    ) -> None:
        super().__init__()
        check_choice("pool", pool, ("avg", "max"))
        hidden = reduced_channels(channels, reduction)
        self.pool = pool
        self.add_excitation(channels, hidden, act_layer)
        self.gate = get_layer(gate_layer, "gate_layer")()

    def init_identity(self) -> None:
        """native: last FC W2 zero, gate 2*sigmoid (ScaledSigmoid), so s = 1."""
        self.gate = self.identity_gate()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        z = spatial_mean(x) if self.pool == "avg" else F.adaptive_max_pool2d(x, 1)
        s = self.gate(self.excite(z))
        if not torch.jit.is_scripting():
            record_attention(self, s)
        return x * s
