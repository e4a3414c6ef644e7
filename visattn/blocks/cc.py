"""Criss-cross attention with its recurrence (Huang, Wang, Huang, Huang, Wei, Liu; ICCV 2019,
"CCNet: Criss-Cross Attention for Semantic Segmentation")."""

from __future__ import annotations

import torch
import torch.nn as nn
from timm.layers import register_notrace_function

from ._attention import float32_region, widen
from ._utils import check_positive_int, reduced_channels
from .capture import is_capturing, record_attention
from .registry import register_block

__all__ = ["CrissCrossAttention", "criss_cross_weights"]


@register_notrace_function  # timm's FX feature path: one leaf call
def criss_cross_weights(q: torch.Tensor, k: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Affinity + softmax of the paper's Eq. (1)-(2) over each position's criss-cross path.

    ``q, k: (N, d, H, W)``. Returns ``(a_col, a_row)``: ``a_col[n, h, w, g]`` is the weight query
    ``(h, w)`` gives key ``(g, w)`` of its column and ``a_row[n, h, w, v]`` the weight it gives key
    ``(h, v)`` of its row. The query's own position belongs to both; it is counted once (in the
    row), as the paper's ``H + W - 1`` keys say, so ``a_col.sum(-1) + a_row.sum(-1) == 1``.

    The affinities and the softmax are float32 (float64 stays float64) with autocast off: the
    unscaled ``q . k`` overflow float16 at moderate activations.
    """
    if torch.jit.is_scripting():
        return _criss_cross_weights(q, k)
    with float32_region(q):
        return _criss_cross_weights(widen(q), widen(k))


torch.fx.wrap("criss_cross_weights")


def _criss_cross_weights(q: torch.Tensor, k: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    e_col = torch.einsum("nchw,ncgw->nhwg", q, k)  # (N, H, W, H)
    e_row = torch.einsum("nchw,nchv->nhwv", q, k)  # (N, H, W, W)
    h = e_col.shape[-1]
    # (H, H) diagonal built from a tensor, so fx/TorchScript see no Python int arithmetic
    # (a sum over the batch, not e_col[0]: an empty batch has no first sample)
    own = (torch.diag_embed(torch.ones_like(e_col[:, :, 0, 0].sum(0))) > 0).unsqueeze(1)
    e_col = e_col.masked_fill(own, float("-inf"))
    a = torch.softmax(torch.cat([e_col, e_row], dim=-1), dim=-1)
    return a[..., :h], a[..., h:]


@register_block("cc", family="spatial", paper="Huang et al., ICCV 2019", composed_zero_init=True)
class CrissCrossAttention(nn.Module):
    """Recurrent criss-cross attention (RCCA).

    One criss-cross step, Eqs. (1)-(2) of the paper, with ``Q = W_q H``, ``K = W_k H`` (1x1 convs
    ``C -> C/r``, ``r = 8`` as in the official code) and ``V = W_v H`` (1x1 conv ``C -> C``), all
    with bias. For position ``u`` let ``Omega_u`` be the ``H + W - 1`` keys in its row and column
    (itself once)::

        d_{i,u} = Q_u . Omega_{i,u}
        A_{i,u} = exp(d_{i,u}) / sum_i' exp(d_{i',u})          (no scaling)
        H'_u = sum_i A_{i,u} Phi_{i,u} + H_u

    with ``Phi_u`` the values on the same path. The recurrence applies the same step (shared
    weights, Sec. 3.2) ``recurrence = R`` times, ``H -> H' -> H''``; with ``R = 2`` every position
    reaches every other one.

    ``gamma=True`` gives the official code's step ``H'_u = gamma * sum_i A_{i,u} Phi_{i,u} + H_u``
    with one learnable scalar ``gamma`` shared by the steps, starting at 0. The official RCCA head's
    3x3 convolutions before and after the recurrence are not part of the block.

    Recorded attention: ``(N, 1, H, W)``, the attention each position *receives* through the
    ``R`` steps: the composed weights ``A_R ... A_1`` (row-stochastic, one row per query) averaged
    over the queries, so each map sums to 1. It is computed from the sparse criss-cross weights,
    never as a dense ``HW x HW`` matrix.

    Shapes: ``(N, C, H, W) -> (N, C, H, W)``; memory ``O(N HW (H + W))``.

    Parameters (default options, ``d = C // 8``): ``2 (C d + d) + C^2 + C``
    (``W_q``, ``W_k``; ``W_v``); ``gamma=True`` adds 1.

    Args:
        channels: input channels ``C``.
        reduction: query/key channels ``d = C // reduction`` (8 in the official code).
        recurrence: number of criss-cross steps ``R`` (2 in the paper).
        gamma: the official code's learnable output scale, starting at 0.
    """

    def __init__(
        self, channels: int, reduction: float = 8, recurrence: int = 2, gamma: bool = False
    ) -> None:
        super().__init__()
        check_positive_int("recurrence", recurrence)
        if not isinstance(gamma, bool):
            raise ValueError(f"option 'gamma' must be a bool, got {gamma!r}")
        inner = reduced_channels(channels, reduction)
        self.inner_channels, self.recurrence, self.use_gamma = inner, recurrence, gamma
        self.query = nn.Conv2d(channels, inner, 1)
        self.key = nn.Conv2d(channels, inner, 1)
        self.value = nn.Conv2d(channels, channels, 1)
        self.gamma = nn.Parameter(torch.zeros(1)) if gamma else None

    def init_identity(self) -> None:
        """native: the value conv starts at zero (gamma at 0 with gamma=True): each step adds 0."""
        if self.gamma is not None:
            nn.init.zeros_(self.gamma)
        else:
            nn.init.zeros_(self.value.weight)
            nn.init.zeros_(self.value.bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        capturing = False
        if not torch.jit.is_scripting():
            capturing = is_capturing(self)
        steps: list[tuple[torch.Tensor, torch.Tensor]] = []
        for _ in range(self.recurrence):
            a_col, a_row = criss_cross_weights(self.query(x), self.key(x))
            v = self.value(x)
            a_col, a_row = a_col.to(v.dtype), a_row.to(v.dtype)
            out = torch.einsum("nhwg,ncgw->nchw", a_col, v) + torch.einsum(
                "nhwv,nchv->nchw", a_row, v
            )
            if self.gamma is not None:
                out = self.gamma * out
            x = x + out
            if capturing:
                steps.append((a_col, a_row))
        if not torch.jit.is_scripting():  # noqa: SIM102 (TorchScript needs it alone)
            if capturing:
                record_attention(self, self._received(steps))
        return x

    @staticmethod
    def _received(steps: list[tuple[torch.Tensor, torch.Tensor]]) -> torch.Tensor:
        """``(1/HW) 1^T A_R ... A_1`` as an ``(N, 1, H, W)`` map, applied step by step."""
        a_col = steps[-1][0]
        r = torch.ones_like(a_col[..., 0]) / (a_col.shape[1] * a_col.shape[2])  # (N, H, W)
        for a_col, a_row in reversed(steps):
            r = torch.einsum("nhw,nhwg->ngw", r, a_col) + torch.einsum("nhw,nhwv->nhv", r, a_row)
        return r.unsqueeze(1)

    def extra_repr(self) -> str:
        return (
            f"inner_channels={self.inner_channels}, recurrence={self.recurrence}, "
            f"gamma={self.use_gamma}"
        )
