"""Blocked local self-attention with haloing (Vaswani, Ramachandran, Srinivas, Parmar, Hechtman,
Shlens; CVPR 2021, "Scaling Local Self-Attention for Parameter Efficient Visual Backbones")."""

from __future__ import annotations

import torch
import torch.nn as nn
import torch.nn.functional as F

from ._attention import AttendMixin
from ._utils import check_choice, check_positive_int, init_conv_io, same_memory_format
from .capture import is_capturing, record_attention
from .mhsa import ATTN_IMPLS, relative_index, relative_logits
from .registry import register_block

# format bookkeeping outside the traced graph (torch.fx cannot branch on a proxy)
torch.fx.wrap("same_memory_format")

__all__ = ["HaloAttention"]

REL_POS = ("image", "query_grid")


@register_block(
    "halo",
    family="spatial",
    paper="Vaswani et al., CVPR 2021",
    replaces_conv=True,
    composed_zero_init=True,
)
class HaloAttention(AttendMixin, nn.Module):
    """HaloNet's blocked local self-attention.

    Follows Sec. 2.2 and Fig. 1 of the paper: the map is cut into non-overlapping ``b x b`` query
    blocks; each block attends to the ``(b + 2h) x (b + 2h)`` window around it (the block plus a
    halo of ``h`` pixels, zero outside the map)::

        logits_ij = (q_i . k_j + q_i . (r^h_{y_j - y_i} + r^w_{x_j - x_i})) / sqrt(d)
        y_i = sum_{j in window(block(i))} softmax_j(logits_ij) v_j

    with 1x1 projections without bias and 2-D relative embeddings of ``d`` channels shared by the
    heads (tables of ``2 (b + 2h) - 1`` rows). ``scale_pos=False`` scales only ``q . k`` (timm's
    default).

    Any input size works: the projected maps are zero-padded to a multiple of ``b`` (the halo's
    zeros simply extend) and the output is cropped back; on multiples of ``b`` nothing is padded.

    Striding (the paper's strided self-attention): with ``stride = s`` dividing ``b`` the queries
    are subsampled (every ``s``-th pixel, ``b/s x b/s`` queries per block) while keys and values
    keep the full window. The relative offsets are measured on the image (``rel_pos="image"``);
    timm measures them on the subsampled query grid (``rel_pos="query_grid"``, equal at stride
    1). With ``avg_down=True`` (or ``s`` not dividing ``b``) the attention runs at stride 1 and an
    ``s x s`` average pool follows (timm's option). Output sizes are ``ceil(H / s)``, like a padded
    strided conv.

    The attention runs through ``F.scaled_dot_product_attention`` (``attn_impl="fused"``), the
    relative logits entering as extra query/key channels, so no ``b^2 x w^2`` weights per block
    are kept for the backward; ``attn_impl="math"`` writes the logits and the softmax out (in
    float32). Both compute the same function.

    Shapes: ``(N, C, H, W) -> (N, C', H / s, W / s)``. Attention map ``(N, 1, H, W)``: the
    attention each input position receives, averaged over queries and heads (at most 1 in
    total: the share given to the zero padding beyond the map is not shown).

    Parameters (``h`` heads, ``d`` query/key depth per head, default ``C' / h``, window
    ``w = b + 2 halo``): ``C (2 h d + C') + 2 (2 w - 1) d`` (``+ 2 h d + C'`` with ``qkv_bias``).

    Args:
        channels: input channels ``C``.
        out_channels: output channels ``C'`` (default ``C``; a multiple of ``heads``).
        stride: output stride.
        heads: attention heads (timm 8).
        dim_head: query/key depth per head (default ``C' / heads``, the value depth).
        block_size: query block ``b`` (paper 8).
        halo_size: halo ``h`` (paper 3).
        qkv_bias: bias on the projections (paper: none).
        scale_pos: divide the relative logits by ``sqrt(d)`` too (as BoTNet's reference code).
        avg_down: stride by an average pool after the attention instead of subsampled queries.
        rel_pos: ``"image"`` or ``"query_grid"`` (timm), where strided queries' offsets are
            measured.
        attn_impl: ``fused`` (no weights kept) or ``math`` (the full logits per block).
    """

    #: why an ONNX graph with symbolic height and width cannot hold this block: the export
    #: refuses ``dynamic_size`` up front (:func:`visattn.export.export_onnx`)
    fixed_size_export = (
        "pads its maps to a multiple of its block size by amounts the exporter writes as "
        "constants of the traced size"
    )

    def __init__(
        self,
        channels: int,
        out_channels: int | None = None,
        stride: int = 1,
        heads: int = 8,
        dim_head: int | None = None,
        block_size: int = 8,
        halo_size: int = 3,
        qkv_bias: bool = False,
        scale_pos: bool = True,
        avg_down: bool = False,
        rel_pos: str = "image",
        attn_impl: str = "fused",
    ) -> None:
        super().__init__()
        check_choice("attn_impl", attn_impl, ATTN_IMPLS)
        out = init_conv_io(self, channels, out_channels, stride, heads=heads)
        check_positive_int("block_size", block_size)
        if isinstance(halo_size, bool) or not isinstance(halo_size, int) or halo_size < 0:
            raise ValueError(f"option 'halo_size' must be a non-negative int, got {halo_size!r}")
        check_choice("rel_pos", rel_pos, REL_POS)
        d = out // heads if dim_head is None else dim_head
        check_positive_int("dim_head", d)
        self.heads, self.dim_head, self.scale_pos, self.scale = heads, d, scale_pos, d**-0.5
        self.block_size, self.halo_size = block_size, halo_size
        self.win_size = block_size + 2 * halo_size
        self.pool_stride = stride if stride > 1 and (avg_down or block_size % stride) else 1
        self.query_stride = stride // self.pool_stride
        self.rel_pos, self.attn_impl = rel_pos, attn_impl
        self.q = nn.Conv2d(channels, heads * d, 1, stride=self.query_stride, bias=qkv_bias)
        # keys and values per head: (k_h, v_h) channel pairs, head-major
        self.kv = nn.Conv2d(channels, heads * d + out, 1, bias=qkv_bias)
        self.rel_h = nn.Parameter(torch.empty(2 * self.win_size - 1, d))
        self.rel_w = nn.Parameter(torch.empty(2 * self.win_size - 1, d))
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """Projections normal with std ``C^-1/2`` (fan-in), relative tables with std ``d^-1/2``."""
        for conv in (self.q, self.kv):
            nn.init.normal_(conv.weight, std=self.in_channels**-0.5)
            if conv.bias is not None:
                nn.init.zeros_(conv.bias)
        nn.init.normal_(self.rel_h, std=self.scale)
        nn.init.normal_(self.rel_w, std=self.scale)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        n, h, w = x.shape[0], x.shape[2], x.shape[3]
        heads, d, dv = self.heads, self.dim_head, self.out_channels // self.heads
        b, halo, win, s = self.block_size, self.halo_size, self.win_size, self.query_stride
        bq = b // s
        nh, nw = -(-h // b), -(-w // b)  # blocks per column / row (padded map)
        q = self.q(x)
        hq, wq = q.shape[2], q.shape[3]
        q = F.pad(q, [0, nw * bq - wq, 0, nh * bq - hq])
        q = q.reshape(n * heads, d, nh, bq, nw, bq).permute(0, 2, 4, 3, 5, 1)
        q = q.reshape(n * heads * nh * nw, bq, bq, d)
        kv = F.pad(self.kv(x), [halo, halo + nw * b - w, halo, halo + nh * b - h])
        kv = kv.unfold(2, win, b).unfold(3, win, b)  # (N, C, nh, nw, win, win)
        kv = kv.reshape(n * heads, d + dv, nh * nw, win * win).permute(0, 2, 3, 1)
        k, v = kv.reshape(-1, win * win, d + dv).split([d, dv], dim=-1)
        step = s if self.rel_pos == "image" else 1
        idx = relative_index(bq, win, win, query_step=step, shift=0, device=x.device)
        qs = q * self.scale  # scaling q costs bq^2*d per block, scaling the logits bq^2*win^2
        grid = relative_logits(qs if self.scale_pos else q, self.rel_h, self.rel_w, idx, idx)
        qs = qs.reshape(-1, bq * bq, d)
        y, a = self._attend(qs, k, v, grid_bias=grid, scale=1.0)
        if not torch.jit.is_scripting():  # noqa: SIM102 (scripting skips the inner test)
            if is_capturing(self):
                record_attention(self, self._received(a, n, h, w, hq, wq))
        y = y.reshape(n, heads, nh, nw, bq, bq, dv).permute(0, 1, 6, 2, 4, 3, 5)
        y = y.reshape(n, self.out_channels, nh * bq, nw * bq)[..., :hq, :wq]
        if self.pool_stride > 1:
            y = F.avg_pool2d(y, self.pool_stride, self.pool_stride, ceil_mode=True)
        return same_memory_format(y, x)

    def _received(self, a: torch.Tensor, n: int, h: int, w: int, hq: int, wq: int) -> torch.Tensor:
        """``(N, 1, H, W)``: weights summed over the real queries (padding excluded) and the
        heads, folded back from the windows onto the map, divided by (queries x heads)."""
        b, halo, win = self.block_size, self.halo_size, self.win_size
        bq = b // self.query_stride
        nh, nw = -(-h // b), -(-w // b)
        real = torch.zeros(nh * bq, nw * bq, device=a.device, dtype=a.dtype)
        real[:hq, :wq] = 1
        real = real.reshape(nh, bq, nw, bq).permute(0, 2, 1, 3).reshape(nh * nw, bq * bq)
        a = a.view(n, self.heads, nh * nw, bq * bq, win * win)
        got = torch.einsum("nhbqk,bq->nbk", a, real)  # (N, blocks, win^2)
        size = (nh * b + 2 * halo, nw * b + 2 * halo)
        got = F.fold(got.transpose(1, 2), size, win, stride=b)  # overlapping windows add up
        return got[..., halo : halo + h, halo : halo + w] / (self.heads * hq * wq)

    def extra_repr(self) -> str:
        return (
            f"{self.in_channels}, {self.out_channels}, stride={self.stride}, heads={self.heads}, "
            f"dim_head={self.dim_head}, block_size={self.block_size}, "
            f"halo_size={self.halo_size}, scale_pos={self.scale_pos}, attn_impl={self.attn_impl!r}"
        )
