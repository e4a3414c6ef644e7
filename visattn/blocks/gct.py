"""Gated Channel Transformation (Yang, Zhu, Wu, Yang; CVPR 2020, "Gated Channel Transformation for
Visual Recognition")."""

from __future__ import annotations

import math

import torch
import torch.nn as nn

from ._utils import check_choice
from .capture import record_attention
from .registry import register_block


@register_block("gct", family="channel", paper="Yang et al., CVPR 2020")
class GatedChannelTransformation(nn.Module):
    """GCT: global context embedding, channel normalisation, tanh gating with a residual 1.

    Follows Eqs. (1)-(3) of the paper (``mode="l2"``):

    * embedding ``s_c = alpha_c ||x_c||_2 = alpha_c (sum_ij x_c(i, j)^2 + eps)^(1/2)``;
    * channel normalisation
      ``s^_c = sqrt(C) s_c / ||s||_2 = sqrt(C) s_c / (sum_c s_c^2 + eps)^(1/2)``;
    * gating ``y_c = x_c (1 + tanh(gamma_c s^_c + beta_c))``.

    ``mode="l1"`` is the paper's l1 variant: ``s_c = alpha_c sum_ij |x_c(i, j)|``,
    ``s^_c = C s_c / (sum_c |s_c| + eps)``.

    The official code writes the normalisation with a channel mean, ``gamma s / (mean_c s^2 +
    eps)^(1/2)``, which is the paper's formula with ``eps`` scaled by ``C`` (``C eps`` in place of
    ``eps``); the difference is of the order of ``eps`` and is not offered as an option.

    Initialisation (the paper's and the official code's): ``alpha = 1``, ``gamma = beta = 0``, so
    the gate is exactly 1: a fresh GCT is the identity.

    Shapes: ``(N, C, H, W) -> (N, C, H, W)``; attention map ``1 + tanh(...)``, ``(N, C, 1, 1)``.

    Parameters: ``3 C`` (``alpha``, ``gamma``, ``beta``).

    Args:
        channels: input channels ``C``.
        mode: ``"l2"`` (paper's main form) or ``"l1"``.
        eps: the ``epsilon`` of Eqs. (1)-(2).
    """

    def __init__(self, channels: int, mode: str = "l2", eps: float = 1e-5) -> None:
        super().__init__()
        check_choice("mode", mode, ("l2", "l1"))
        if isinstance(eps, bool) or not isinstance(eps, (int, float)) or eps <= 0:
            raise ValueError(f"option 'eps' must be a positive number, got {eps!r}")
        self.l2 = mode == "l2"
        self.eps = float(eps)
        self.scale = math.sqrt(channels) if self.l2 else float(channels)
        self.alpha = nn.Parameter(torch.ones(1, channels, 1, 1))
        self.gamma = nn.Parameter(torch.zeros(1, channels, 1, 1))
        self.beta = nn.Parameter(torch.zeros(1, channels, 1, 1))

    def init_identity(self) -> None:
        """native: gamma = beta = 0 (the paper's own init), so the gate 1 + tanh(0) is exactly 1."""
        nn.init.zeros_(self.gamma)
        nn.init.zeros_(self.beta)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.l2:
            s = (x.pow(2).sum((2, 3), keepdim=True) + self.eps).sqrt() * self.alpha
            norm = self.scale / (s.pow(2).sum(1, keepdim=True) + self.eps).sqrt()
        else:
            s = x.abs().sum((2, 3), keepdim=True) * self.alpha
            norm = self.scale / (s.abs().sum(1, keepdim=True) + self.eps)
        g = 1.0 + torch.tanh(self.gamma * s * norm + self.beta)
        if not torch.jit.is_scripting():
            record_attention(self, g)
        return x * g

    def extra_repr(self) -> str:
        return f"mode={'l2' if self.l2 else 'l1'!r}, eps={self.eps}"
