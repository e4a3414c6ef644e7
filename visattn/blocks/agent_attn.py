"""Agent attention (Han, Ye, Han, Pan, Wang, Song, Huang; ECCV 2024, "Agent Attention: On the
Integration of Softmax and Linear Attention"): softmax attention routed through a few agent
tokens pooled from the queries, at a cost linear in the number of positions."""

from __future__ import annotations

import torch
import torch.nn as nn

from ._attention import ATTN_IMPLS, AttendMixin
from ._utils import attention_heads, check_choice, check_positive_int, same_memory_format
from .capture import is_capturing, record_attention
from .mhsa import _pair
from .registry import register_block

# a leaf of the traced graph: format bookkeeping (torch.fx cannot branch on a proxy)
torch.fx.wrap("same_memory_format")

__all__ = ["AgentAttention", "adaptive_pool_matrix", "bilinear_matrix"]

BIAS_GRID = 7  # the authors' agent biases are 7x7 grids resized to the map


def adaptive_pool_matrix(
    out: int,
    size: int,
    device: torch.device | None = None,
    dtype: torch.dtype = torch.float32,
) -> torch.Tensor:
    """``(out, size)`` averaging matrix of ``AdaptiveAvgPool1d(out)``: row ``i`` averages the
    positions ``[floor(i size / out), ceil((i + 1) size / out))``. Built from ``arange``, so a
    graph exported with a symbolic ``size`` stays right at every size."""
    i = torch.arange(out, device=device)[:, None]
    j = torch.arange(size, device=device)[None, :]
    start = torch.div(i * size, out, rounding_mode="floor")
    end = torch.div((i + 1) * size + out - 1, out, rounding_mode="floor")
    inside = ((j >= start) & (j < end)).to(dtype)
    return inside / inside.sum(1, keepdim=True)


def bilinear_matrix(
    out: int,
    size: int,
    device: torch.device | None = None,
    dtype: torch.dtype = torch.float32,
) -> torch.Tensor:
    """``(out, size)`` matrix of 1-D linear resizing with ``align_corners=False`` (the rows of
    ``F.interpolate(..., mode="bilinear")`` along one axis): source ``(i + 0.5) size / out - 0.5``
    clamped at 0, weights ``1 - t`` and ``t`` on its two neighbours."""
    src = (torch.arange(out, device=device, dtype=dtype) + 0.5) * (size / out) - 0.5
    src = src.clamp(min=0)
    i0 = src.floor()
    t = (src - i0)[:, None]
    i1 = (i0 + 1).clamp(max=size - 1)
    j = torch.arange(size, device=device, dtype=dtype)[None, :]
    return (j == i0[:, None]).to(dtype) * (1 - t) + (j == i1[:, None]).to(dtype) * t


@register_block("agent_attn", family="spatial", paper="Han et al., ECCV 2024 (Agent Attention)")
class AgentAttention(AttendMixin, nn.Module):
    """Agent attention as a residual block, ``y = x + W_o O``.

    Follows Eqs. (3)-(5) of the paper and the authors' PVT/Swin modules::

        Q, K, V = W_q x, W_k x, W_v x                1x1 convs (bias: ``qkv_bias``), in heads
        A = pool(Q)                                   agent tokens: Q average-pooled to p x p
        V_A = softmax(A K^T / sqrt(d) + B_1) V        agents gather from all positions
        O = softmax(Q A^T / sqrt(d) + B_2) V_A + DWC(V)   queries read the agents; DWC is a
                                                          3x3 depthwise conv (with bias)

    ``n = p^2`` agents (``agent_num``), so both softmaxes cost ``O(n H W d)``: linear in the
    positions. The agent biases (``agent_bias=True``, the paper's Sec. 4 and the official code)
    are ``B_1 = resize(b_an) + (b_ah + b_aw)`` and ``B_2 = resize(b_na) + (b_ha + b_wa)``: 7x7
    grids per head and agent, bilinearly resized to the map, plus row and column terms made for
    ``feat_size``. The official modules fix the map size; here any size works: on a map of
    ``feat_size`` the row and column terms are the authors', on other sizes they are linearly
    resized like the grids. Agent pooling and resizing are written as small matrices (equal to
    ``AdaptiveAvgPool2d`` and ``F.interpolate(mode="bilinear")``), so a graph exported with a
    symbolic map size stays right at every size. The logits and softmaxes are computed in
    float32 under autocast.

    Shapes: ``(N, C, H, W) -> (N, C, H, W)``. Attention map ``(N, 1, H, W)``: the attention each
    position receives through the agents (the product of the two softmaxes, averaged over
    queries and heads; sums to 1).

    Parameters (``h`` heads, ``n`` agents, ``feat_size = (H_f, W_f)``, DWC kernel ``k = 3``):
    ``4 C^2 + (k^2 + 2) C`` (``+ 3 C`` with ``qkv_bias``; ``+ 2 h n (49 + H_f + W_f)`` with
    ``agent_bias``).

    Args:
        channels: input channels ``C``.
        heads: attention heads; ``None`` gives heads of depth 32 (``max(1, C // 32)``, as
            Agent-Swin), lowered to the nearest count that divides ``C``.
        agent_num: agents ``n``, a square ``p^2`` (the official PVT stages use 9, 16, 49, 49).
        qkv_bias: bias on the ``Q``, ``K``, ``V`` projections (official PVT and Swin: True).
        agent_bias: the agent biases ``B_1``, ``B_2`` (paper: yes; without them the block is the
            paper's Eq. (4) alone).
        feat_size: map size the row and column biases are made for (int or ``(H, W)``).
        dwc_kernel: kernel of the depthwise conv on ``V`` (odd; official 3).
        attn_impl: ``fused`` (``F.scaled_dot_product_attention``) or ``math`` (weights written
            out); the same function (:func:`~visattn.blocks._attention.softmax_attention`).
    """

    def __init__(
        self,
        channels: int,
        heads: int | None = None,
        agent_num: int = 49,
        qkv_bias: bool = True,
        agent_bias: bool = True,
        feat_size: int | tuple[int, int] = 14,
        dwc_kernel: int = 3,
        attn_impl: str = "fused",
    ) -> None:
        super().__init__()
        heads = attention_heads(channels, heads)
        check_choice("attn_impl", attn_impl, ATTN_IMPLS)
        self.attn_impl = attn_impl
        check_positive_int("agent_num", agent_num)
        pool = round(agent_num**0.5)
        if pool * pool != agent_num:
            raise ValueError(
                f"option 'agent_num' must be a square (agents pooled to p x p), got {agent_num}"
            )
        fh, fw = _pair(feat_size, "feat_size")
        check_positive_int("dwc_kernel", dwc_kernel, odd=True)
        self.channels, self.heads, self.agent_num, self.pool_size = channels, heads, agent_num, pool
        self.dim_head = channels // heads
        self.scale = self.dim_head**-0.5
        self.feat_size = (fh, fw)
        self.q = nn.Conv2d(channels, channels, 1, bias=qkv_bias)
        self.kv = nn.Conv2d(channels, 2 * channels, 1, bias=qkv_bias)
        self.dwc = nn.Conv2d(
            channels, channels, dwc_kernel, padding=dwc_kernel // 2, groups=channels
        )
        self.proj = nn.Conv2d(channels, channels, 1)
        self.agent_bias, self.bias_grid = agent_bias, BIAS_GRID
        g = BIAS_GRID

        def bias(*shape: int) -> nn.Parameter | None:
            return nn.Parameter(torch.zeros(shape)) if agent_bias else None

        self.an_bias = bias(heads, agent_num, g, g)
        self.na_bias = bias(heads, agent_num, g, g)
        self.ah_bias = bias(heads, agent_num, fh)
        self.aw_bias = bias(heads, agent_num, fw)
        self.ha_bias = bias(heads, fh, agent_num)
        self.wa_bias = bias(heads, fw, agent_num)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """Projections normal with std ``C^-1/2`` (fan-in), biases of the projections zero, agent
        biases truncated normal with std 0.02 (official)."""
        for conv in (self.q, self.kv, self.proj):
            nn.init.normal_(conv.weight, std=self.channels**-0.5)
            if conv.bias is not None:
                nn.init.zeros_(conv.bias)
        for name in ("an", "na", "ah", "aw", "ha", "wa"):
            p = getattr(self, f"{name}_bias")
            if p is not None:
                nn.init.trunc_normal_(p, std=0.02)

    def init_identity(self) -> None:
        """native: the output projection starts at 0, so ``y = x + 0``."""
        nn.init.zeros_(self.proj.weight)
        nn.init.zeros_(self.proj.bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        n, c, h, w = x.shape[0], self.channels, x.shape[2], x.shape[3]
        heads, d, m, p = self.heads, self.dim_head, self.agent_num, self.pool_size
        q = self.q(x)
        k, v = self.kv(x).split([c, c], dim=1)
        ph = adaptive_pool_matrix(p, h, x.device, self.q.weight.dtype).to(q.dtype)
        pw = adaptive_pool_matrix(p, w, x.device, self.q.weight.dtype).to(q.dtype)
        agents = torch.einsum("ih,nchw,jw->ncij", ph, q, pw)  # (N, C, p, p)
        agents = agents.reshape(n, heads, d, m).transpose(2, 3)  # (N, heads, n, d)
        qh = q.reshape(n, heads, d, h * w).transpose(2, 3)  # (N, heads, HW, d)
        kh = k.reshape(n, heads, d, h * w).transpose(2, 3)
        vh = v.reshape(n, heads, d, h * w).transpose(2, 3)
        b1, b2 = self._biases(h, w, x.device)
        agent_v, agent_attn = self._attend(agents, kh, vh, b1)  # (N, heads, n, d)
        o, q_attn = self._attend(qh, agents, agent_v, b2)  # (N, heads, HW, d)
        if not torch.jit.is_scripting():  # noqa: SIM102 (scripting skips the inner test)
            if is_capturing(self):
                received = (q_attn.mean(2, keepdim=True) @ agent_attn).mean(1)  # (N, 1, HW)
                record_attention(self, received.reshape(n, 1, h, w))
        o = o.transpose(2, 3).reshape(n, c, h, w) + self.dwc(v)
        return same_memory_format(x + self.proj(o), x)

    def _biases(
        self, h: int, w: int, device: torch.device
    ) -> tuple[torch.Tensor | None, torch.Tensor | None]:
        """``B_1`` ``(1, heads, n, HW)`` and ``B_2`` ``(1, heads, HW, n)``, or ``None``s."""
        an, na, ah, aw = self.an_bias, self.na_bias, self.ah_bias, self.aw_bias
        ha, wa = self.ha_bias, self.wa_bias
        if an is None or na is None or ah is None or aw is None or ha is None or wa is None:
            return None, None
        heads, m, g = self.heads, self.agent_num, self.bias_grid
        dt = an.dtype
        rh, rw = bilinear_matrix(h, g, device, dt), bilinear_matrix(w, g, device, dt)
        fh = bilinear_matrix(h, self.feat_size[0], device, dt)
        fw = bilinear_matrix(w, self.feat_size[1], device, dt)
        b1 = torch.einsum("ha,xnab,wb->xnhw", rh, an, rw)
        b1 = b1 + torch.einsum("ha,xna->xnh", fh, ah)[..., :, None]
        b1 = b1 + torch.einsum("wb,xnb->xnw", fw, aw)[..., None, :]
        b2 = torch.einsum("ha,xnab,wb->xhwn", rh, na, rw)
        b2 = b2 + torch.einsum("ha,xan->xhn", fh, ha)[:, :, None, :]
        b2 = b2 + torch.einsum("wb,xbn->xwn", fw, wa)[:, None, :, :]
        return b1.reshape(1, heads, m, h * w), b2.reshape(1, heads, h * w, m)

    def extra_repr(self) -> str:
        return (
            f"{self.channels}, heads={self.heads}, agent_num={self.agent_num}, "
            f"agent_bias={self.agent_bias}, feat_size={self.feat_size}, "
            f"attn_impl={self.attn_impl!r}"
        )
