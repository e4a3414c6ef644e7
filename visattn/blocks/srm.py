"""Style-based Recalibration Module (Lee, Kim, Nam; ICCV 2019, "SRM: A Style-based Recalibration
Module for Convolutional Neural Networks")."""

from __future__ import annotations

import torch
import torch.nn as nn

from . import _stats
from ._utils import check_choice, get_layer
from .capture import record_attention
from .identity import ScaledSigmoid
from .registry import register_block

STDS = ("biased", "unbiased", "official")
#: added to the variance under the root by the official code's style pooling
OFFICIAL_STD_EPS = 1e-5


@register_block("srm", family="channel", paper="Lee et al., ICCV 2019")
class SRM(nn.Module):
    """SRM: style pooling (per-channel mean and standard deviation), then a channel-wise FC, BN
    and a sigmoid gate.

    Follows Sec. 3 of the paper:

    * style pooling: ``mu_nc = 1/(HW) sum_hw x_nchw``,
      ``sigma_nc = sqrt(1/(HW) sum_hw (x_nchw - mu_nc)^2)``, ``t_nc = [mu_nc, sigma_nc]``;
    * style integration: channel-wise fully connected ``z_nc = w_c . t_nc``
      (``w: C x 2``, no bias), batch norm over ``z``, ``g_nc = sigmoid(BN(z)_nc)``;
    * ``y = g * x``.

    ``std="biased"`` (default) is the paper's ``1/(HW)``; ``"unbiased"`` is ``torch.std``
    (``1/(HW - 1)``, kept at 1 for a 1x1 map); ``"official"`` is the official code's
    ``sqrt(var + 1e-5)`` with the unbiased variance (the ``1e-5`` matters on low-variance maps).
    The variance is floored at 1e-12 under the root so a constant map has a finite gradient. As
    in the official code ``w`` starts at zero (so the gate starts at ``sigmoid(0) = 1/2``
    everywhere) and BN is a ``BatchNorm2d`` on ``(N, C, 1, 1)``, which needs more than one
    sample per batch in training.

    Shapes: ``(N, C, H, W) -> (N, C, H, W)``; attention map ``g``, ``(N, C, 1, 1)``.

    Parameters: ``4 C`` (``w``: ``2 C``; BN affine: ``2 C``).

    Args:
        channels: input channels ``C``.
        std: ``"biased"`` (paper), ``"unbiased"`` (``torch.std``) or ``"official"``
            (unbiased variance ``+ 1e-5`` under the root, as the official code).
        gate_layer: gate (name or class), sigmoid in the paper.
    """

    def __init__(
        self,
        channels: int,
        std: str = "biased",
        gate_layer: str | type[nn.Module] = "sigmoid",
    ) -> None:
        super().__init__()
        check_choice("std", std, STDS)
        self.std = std
        self.unbiased = std != "biased"
        self.eps = OFFICIAL_STD_EPS if std == "official" else 0.0
        self.cfc = nn.Parameter(torch.zeros(channels, 2))
        self.bn = nn.BatchNorm2d(channels)
        self.gate = get_layer(gate_layer, "gate_layer")()

    def init_identity(self) -> None:
        """native: style weights zero (the official init) and BN at weight 1, bias 0, fresh
        statistics, so BN outputs 0; gate 2*sigmoid (ScaledSigmoid), so the gate is exactly 1."""
        nn.init.zeros_(self.cfc)
        self.bn.reset_parameters()
        self.gate = ScaledSigmoid(2.0)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        n, c, h, w = x.shape
        mu = x.mean((2, 3), keepdim=True)
        var = (x - mu).pow(2).sum((2, 3)) / _stats.variance_divisor(h * w, self.unbiased)
        z = self.cfc[:, 0] * mu.view(n, c) + self.cfc[:, 1] * _stats.safe_std(var + self.eps)
        g = self.gate(self.bn(z.view(n, c, 1, 1)))
        if not torch.jit.is_scripting():
            record_attention(self, g)
        return x * g

    def extra_repr(self) -> str:
        return f"std={self.std!r}"
