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

    The official code (``z-x-yang/GCT``, ``PyTorch/GCT.py``) normalises with a channel mean,
    ``s^_c = s_c / (mean_c s_c^2 + eps)^(1/2)`` (l1: ``s_c / (mean_c |s_c| + eps)``), which is
    the paper's formula with ``eps`` scaled by ``C`` (``C eps`` in place of ``eps``). The
    difference is of the order of ``eps``; ``norm="official"`` computes the official form, so
    that the authors' released GCT-ResNet-50 computes exactly its function.

    Initialisation (the paper's and the official code's): ``alpha = 1``, ``gamma = beta = 0``, so
    the gate is exactly 1: a fresh GCT is the identity.

    Shapes: ``(N, C, H, W) -> (N, C, H, W)``; attention map ``1 + tanh(...)``, ``(N, C, 1, 1)``.

    Parameters: ``3 C`` (``alpha``, ``gamma``, ``beta``).

    Args:
        channels: input channels ``C``.
        mode: ``"l2"`` (paper's main form) or ``"l1"``.
        eps: the ``epsilon`` of Eqs. (1)-(2).
        norm: ``"paper"`` (``eps`` added to the channel sum) or ``"official"`` (added to the
            channel mean, as the official code).
    """

    def __init__(
        self, channels: int, mode: str = "l2", eps: float = 1e-5, norm: str = "paper"
    ) -> None:
        super().__init__()
        check_choice("mode", mode, ("l2", "l1"))
        check_choice("norm", norm, ("paper", "official"))
        if isinstance(eps, bool) or not isinstance(eps, (int, float)) or eps <= 0:
            raise ValueError(f"option 'eps' must be a positive number, got {eps!r}")
        self.l2 = mode == "l2"
        self.official = norm == "official"
        self.eps = float(eps)
        # the channel sum divided by C is the official code's channel mean
        self.scale = 1.0 if self.official else math.sqrt(channels) if self.l2 else float(channels)
        self.reduce_by = float(channels) if self.official else 1.0
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
            total = s.pow(2).sum(1, keepdim=True) / self.reduce_by
            norm = self.scale / (total + self.eps).sqrt()
        else:
            s = x.abs().sum((2, 3), keepdim=True) * self.alpha
            norm = self.scale / (s.abs().sum(1, keepdim=True) / self.reduce_by + self.eps)
        g = 1.0 + torch.tanh(self.gamma * s * norm + self.beta)
        if not torch.jit.is_scripting():
            record_attention(self, g)
        return x * g

    def extra_repr(self) -> str:
        norm = "official" if self.official else "paper"
        return f"mode={'l2' if self.l2 else 'l1'!r}, eps={self.eps}, norm={norm!r}"
