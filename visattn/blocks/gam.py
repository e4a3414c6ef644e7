"""Global Attention Mechanism (Liu, Shao, Hoffmann; arXiv 2021, "Global Attention Mechanism:
Retain Information to Enhance Channel-Spatial Interactions", arXiv:2112.05561)."""

from __future__ import annotations

import torch
import torch.nn as nn

from ._utils import Excitation, check_positive_int, reduced_channels
from .capture import is_capturing, record_attention
from .identity import ScaledSigmoid, zero_layer
from .registry import register_block


@register_block("gam", family="hybrid", paper="Liu et al., arXiv 2021 (Global Attention Mechanism)")
class GlobalAttentionMechanism(Excitation):
    """GAM: CBAM's channel-then-spatial order, with neither submodule pooling its input away.

    Follows the method section of the paper (its equations and figures of both submodules):

    * ``F2 = M_c(F1) * F1``, ``F3 = M_s(F2) * F2``;
    * channel submodule ``M_c``: the input is permuted to ``(N, H, W, C)`` and every position's
      channel vector goes through a two-layer MLP ``C -> C/r -> C`` (ReLU between, biases), is
      permuted back and passed through a sigmoid: an ``(N, C, H, W)`` map, no spatial pooling. A
      per-position MLP is a 1x1 conv, which is how it is computed here;
    * spatial submodule ``M_s``: two ``k x k`` convs ``C -> C/r -> C`` (``k = 7``) then a sigmoid,
      again without pooling.

    The authors released no code. The paper names the two convs, the reduction ``r`` (shared with
    the channel MLP) and the sigmoid; the normalisation follows the implementation the community
    uses (each conv with bias, followed by BN, ReLU after the first; ``r = 4``), which is the
    default. ``groups > 1`` gives the paper's variant for ResNet-50: grouped convs with a channel
    shuffle between them (the paper does not give the group count).

    Shapes: ``(N, C, H, W) -> (N, C, H, W)``. The recorded map is the applied weights
    ``M_c * M_s`` ``(N, C, H, W)`` (only computed while ``capture_attention`` is active).

    Parameters (``C_r = C // r``, ``g`` groups): MLP ``2 C C_r + C_r + C``; convs
    ``2 k^2 C C_r / g + C_r + C``; BNs ``2 C_r + 2 C``; in all ``2 C C_r + 2 k^2 C C_r / g + 4 C_r
    + 4 C`` (``100 C C_r + 4 C_r + 4 C`` by default).

    Args:
        channels: input channels ``C``.
        reduction: ``r`` of both submodules (4 in the community code); ``C // r`` hidden channels.
        kernel_size: positive odd ``k`` of the spatial convs (7 in the paper).
        groups: groups of the spatial convs (1; the paper's ResNet-50 variant groups them and
            shuffles the channels between the two); must divide ``C`` and ``C // r``.
    """

    def __init__(
        self, channels: int, reduction: float = 4, kernel_size: int = 7, groups: int = 1
    ) -> None:
        super().__init__()
        check_positive_int("kernel_size", kernel_size, odd=True)
        check_positive_int("groups", groups)
        hidden = reduced_channels(channels, reduction)
        if channels % groups or hidden % groups:
            raise ValueError(
                f"option 'groups'={groups} must divide channels={channels} and the {hidden} "
                "hidden channels"
            )
        self.groups = groups
        self.add_excitation(channels, hidden, "relu")  # the channel MLP, at every position
        pad = kernel_size // 2
        self.conv1 = nn.Conv2d(channels, hidden, kernel_size, padding=pad, groups=groups)
        self.bn1 = nn.BatchNorm2d(hidden)
        self.conv2 = nn.Conv2d(hidden, channels, kernel_size, padding=pad, groups=groups)
        self.bn2 = nn.BatchNorm2d(channels)
        self.gate_c = nn.Sigmoid()
        self.gate_s = nn.Sigmoid()

    def init_identity(self) -> None:
        """native: the MLP's last layer and the last BN zero, gates 2*sigmoid: M_c = M_s = 1."""
        self.gate_c = self.identity_gate()
        zero_layer(self.bn2)
        self.gate_s = ScaledSigmoid(2.0)

    def _shuffle(self, t: torch.Tensor) -> torch.Tensor:
        n, c, h, w = t.shape
        return t.reshape(n, self.groups, c // self.groups, h, w).transpose(1, 2).reshape(n, c, h, w)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        mc = self.gate_c(self.excite(x))
        f2 = x * mc
        t = self.act(self.bn1(self.conv1(f2)))
        if self.groups > 1:
            t = self._shuffle(t)
        ms = self.gate_s(self.bn2(self.conv2(t)))
        if not torch.jit.is_scripting():  # noqa: SIM102 (TorchScript needs it alone)
            if is_capturing(self):
                record_attention(self, mc * ms)
        return f2 * ms

    def extra_repr(self) -> str:
        return f"groups={self.groups}"
