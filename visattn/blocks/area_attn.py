"""Area attention (Tian, Ye, Doermann; 2025, "YOLOv12: Attention-Centric Real-Time Object
Detectors", arXiv:2502.12524): multi-head self-attention restricted to horizontal or vertical
strips of the feature map."""

from __future__ import annotations

import torch
import torch.nn as nn

from ._attention import ATTN_IMPLS, AttendMixin
from ._utils import attention_heads, check_choice, check_positive_int, same_memory_format
from .capture import is_capturing, record_attention
from .registry import register_block

# a leaf of the traced graph: format bookkeeping (torch.fx cannot branch on a proxy)
torch.fx.wrap("same_memory_format")

__all__ = ["AreaAttention"]

DIRECTIONS = ("horizontal", "vertical")


def _conv_bn(cin: int, cout: int, k: int = 1, groups: int = 1) -> nn.Sequential:
    """Ultralytics' ``Conv(act=False)``: a bias-free conv followed by BatchNorm."""
    return nn.Sequential(
        nn.Conv2d(cin, cout, k, padding=k // 2, groups=groups, bias=False), nn.BatchNorm2d(cout)
    )


@register_block("area_attn", family="spatial", paper="Tian et al., arXiv 2025 (YOLOv12)")
class AreaAttention(AttendMixin, nn.Module):
    """YOLOv12's area attention (Sec. 3.2 of the paper, ``AAttn`` in the authors' code), with its
    residual connection as in the authors' ``ABlock`` (``x + AAttn(x)``).

    The map is cut into ``l`` areas (``area``), horizontal strips of ``H / l`` rows (the authors'
    code: row-major tokens reshaped into ``l`` equal runs) or, with ``direction="vertical"``,
    vertical strips of ``W / l`` columns (the paper's other split). Each area attends within
    itself::

        q, k = BN(W_qk x),  v = BN(W_v x)                  1x1 convs, no bias, split in heads
        o_i = sum_{j in area(i)} softmax_j(q_i . k_j / sqrt(d)) v_j
        y = x + BN(W_o (o + BN(DW_5x5(v))))                positional perception: a 5x5
                                                           depthwise conv on v

    A map whose rows (columns) are not a multiple of ``l`` is cut into areas of ``ceil(H / l)``
    rows, the last one shorter (its missing rows are padding that no query attends to), so it
    may have fewer than ``l`` areas; on a multiple of ``l`` this is exactly the authors' split.
    (Their code reshapes the flattened tokens, which needs ``H W`` divisible by ``l`` and lets an
    area straddle rows when ``H`` is not; visattn keeps areas whole rows.)

    The logits and softmax are computed in float32 under autocast.

    Shapes: ``(N, C, H, W) -> (N, C, H, W)``. Attention map ``(N, 1, H, W)``: the attention each
    position receives, averaged over all queries and heads (sums to 1; a position only receives
    from queries of its own area).

    Parameters (kernel ``k`` of the positional conv, 5 in the paper):
    ``4 C^2 + (10 + k^2) C`` (``W_qk``: ``2 C^2``, ``W_v``, ``W_o``: ``C^2`` each, the depthwise
    conv ``k^2 C``, four BatchNorms ``2 (2C + C + C + C)``).

    Args:
        channels: input channels ``C``.
        heads: attention heads; ``None`` is YOLOv12's rule ``max(1, C // 32)`` (head depth 32),
            lowered to the nearest count that divides ``C``.
        area: number of areas ``l`` (YOLOv12: 4 in the backbone's attention stages; 1 is global
            self-attention).
        direction: ``"horizontal"`` strips of rows (the authors' code) or ``"vertical"`` strips
            of columns.
        pe_kernel: kernel of the depthwise positional conv (odd; paper 5).
        attn_impl: ``fused`` (``F.scaled_dot_product_attention``) or ``math`` (weights written
            out); the same function (:func:`~visattn.blocks._attention.softmax_attention`).
    """

    def __init__(
        self,
        channels: int,
        heads: int | None = None,
        area: int = 4,
        direction: str = "horizontal",
        pe_kernel: int = 5,
        attn_impl: str = "fused",
    ) -> None:
        super().__init__()
        heads = attention_heads(channels, heads)
        check_choice("attn_impl", attn_impl, ATTN_IMPLS)
        self.attn_impl = attn_impl
        check_positive_int("area", area)
        check_choice("direction", direction, DIRECTIONS)
        check_positive_int("pe_kernel", pe_kernel, odd=True)
        self.channels, self.heads, self.area, self.direction = channels, heads, area, direction
        self.dim_head = channels // heads
        self.scale = self.dim_head**-0.5
        self.qk = _conv_bn(channels, 2 * channels)
        self.v = _conv_bn(channels, channels)
        self.pe = _conv_bn(channels, channels, pe_kernel, groups=channels)
        self.proj = _conv_bn(channels, channels)

    def init_identity(self) -> None:
        """native: the output BatchNorm's scale starts at 0, so ``y = x + 0``."""
        nn.init.zeros_(self.proj[1].weight)
        nn.init.zeros_(self.proj[1].bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        n, c = x.shape[0], self.channels
        heads, d = self.heads, self.dim_head
        q, k = self.qk(x).split([c, c], dim=1)
        v = self.v(x)
        pp = self.pe(v)
        vertical = self.direction == "vertical"
        if vertical:  # areas of columns: the same computation on the transposed map
            q, k, v = q.transpose(2, 3), k.transpose(2, 3), v.transpose(2, 3)
        h, w = q.shape[2], q.shape[3]
        rows = (h + self.area - 1) // self.area  # rows per area
        areas = (h + rows - 1) // rows  # every area holds at least one real row
        pad = areas * rows - h
        q = self._areas(q, rows, areas, pad)
        k = self._areas(k, rows, areas, pad)
        v = self._areas(v, rows, areas, pad)
        real = self._real_rows(h, w, rows, areas, x.device)  # (areas, rows * W), True: real
        bias = torch.zeros(real.shape, device=x.device).masked_fill(~real, float("-inf"))
        o, a = self._attend(q, k, v, bias[None, :, None, None, :])
        if not torch.jit.is_scripting():  # noqa: SIM102 (scripting skips the inner test)
            if is_capturing(self):
                received = torch.einsum("nahqk,aq->nak", a, real.to(a.dtype))
                received = received.reshape(n, 1, areas * rows, w)[:, :, :h] / (heads * h * w)
                record_attention(self, received.transpose(2, 3) if vertical else received)
        # (N, areas, heads, rows * W, d) -> (N, C, rows of all areas, W)
        o = o.reshape(n, areas, heads, rows, w, d).permute(0, 2, 5, 1, 3, 4)
        o = o.reshape(n, c, areas * rows, w)[:, :, :h]
        if vertical:
            o = o.transpose(2, 3)
        return same_memory_format(x + self.proj(o + pp), x)

    def _areas(self, t: torch.Tensor, rows: int, areas: int, pad: int) -> torch.Tensor:
        """``(N, C, H, W) -> (N, areas, heads, rows * W, d)``, rows padded with zeros."""
        n, w = t.shape[0], t.shape[3]
        t = nn.functional.pad(t, [0, 0, 0, pad])
        t = t.reshape(n, self.heads, self.dim_head, areas, rows * w)
        return t.permute(0, 3, 1, 4, 2)

    @staticmethod
    def _real_rows(h: int, w: int, rows: int, areas: int, device: torch.device) -> torch.Tensor:
        """``(areas, rows * W)`` booleans: the token lies on a row of the map (not padding)."""
        row = torch.arange(areas * rows, device=device).reshape(areas, rows, 1)
        return (row < h).expand(areas, rows, w).reshape(areas, rows * w)

    def extra_repr(self) -> str:
        return (
            f"{self.channels}, heads={self.heads}, area={self.area}, "
            f"direction={self.direction}, attn_impl={self.attn_impl!r}"
        )
