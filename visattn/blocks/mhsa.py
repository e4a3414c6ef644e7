"""Multi-head self-attention with 2-D relative position logits, as in Bottleneck Transformers
(Srinivas, Lin, Parmar, Shlens, Abbeel, Vaswani; CVPR 2021, "Bottleneck Transformers for Visual
Recognition"); the relative logits follow Bello et al. (ICCV 2019, "Attention Augmented
Convolutional Networks")."""

from __future__ import annotations

import torch
import torch.nn as nn
import torch.nn.functional as F

from ._attention import ATTN_IMPLS, AttendMixin
from ._utils import check_choice, check_positive_int, init_conv_io, same_memory_format
from .capture import is_capturing, record_attention
from .registry import register_block

# format bookkeeping outside the traced graph (torch.fx cannot branch on a proxy)
torch.fx.wrap("same_memory_format")

__all__ = ["ATTN_IMPLS", "BottleneckMHSA", "relative_index", "relative_logits"]


def relative_index(
    n_query: int,
    n_key: int,
    table: int,
    query_step: int = 1,
    shift: int = 0,
    device: torch.device | None = None,
) -> torch.Tensor:
    """``(n_query, n_key)`` rows of a relative-position table of ``2 * table - 1`` entries.

    Query ``i`` sits at ``query_step * i``, key ``j`` at ``j - shift``; their offset
    ``j - shift - query_step * i`` is clipped to ``[-(table - 1), table - 1]`` (an offset beyond
    the table shares its last entry, as in Shaw et al., NAACL 2018) and shifted to
    ``[0, 2 table - 2]``.
    """
    i = torch.arange(n_query, device=device)[:, None] * query_step
    j = torch.arange(n_key, device=device)[None, :] - shift
    return (j - i).clamp(-(table - 1), table - 1) + (table - 1)


def relative_logits(
    q: torch.Tensor,
    rel_h: torch.Tensor,
    rel_w: torch.Tensor,
    idx_h: torch.Tensor,
    idx_w: torch.Tensor,
) -> tuple[torch.Tensor, torch.Tensor]:
    """2-D relative logits ``q_(y,x) . (r^h_(idx_h[y,y']) + r^w_(idx_w[x,x']))`` as a grid bias.

    ``q``: ``(B, Hq, Wq, d)``; ``rel_h``/``rel_w``: ``(R, d)`` tables; ``idx_h``: ``(Hq, Hk)``,
    ``idx_w``: ``(Wq, Wk)`` table rows. Returns ``(rows, cols)``, ``(B, Hq * Wq, Hk)`` and
    ``(B, Hq * Wq, Wk)``: the query's logit for every key row and every key column, whose sum over
    a key's row and column is its relative logit (the ``grid_bias`` of
    :func:`~visattn.blocks._attention.softmax_attention`, which never builds the
    ``(B, Hq Wq, Hk Wk)`` matrix on its fused path).
    """
    b, hq, wq = q.shape[0], q.shape[1], q.shape[2]
    hk, wk = idx_h.shape[1], idx_w.shape[1]
    cols = torch.gather(q @ rel_w.t(), -1, idx_w.expand(b, hq, wq, wk))  # (B, Hq, Wq, Wk)
    rows = torch.gather(q @ rel_h.t(), -1, idx_h[:, None, :].expand(b, hq, wq, hk))  # (.., Hk)
    return rows.reshape(b, hq * wq, hk), cols.reshape(b, hq * wq, wk)


def _pair(v: int | tuple[int, int] | list[int], option: str) -> tuple[int, int]:
    pair = (v, v) if isinstance(v, int) else tuple(v)
    if len(pair) != 2:
        raise ValueError(f"option '{option}' must be an int or (height, width), got {v!r}")
    for p in pair:
        check_positive_int(option, p)
    return pair  # type: ignore[return-value]


@register_block(
    "mhsa",
    family="spatial",
    paper="Srinivas et al., CVPR 2021",
    replaces_conv=True,
    composed_zero_init=True,
)
class BottleneckMHSA(AttendMixin, nn.Module):
    """BoTNet's all-to-all multi-head self-attention with 2-D relative position logits.

    Follows Fig. 4 of the paper and its reference code (the authors' gist)::

        q, k, v = W_Q x, W_K x, W_V x                    1x1 convs, no bias, split in heads
        logits_ij = (q_i . k_j + q_i . (r^h_{y_j - y_i} + r^w_{x_j - x_i})) / sqrt(d)
        y_i = sum_j softmax_j(logits_ij) v_j

    The relative embeddings ``r^h``, ``r^w`` (``d`` channels, shared by the heads) form tables of
    ``2 H_f - 1`` and ``2 W_f - 1`` rows for a feature size ``feat_size = (H_f, W_f)``. On an
    input of that size the block is exactly the paper's; other sizes work too: offsets beyond
    ``+-(H_f - 1)`` share the table's last row (clipped relative positions), and a smaller input
    only uses the central rows. ``scale_pos=False`` is timm's default, which scales only
    ``q . k``.

    The attention runs through ``F.scaled_dot_product_attention`` (``attn_impl="fused"``): the
    relative logits enter as extra query/key channels (see :func:`relative_logits`), so no
    ``HW x HW`` matrix is built or kept for the backward, and the logits and the softmax's
    normaliser stay float32 under autocast. On a map of at most 256 positions, where that matrix
    is small and the extra channels cost more than it, the logits are written out instead (in
    float32). ``attn_impl="math"`` always writes them out; both compute the same function.

    The paper's MHSA cannot stride: with ``stride=2`` it is followed by a 2x2 average pool, as in
    BoT50 (``ceil_mode``, so odd sizes give ``ceil(H / 2)`` like a padded strided conv).

    Shapes: ``(N, C, H, W) -> (N, C', H / s, W / s)``. Attention map ``(N, 1, H, W)``: the
    attention each position receives, averaged over queries and heads (sums to 1).

    Parameters (``h`` heads, ``d`` query/key depth per head, default ``C' / h``):
    ``C (2 h d + C') + (2 H_f - 1 + 2 W_f - 1) d`` (``+ 2 h d + C'`` with ``qkv_bias``).

    Args:
        channels: input channels ``C``.
        out_channels: output channels ``C'`` (default ``C``; a multiple of ``heads``).
        stride: 1, or 2 for BoTNet's 2x2 average pool after the attention.
        heads: attention heads (paper 4).
        dim_head: query/key depth per head (default ``C' / heads``, the value depth).
        feat_size: the feature size the relative tables are made for (int or ``(H, W)``); BoT50's
            first c5 block sees 14x14 at 224x224 input, the next ones 7x7.
        qkv_bias: bias on the projections (paper: none).
        scale_pos: divide the relative logits by ``sqrt(d)`` too (paper's reference code); timm's
            default is ``False``.
        attn_impl: ``fused`` (memory linear in ``HW``) or ``math`` (the full logits).
    """

    def __init__(
        self,
        channels: int,
        out_channels: int | None = None,
        stride: int = 1,
        heads: int = 4,
        dim_head: int | None = None,
        feat_size: int | tuple[int, int] = 14,
        qkv_bias: bool = False,
        scale_pos: bool = True,
        attn_impl: str = "fused",
    ) -> None:
        super().__init__()
        check_choice("attn_impl", attn_impl, ATTN_IMPLS)
        if stride not in (1, 2):
            raise ValueError(f"option 'stride' must be 1 or 2 (2x2 average pool), got {stride!r}")
        out = init_conv_io(self, channels, out_channels, stride, heads=heads)
        d = out // heads if dim_head is None else dim_head
        check_positive_int("dim_head", d)
        self.feat_size = _pair(feat_size, "feat_size")
        self.heads, self.dim_head, self.scale_pos = heads, d, scale_pos
        self.attn_impl = attn_impl
        self.scale = d**-0.5
        self.qkv = nn.Conv2d(channels, 2 * heads * d + out, 1, bias=qkv_bias)
        self.rel_h = nn.Parameter(torch.empty(2 * self.feat_size[0] - 1, d))
        self.rel_w = nn.Parameter(torch.empty(2 * self.feat_size[1] - 1, d))
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """Projections normal with std ``C^-1/2`` (fan-in), relative tables with std ``d^-1/2``."""
        nn.init.normal_(self.qkv.weight, std=self.in_channels**-0.5)
        if self.qkv.bias is not None:
            nn.init.zeros_(self.qkv.bias)
        nn.init.normal_(self.rel_h, std=self.scale)
        nn.init.normal_(self.rel_w, std=self.scale)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        n, h, w = x.shape[0], x.shape[2], x.shape[3]
        heads, d, dv = self.heads, self.dim_head, self.out_channels // self.heads
        q, k, v = torch.split(self.qkv(x), [heads * d, heads * d, self.out_channels], dim=1)
        q = q.reshape(n * heads, d, h * w).transpose(1, 2)  # (B, HW, d)
        k = k.reshape(n * heads, d, h * w).transpose(1, 2)
        v = v.reshape(n * heads, dv, h * w).transpose(1, 2)
        idx_h = relative_index(h, h, self.feat_size[0], device=x.device)
        idx_w = relative_index(w, w, self.feat_size[1], device=x.device)
        qs = q * self.scale  # scaling q costs HW*d, scaling the logits (HW)^2
        grid = relative_logits(
            (qs if self.scale_pos else q).reshape(-1, h, w, d), self.rel_h, self.rel_w, idx_h, idx_w
        )
        y, a = self._attend(qs, k, v, grid_bias=grid, scale=1.0)
        if not torch.jit.is_scripting():  # noqa: SIM102 (scripting skips the inner test)
            if is_capturing(self):
                record_attention(self, a.view(n, heads * h * w, h, w).mean(1, keepdim=True))
        y = y.transpose(1, 2).reshape(n, self.out_channels, h, w)
        if self.stride > 1:
            y = F.avg_pool2d(y, 2, 2, ceil_mode=True)
        return same_memory_format(y, x)

    def extra_repr(self) -> str:
        return (
            f"{self.in_channels}, {self.out_channels}, stride={self.stride}, heads={self.heads}, "
            f"dim_head={self.dim_head}, feat_size={self.feat_size}, scale_pos={self.scale_pos}, "
            f"attn_impl={self.attn_impl!r}"
        )
