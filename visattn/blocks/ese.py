"""Effective Squeeze-and-Excitation (Lee, Park; CVPR 2020, "CenterMask: Real-Time Anchor-Free
Instance Segmentation", the eSE module of VoVNetV2)."""

from __future__ import annotations

import torch
import torch.nn as nn

from ._utils import get_layer, spatial_mean
from .capture import record_attention
from .identity import unit_gate
from .registry import register_block


@register_block("ese", family="channel", paper="Lee & Park, CVPR 2020")
class EffectiveSqueezeExcite(nn.Module):
    """eSE block: SE with one fully connected layer, so no channel information is lost.

    Follows the paper's eSE equations::

        A_eSE(X) = sigma(W_C(F_gap(X))),     X_refine = A_eSE(X) * X

    with ``F_gap`` global average pooling ``(N, C, 1, 1)`` and ``W_C`` ONE fully connected layer
    ``C -> C`` (a 1x1 conv with bias) in place of SE's two with reduction ``r``. The paper writes
    the gate as ``sigma``, taken here as SE's sigmoid (the default); the authors' VoVNetV2 code
    and timm's ``EffectiveSEModule`` use a hard sigmoid ``relu6(x + 3) / 6``
    (``gate_layer="hard_sigmoid"``).

    Shapes: ``(N, C, H, W) -> (N, C, H, W)``; attention map ``(N, C, 1, 1)``.

    Parameters: ``C^2 + C``.

    Args:
        channels: input channels ``C``.
        gate_layer: gate (name or class): sigmoid in the paper, ``"hard_sigmoid"`` in the
            official code and timm.
    """

    def __init__(self, channels: int, gate_layer: str | type[nn.Module] = "sigmoid") -> None:
        super().__init__()
        self.fc = nn.Conv2d(channels, channels, 1)
        self.gate = get_layer(gate_layer, "gate_layer")()

    def init_identity(self) -> None:
        """native: W_C zero, gate 2*sigmoid (ScaledSigmoid), so A_eSE = 1."""
        self.gate = unit_gate(self.fc)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        a = self.gate(self.fc(spatial_mean(x)))
        if not torch.jit.is_scripting():
            record_attention(self, a)
        return x * a
