"""Bi-level routing attention (Zhu, Wang, Ke, Zhang, Lau; CVPR 2023, "BiFormer: Vision
Transformer with Bi-Level Routing Attention"): each region of the map attends, token to token,
to the few regions its region-level affinity ranks highest."""

from __future__ import annotations

import torch
import torch.nn as nn
import torch.nn.functional as F

from ._attention import ATTN_IMPLS, AttendMixin
from ._utils import attention_heads, check_choice, check_positive_int, same_memory_format
from .capture import is_capturing, record_attention
from .registry import register_block

# format bookkeeping outside the traced graph (torch.fx cannot branch on a proxy)
torch.fx.wrap("same_memory_format")

__all__ = ["BiLevelRoutingAttention"]


@register_block("bra", family="spatial", paper="Zhu et al., CVPR 2023 (BiFormer)")
class BiLevelRoutingAttention(AttendMixin, nn.Module):
    """BiFormer's bi-level routing attention as a residual block, ``y = x + W_o O``.

    Follows Sec. 3.2 of the paper (Eqs. 2-5) and the authors' reference module
    (``ops/bra_legacy.py``, as used by their BiFormer models)::

        Q, K, V = W_q x, W_k x, W_v x                 one 1x1 conv with bias, C each
        the map is cut into S x S regions (S = n_win) of (H/S) x (W/S) tokens
        Q^r, K^r = region means of Q, K               (S^2, C)
        A^r = Q^r (K^r)^T                             region-to-region affinity
        I^r = topk(A^r, k)                            the k regions each region routes to
        K^g, V^g = the tokens of the regions I^r      gathered: (S^2, k H W / S^2, C)
        O = softmax(Q (K^g)^T / sqrt(C)) V^g + LCE(V) token-to-token, in heads, per region;
                                                      LCE: a depthwise conv on V (with bias)

    The routing is not differentiable (the paper's and code's default: the region means are
    detached, so gradients reach ``W_q`` and ``W_k`` only through the token attention). The
    temperature is ``1/sqrt(C)`` with ``C`` the whole query depth, not the head depth, as in the
    paper's Eq. 5 and the authors' code.

    A map whose sides are not multiples of ``S`` is zero-padded at the bottom and right before
    the projections and cropped after (the authors' ``auto_pad``; padded tokens take part in the
    routing and the attention as in their code). Maps smaller than ``S`` are padded to ``S``.

    The top-k gather is an index selection on the flattened regions (``index_select``), which
    exports to ONNX as ``TopK`` and ``Gather``. The logits and softmax are computed in float32
    under autocast.

    Shapes: ``(N, C, H, W) -> (N, C, H, W)``. Attention map ``(N, 1, H, W)``: the attention each
    position receives, summed over the real queries and heads and divided by their number (at
    most 1: the share given to padded tokens is not shown).

    Parameters (LCE kernel ``k``, 5 in BiFormer): ``4 C^2 + (k^2 + 5) C`` (``W_qkv``:
    ``3 C^2 + 3 C``, ``W_o``: ``C^2 + C``, LCE: ``k^2 C + C``).

    Args:
        channels: input channels ``C``.
        heads: attention heads; ``None`` gives BiFormer's heads of depth 32
            (``max(1, C // 32)``, lowered to the nearest count that divides ``C``).
        n_win: regions per side ``S`` (BiFormer 7 at 224x224 input).
        topk: regions each region attends to (BiFormer-T/S/B: 1, 4, 16 in stages 1-3); at most
            ``S^2``.
        lepe_kernel: kernel of the local context enhancement (odd; BiFormer's models 5).
        attn_impl: ``fused`` (``F.scaled_dot_product_attention``) or ``math`` (weights written
            out); the same function (:func:`~visattn.blocks._attention.softmax_attention`).
    """

    def __init__(
        self,
        channels: int,
        heads: int | None = None,
        n_win: int = 7,
        topk: int = 4,
        lepe_kernel: int = 5,
        attn_impl: str = "fused",
    ) -> None:
        super().__init__()
        heads = attention_heads(channels, heads)
        check_choice("attn_impl", attn_impl, ATTN_IMPLS)
        self.attn_impl = attn_impl
        check_positive_int("n_win", n_win)
        check_positive_int("topk", topk)
        if topk > n_win * n_win:
            raise ValueError(
                f"option 'topk'={topk} exceeds the {n_win * n_win} regions of n_win={n_win}"
            )
        check_positive_int("lepe_kernel", lepe_kernel, odd=True)
        self.channels, self.heads, self.n_win, self.topk = channels, heads, n_win, topk
        self.dim_head = channels // heads
        self.scale = channels**-0.5
        self.qkv = nn.Conv2d(channels, 3 * channels, 1)
        self.lepe = nn.Conv2d(
            channels, channels, lepe_kernel, padding=lepe_kernel // 2, groups=channels
        )
        self.proj = nn.Conv2d(channels, channels, 1)

    def init_identity(self) -> None:
        """native: the output projection starts at 0, so ``y = x + 0``."""
        nn.init.zeros_(self.proj.weight)
        nn.init.zeros_(self.proj.bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        n, c, h, w = x.shape[0], self.channels, x.shape[2], x.shape[3]
        s, heads, d, topk = self.n_win, self.heads, self.dim_head, self.topk
        rh, rw = (h + s - 1) // s, (w + s - 1) // s  # region size of the padded map
        xp = F.pad(x, [0, rw * s - w, 0, rh * s - h])
        q, k, v = self.qkv(xp).split([c, c, c], dim=1)
        lepe = self.lepe(v)
        q, k, v = self._regions(q, rh, rw), self._regions(k, rh, rw), self._regions(v, rh, rw)
        # region-level routing (no gradient), (N, S^2, topk)
        affinity = q.detach().mean(2) @ k.detach().mean(2).transpose(1, 2)
        idx = torch.topk(affinity, topk, dim=-1).indices
        kg, vg = self._gather(k, idx), self._gather(v, idx)  # (N, S^2, topk * rh * rw, C)
        o, a = self._attend(self._heads(q), self._heads(kg), self._heads(vg))
        if not torch.jit.is_scripting():  # noqa: SIM102 (scripting skips the inner test)
            if is_capturing(self):
                record_attention(self, self._received(a, idx, h, w, rh, rw))
        # (N, S^2, heads, rh * rw, d) -> (N, C, S rh, S rw)
        o = o.reshape(n, s, s, heads, rh, rw, d).permute(0, 3, 6, 1, 4, 2, 5)
        o = o.reshape(n, c, s * rh, s * rw) + lepe
        y = self.proj(o)[:, :, :h, :w]
        return same_memory_format(x + y, x)

    def _regions(self, t: torch.Tensor, rh: int, rw: int) -> torch.Tensor:
        """``(N, C, S rh, S rw) -> (N, S^2, rh * rw, C)``: regions row-major, tokens row-major."""
        n, c, s = t.shape[0], t.shape[1], self.n_win
        t = t.reshape(n, c, s, rh, s, rw).permute(0, 2, 4, 3, 5, 1)
        return t.reshape(n, s * s, rh * rw, c)

    def _gather(self, t: torch.Tensor, idx: torch.Tensor) -> torch.Tensor:
        """The tokens of the routed regions: ``t`` ``(N, S^2, L, C)``, ``idx`` ``(N, S^2, k)``
        -> ``(N, S^2, k L, C)``, by an index selection on the flattened regions."""
        n, r, length, c = t.shape[0], t.shape[1], t.shape[2], t.shape[3]
        flat = (idx + torch.arange(n, device=idx.device)[:, None, None] * r).reshape(-1)
        got = t.reshape(n * r, length * c).index_select(0, flat)
        return got.reshape(n, r, self.topk * length, c)

    def _heads(self, t: torch.Tensor) -> torch.Tensor:
        """``(N, S^2, L, C) -> (N, S^2, heads, L, d)``."""
        n, r, length = t.shape[0], t.shape[1], t.shape[2]
        return t.reshape(n, r, length, self.heads, self.dim_head).transpose(2, 3)

    def _received(
        self, a: torch.Tensor, idx: torch.Tensor, h: int, w: int, rh: int, rw: int
    ) -> torch.Tensor:
        """``(N, 1, H, W)``: weights summed over the real queries and the heads, scattered back
        to the routed regions, divided by (queries x heads)."""
        n, s = a.shape[0], self.n_win
        real = torch.zeros(s * rh, s * rw, device=a.device, dtype=a.dtype)
        real[:h, :w] = 1
        real = real.reshape(s, rh, s, rw).permute(0, 2, 1, 3).reshape(s * s, rh * rw)
        got = torch.einsum("nrhqk,rq->nrk", a, real)  # (N, S^2, topk * L)
        got = got.reshape(n, s * s * self.topk, rh * rw)
        flat = (idx + torch.arange(n, device=idx.device)[:, None, None] * s * s).reshape(-1)
        out = torch.zeros(n * s * s, rh * rw, device=a.device, dtype=a.dtype)
        out = out.index_add(0, flat, got.reshape(-1, rh * rw))
        out = out.reshape(n, s, s, rh, rw).permute(0, 1, 3, 2, 4).reshape(n, 1, s * rh, s * rw)
        return out[..., :h, :w] / (self.heads * h * w)

    def extra_repr(self) -> str:
        return (
            f"{self.channels}, heads={self.heads}, n_win={self.n_win}, topk={self.topk}, "
            f"attn_impl={self.attn_impl!r}"
        )
