"""Concurrent spatial and channel squeeze & excitation (Roy, Navab, Wachinger; MICCAI 2018,
"Concurrent Spatial and Channel 'Squeeze & Excitation' in Fully Convolutional Networks"; max-out
from the authors' IEEE TMI 2019 extension, "Recalibrating Fully Convolutional Networks with Spatial
and Channel 'Squeeze and Excitation' Blocks")."""

from __future__ import annotations

import torch
import torch.nn as nn

from ._utils import Excitation, check_choice, get_layer, reduced_channels, spatial_mean
from .capture import is_capturing, record_attention
from .identity import ScaledSigmoid, zero_layer
from .registry import register_block


@register_block("scse", family="hybrid", paper="Roy et al., MICCAI 2018")
class ConcurrentSqueezeExcite(Excitation):
    """scSE block: channel SE and spatial SE applied concurrently, then combined.

    * cSE (Sec. 2.1): ``s = sigmoid(W2 ReLU(W1 GAP(U)))``, ``W1: C -> C/r``, ``W2: C/r -> C`` (1x1
      convs with bias), ``U_cSE = s * U``;
    * sSE (Sec. 2.2): ``q = sigmoid(W_sq * U)`` with a 1x1 conv ``C -> 1`` (with bias),
      ``U_sSE = q * U``;
    * scSE (Sec. 2.3): ``combine="add"`` (the MICCAI paper, default): ``U_cSE + U_sSE``;
      ``combine="max"`` (max-out, the best aggregation of the TMI 2019 extension):
      ``max(U_cSE, U_sSE)`` element-wise.

    The paper (and the authors' ``ai-med/squeeze_and_excitation`` code) use ``r = 2``, the default.

    Shapes: ``(N, C, H, W) -> (N, C, H, W)``. The attention map recorded is the effective weights
    ``w`` with ``out = w * U`` (N, C, H, W): ``s + q`` for ``"add"``; for ``"max"``
    ``max(s, q)`` where ``U >= 0`` and ``min(s, q)`` where ``U < 0`` (what ``max(s U, q U)`` picks);
    it is only computed while ``capture_attention`` is active.

    Parameters (default options, ``C_r = C // 2``): ``2 C C_r + C_r + 2 C + 1``
    (cSE ``C C_r + C_r + C_r C + C``; sSE ``C + 1``).

    Args:
        channels: input channels ``C``.
        reduction: cSE ratio ``r`` (2 in the paper).
        combine: ``"add"`` (MICCAI 2018) or ``"max"`` (max-out, TMI 2019).
        act_layer: cSE hidden activation (name or class), ReLU in the paper.
        gate_layer: gate of both branches (name or class), sigmoid in the paper.
    """

    def __init__(
        self,
        channels: int,
        reduction: float = 2,
        combine: str = "add",
        act_layer: str | type[nn.Module] = "relu",
        gate_layer: str | type[nn.Module] = "sigmoid",
    ) -> None:
        super().__init__()
        check_choice("combine", combine, ("add", "max"))
        hidden = reduced_channels(channels, reduction)
        gate = get_layer(gate_layer, "gate_layer")
        self.combine = combine
        self.add_excitation(channels, hidden, act_layer)
        self.channel_gate = gate()
        self.conv_sq = nn.Conv2d(channels, 1, 1)
        self.spatial_gate = gate()

    def init_identity(self) -> None:
        """native: cSE's last conv and sSE's conv zero; gates sigmoid (add) or 2*sigmoid (max).

        With ``combine="add"`` the two halves give ``s = q = 1/2``, ``s + q = 1``; with ``"max"``
        both gates are 2*sigmoid, ``s = q = 1``.
        """
        zero_layer(self.fc2)
        zero_layer(self.conv_sq)
        if self.combine == "max":
            self.channel_gate, self.spatial_gate = ScaledSigmoid(2.0), ScaledSigmoid(2.0)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        s = self.channel_gate(self.excite(spatial_mean(x)))
        q = self.spatial_gate(self.conv_sq(x))
        # not one `and` test: TorchScript only skips the body of a bare is_scripting() test
        if not torch.jit.is_scripting():  # noqa: SIM102  (scripted blocks record nothing)
            # the (N, C, H, W) map costs full passes: only build it when asked
            if is_capturing(self):
                if self.combine == "add":
                    w = s + q  # s U + q U = (s + q) U
                else:  # max(sU, qU) = U * (max(s, q) where U >= 0 else min(s, q))
                    w = torch.where(x >= 0, torch.maximum(s, q), torch.minimum(s, q))
                record_attention(self, w)
        if self.combine == "add":
            return torch.addcmul(x * s, x, q)
        return torch.maximum(x * s, x * q)

    def extra_repr(self) -> str:
        return f"combine={self.combine!r}"
