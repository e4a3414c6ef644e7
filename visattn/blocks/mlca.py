"""Mixed Local Channel Attention (Wan, Lu, Wang, Wang, Liu; Engineering Applications of Artificial
Intelligence 2023, "Mixed local channel attention for object detection")."""

from __future__ import annotations

import torch
import torch.nn as nn

from ._utils import adaptive_avg_pool, check_positive_int, resolve_eca_kernel
from .capture import record_attention
from .identity import ScaledSigmoid
from .registry import register_block

torch.fx.wrap("adaptive_avg_pool")  # a leaf for torch.fx: it builds its bins from the sizes


@register_block("mlca", family="hybrid", paper="Wan et al., EAAI 2023 (MLCA)")
class MixedLocalChannelAttention(nn.Module):
    """MLCA: ECA-style channel attention on an ``s x s`` grid of local averages and on their
    global mean, mixed and spread back over the map.

    Follows the paper's MLCA module and the authors' code (``wandahangFY/MLCA``):

    * local average pooling ``L = LAP_s(X)`` ``(N, C, s, s)`` (adaptive, ``s = 5``), global
      ``G = GAP(L)`` ``(N, C, 1, 1)``;
    * global branch: ``a_g = sigmoid(Conv1D_k(G))`` over the channel axis, as ECA;
    * local branch: ``L`` is flattened position by position into one sequence of length
      ``s^2 C`` (the ``C`` channels of position 1, then of position 2, ...), convolved by its own
      size-``k`` 1-D conv and reshaped back: ``a_l = sigmoid(...)`` ``(N, C, s, s)``. As in the
      authors' code, the conv runs over the whole sequence, so the last channels of one position
      and the first of the next are neighbours;
    * ``a = (1 - w) a_g + w a_l`` (``w = 0.5``), then "un-pooled" to ``H x W`` by adaptive average
      pooling of the ``s x s`` grid (``UNAP``); ``Y = X * a``.

    ``k = |log2(C)/gamma + b/gamma|_odd`` as in ECA (``gamma = 2, b = 1``); both 1-D convs have no
    bias and zero padding. No difference from the authors' code is known (their
    ``MLCA_changed.py`` variants, a learnable ``w`` and nearest un-pooling, are not offered).

    Shapes: ``(N, C, H, W) -> (N, C, H, W)``; attention map ``a`` at full size ``(N, C, H, W)``.

    Parameters: ``2 k`` (10 at C = 256).

    Args:
        channels: input channels ``C``.
        local_size: ``s``, the side of the local pooling grid.
        local_weight: ``w`` in ``[0, 1]``, the share of the local branch.
        kernel_size: explicit positive odd ``k``; ``None`` adapts it to ``C`` (``gamma``, ``b``).
        gamma: ``gamma`` of ECA's rule.
        b: ``b`` of ECA's rule.
    """

    def __init__(
        self,
        channels: int,
        local_size: int = 5,
        local_weight: float = 0.5,
        kernel_size: int | None = None,
        gamma: float = 2.0,
        b: float = 1.0,
    ) -> None:
        super().__init__()
        check_positive_int("local_size", local_size)
        if (
            isinstance(local_weight, bool)
            or not isinstance(local_weight, (int, float))
            or not 0.0 <= local_weight <= 1.0
        ):
            raise ValueError(
                f"option 'local_weight' must be a number in [0, 1], got {local_weight!r}"
            )
        kernel_size = resolve_eca_kernel(channels, kernel_size, gamma, b)
        self.local_size, self.local_weight, self.kernel_size = (
            local_size,
            float(local_weight),
            kernel_size,
        )
        self.conv = nn.Conv1d(1, 1, kernel_size, padding=kernel_size // 2, bias=False)
        self.conv_local = nn.Conv1d(1, 1, kernel_size, padding=kernel_size // 2, bias=False)
        self.gate = nn.Sigmoid()

    def init_identity(self) -> None:
        """native: both 1-D convs zero, gate 2*sigmoid, so a_g = a_l = 1 and a = 1."""
        nn.init.zeros_(self.conv.weight)
        nn.init.zeros_(self.conv_local.weight)
        self.gate = ScaledSigmoid(2.0)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        n, c, h, w = x.shape
        s = self.local_size
        local = adaptive_avg_pool(x, s, s)  # (N, C, s, s)
        glob = local.mean((2, 3))  # (N, C)
        a_g = self.gate(self.conv(glob.unsqueeze(1))).view(n, c, 1, 1)
        seq = local.permute(0, 2, 3, 1).reshape(n, 1, s * s * c)  # position-major
        a_l = self.gate(self.conv_local(seq)).view(n, s, s, c).permute(0, 3, 1, 2)
        mixed = a_g * (1.0 - self.local_weight) + a_l * self.local_weight
        a = adaptive_avg_pool(mixed, h, w)
        if not torch.jit.is_scripting():
            record_attention(self, a)
        return x * a

    def extra_repr(self) -> str:
        return (
            f"local_size={self.local_size}, local_weight={self.local_weight}, "
            f"kernel_size={self.kernel_size}"
        )
