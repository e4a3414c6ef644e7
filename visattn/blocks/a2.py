"""Double attention block (Chen, Kalantidis, Li, Yan, Feng; NeurIPS 2018, "A^2-Nets: Double
Attention Networks")."""

from __future__ import annotations

import torch
import torch.nn as nn

from ._utils import check_positive_int, reduced_channels
from .capture import is_capturing, record_attention
from .registry import register_block

__all__ = ["DoubleAttention"]


@register_block("a2", family="spatial", paper="Chen et al., NeurIPS 2018")
class DoubleAttention(nn.Module):
    """Double attention: gather global descriptors, then distribute them.

    Follows Sec. 3 of the paper (gathering, then distribution) with ``A = phi(X)`` (``m``
    channels), ``B = theta(X)`` and ``V = rho(X)`` (``n`` channels each), all 1x1 convs with
    bias, and ``X`` as ``(C, HW)``::

        G = A softmax_HW(B)^T                  (m x n: n second-order attention poolings)
        Z = G softmax_n(V)                     (m x HW: each position picks a mix of descriptors)
        Y = X + W_out Z                        (1x1 conv m -> C with bias, back to C channels)

    ``softmax_HW`` normalises each of the ``n`` attention maps over the positions (gathering);
    ``softmax_n`` normalises each position's attention vector over the ``n`` descriptors
    (distribution). The paper leaves ``m`` and ``n`` as hyper-parameters; visattn uses
    ``m = n = C // 4`` by default (``reduction=4``), which works for any ``C >= 4``. No official
    code was released.

    Recorded attention: ``(N, 1, H, W)``, the attention each position *receives*. The block's
    effective position-to-position weights are ``W(u, p) = sum_i softmax_n(V)_i(u)
    softmax_HW(B)_i(p)`` (each row sums to 1); the map is ``W`` averaged over the queries ``u``,
    so it sums to 1.

    Shapes: ``(N, C, H, W) -> (N, C, H, W)``; memory ``O(N (m + n) HW)``, no ``HW x HW`` matrix.

    Parameters (default options, ``m = n = C // 4``): ``4 C m + 3 m + C``
    (``phi``: ``C m + m``; ``theta``, ``rho``: ``C n + n`` each; ``W_out``: ``m C + C``).

    Args:
        channels: input channels ``C``.
        reduction: ``m = n = C // reduction`` unless given explicitly.
        feature_channels: ``m``, the channels of ``A`` (overrides ``reduction``).
        num_descriptors: ``n``, the number of global descriptors (overrides ``reduction``).
    """

    def __init__(
        self,
        channels: int,
        reduction: float = 4,
        feature_channels: int | None = None,
        num_descriptors: int | None = None,
    ) -> None:
        super().__init__()
        if feature_channels is not None:
            check_positive_int("feature_channels", feature_channels)
            m = feature_channels
        else:
            m = reduced_channels(channels, reduction)
        if num_descriptors is not None:
            check_positive_int("num_descriptors", num_descriptors)
            n = num_descriptors
        else:
            n = reduced_channels(channels, reduction)
        self.feature_channels, self.num_descriptors = m, n
        self.phi = nn.Conv2d(channels, m, 1)
        self.theta = nn.Conv2d(channels, n, 1)
        self.rho = nn.Conv2d(channels, n, 1)
        self.proj = nn.Conv2d(m, channels, 1)

    def init_identity(self) -> None:
        """native: the output conv W_out starts at zero, so Y = X + 0."""
        nn.init.zeros_(self.proj.weight)
        nn.init.zeros_(self.proj.bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        n, _, h, w = x.shape
        a = self.phi(x).flatten(2)  # (N, m, HW)
        gather = torch.softmax(self.theta(x).flatten(2), dim=-1)  # (N, n, HW), over positions
        distribute = torch.softmax(self.rho(x).flatten(2), dim=1)  # (N, n, HW), over descriptors
        g = a @ gather.transpose(1, 2).to(a.dtype)  # (N, m, n)
        z = g @ distribute.to(g.dtype)  # (N, m, HW)
        if not torch.jit.is_scripting():  # noqa: SIM102 (TorchScript needs it alone)
            if is_capturing(self):
                received = (distribute.mean(dim=-1, keepdim=True) * gather).sum(dim=1)
                record_attention(self, received.reshape(n, 1, h, w))
        return x + self.proj(z.reshape(n, self.feature_channels, h, w))

    def extra_repr(self) -> str:
        return f"feature_channels={self.feature_channels}, num_descriptors={self.num_descriptors}"
