"""Spatial Group-wise Enhance (Li, Hu, Yang; arXiv 2019, "Spatial Group-wise Enhance: Improving
Semantic Feature Learning in Convolutional Networks")."""

from __future__ import annotations

import torch
import torch.nn as nn

from . import _stats
from ._utils import check_choice, get_layer
from .capture import is_capturing, record_attention
from .identity import ScaledSigmoid
from .registry import register_block


@register_block("sge", family="spatial", paper="Li et al., arXiv 2019")
class SpatialGroupEnhance(nn.Module):
    """SGE: within each channel group, a spatial gate from the similarity of every position's
    feature to the group's mean feature.

    Follows Sec. 3 of the paper. The channels are split into ``G`` groups of ``m = C / G``; in each
    group, with ``x_i`` the ``m``-vector at position ``i`` (``HW`` positions):

    * global feature ``g = 1/(HW) sum_i x_i``;
    * importance ``c_i = g . x_i``;
    * normalisation over space ``c^_i = (c_i - mu_c) / (sigma_c + eps)`` with
      ``mu_c = 1/(HW) sum_j c_j`` and ``sigma_c^2 = 1/(HW) sum_j (c_j - mu_c)^2``;
    * ``a_i = gamma c^_i + beta`` with one ``gamma, beta`` per group;
    * ``x^_i = x_i * sigmoid(a_i)``.

    ``std="biased"`` (default) is the paper's ``1/(HW)``; ``"unbiased"`` is the official code's
    ``torch.std`` (``1/(HW - 1)``, kept at 1 for a 1x1 map). The variance is floored at 1e-12
    under the root so a constant map has a finite gradient. ``gamma`` starts at 0 and ``beta`` at
    1, as in the official code, so a fresh block scales everything by ``sigmoid(1)``.

    Groups: ``G = 64`` in the paper's ResNets. ``groups=None`` (default) takes 64 when it divides
    ``C``, else the largest divisor of ``C`` below 64 (32 for C=32, 36 for C=72); an explicit
    ``groups`` must divide ``C``.

    Shapes: ``(N, C, H, W) -> (N, C, H, W)``. The gate is ``(N, G, H, W)``; the attention map
    recorded is that gate repeated over each group's channels, ``(N, C, H, W)`` (built only while
    ``capture_attention`` is active).

    Parameters: ``2 G`` (``gamma`` and ``beta`` per group; 128 with ``G = 64``).

    Args:
        channels: input channels ``C``.
        groups: ``G``, or ``None`` for the rule above.
        std: ``"biased"`` (paper) or ``"unbiased"`` (official code).
        eps: the ``epsilon`` added to ``sigma_c`` (1e-5 as in the official code).
        gate_layer: gate (name or class), sigmoid in the paper.
    """

    def __init__(
        self,
        channels: int,
        groups: int | None = None,
        std: str = "biased",
        eps: float = 1e-5,
        gate_layer: str | type[nn.Module] = "sigmoid",
    ) -> None:
        super().__init__()
        check_choice("std", std, ("biased", "unbiased"))
        if isinstance(eps, bool) or not isinstance(eps, (int, float)) or eps <= 0:
            raise ValueError(f"option 'eps' must be a positive number, got {eps!r}")
        self.groups = _stats.resolve_groups(channels, groups, 64)
        self.unbiased = std == "unbiased"
        self.eps = float(eps)
        self.weight = nn.Parameter(torch.zeros(1, self.groups, 1, 1))  # gamma
        self.bias = nn.Parameter(torch.ones(1, self.groups, 1, 1))  # beta
        self.gate = get_layer(gate_layer, "gate_layer")()

    def init_identity(self) -> None:
        """native: gamma = beta = 0, gate 2*sigmoid (ScaledSigmoid), so the gate is exactly 1."""
        nn.init.zeros_(self.weight)
        nn.init.zeros_(self.bias)
        self.gate = ScaledSigmoid(2.0)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        n, c, h, w = x.shape
        xg = x.reshape(n, self.groups, c // self.groups, h, w)  # a view in either memory format
        ci = (xg * xg.mean((3, 4), keepdim=True)).sum(2).reshape(n, self.groups, h * w)  # g . x_i
        ci = ci - ci.mean(2, keepdim=True)
        var = ci.pow(2).sum(2, keepdim=True) / _stats.variance_divisor(h * w, self.unbiased)
        ci = ci / (_stats.safe_std(var) + self.eps)
        a = self.gate(ci.view(n, self.groups, h, w) * self.weight + self.bias)  # (N, G, H, W)
        if not torch.jit.is_scripting():  # noqa: SIM102 (TorchScript must not see is_capturing)
            if is_capturing(self):
                record_attention(self, a.repeat_interleave(c // self.groups, dim=1))
        return (xg * a.view(n, self.groups, 1, h, w)).reshape(n, c, h, w)

    def extra_repr(self) -> str:
        return f"groups={self.groups}, std={'unbiased' if self.unbiased else 'biased'!r}"
