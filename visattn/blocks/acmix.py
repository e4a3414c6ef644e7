"""ACmix (Pan, Ge, Lu, Song, Chen, Huang, Huang; CVPR 2022, "On the Integration of
Self-Attention and Convolution"): one set of 1x1 projections shared by a local self-attention
path and a shift-based convolution path, mixed by two learned scalars."""

from __future__ import annotations

import torch
import torch.nn as nn

from ._utils import (
    check_positive_int,
    exporting,
    init_conv_io,
    same_memory_format,
    window_gather,
    window_slices,
)
from .capture import is_capturing, record_attention
from .registry import register_block

# format bookkeeping outside the traced graph (torch.fx cannot branch on a proxy)
torch.fx.wrap("same_memory_format")

__all__ = ["ACmix", "reflect_index"]


def reflect_index(size: int, pad: int, device: torch.device | None = None) -> torch.Tensor:
    """Indices of a map of ``size`` padded by ``pad`` on both sides by reflection (``reflect``
    mode, the edge not repeated): equal to ``F.pad(mode="reflect")`` while ``pad < size``, and
    reflecting again at the far edge when the map is smaller (a 1-pixel map repeats its pixel),
    where ``F.pad`` refuses. Built from tensor operations, so an exported graph keeps it for
    every size."""
    i = torch.arange(-pad, size + pad, device=device)
    period = (torch.ones_like(i[:1]) * (2 * size - 2)).clamp(min=1)
    m = i.remainder(period)
    return torch.where(m < size, m, period - m)


def position_grid(h: int, w: int, device: torch.device, dtype: torch.dtype) -> torch.Tensor:
    """``(1, 2, H, W)``: the x and y coordinates of each position, ``linspace(-1, 1)`` across the
    map (ACmix's positional input; a side of 1 is at -1, as ``torch.linspace``). Written with
    ``arange``, which keeps the map size symbolic in an exported graph."""
    return torch.stack(
        [
            _linspace(w, device, dtype)[None, :].expand(h, w),
            _linspace(h, device, dtype)[:, None].expand(h, w),
        ]
    )[None]


def _linspace(n: int, device: torch.device, dtype: torch.dtype) -> torch.Tensor:
    i = torch.arange(n, device=device, dtype=dtype)
    return i * 2 / (torch.ones_like(i[:1]) * (n - 1)).clamp(min=1) - 1


@register_block("acmix", family="hybrid", paper="Pan et al., CVPR 2022 (ACmix)", replaces_conv=True)
class ACmix(nn.Module):
    """ACmix: self-attention and convolution sharing their 1x1 projections.

    Follows Sec. 4 / Fig. 2 of the paper and the authors' ResNet module (``ACmix`` in
    ``ResNet/test_bottleneck.py``). Stage I: three 1x1 convs (with bias) give ``q, k, v``
    (``C'`` channels, ``h`` heads of ``d = C'/h``). Stage II, two paths:

    * attention: local self-attention in a ``k_a x k_a`` window (``kernel_att``, 7) around each
      query, the windows padded by reflection (the map's edge not repeated) as in the authors'
      code, with relative positions from a 1x1 conv ``W_p`` of the coordinate grid ``p``
      (``linspace(-1, 1)``)::

          a_ij = softmax_j(q_i . (k_j + W_p p_i - W_p p_j) / sqrt(d)),  o_i = sum_j a_ij v_j

    * convolution: a 1x1 conv (``fc``, no bias) maps the ``3h`` head features of ``q, k, v``
      to ``k_c^2`` features per channel of a head, which a grouped ``k_c x k_c`` conv (groups
      ``d``, no bias: the authors' code declares one and its ``reset_parameters`` sets it to
      ``None``) shifts and sums; it starts as the shift kernels of the paper (each of the
      ``k_c^2`` inputs one-hot at its offset).

    Output ``y = alpha * o_att + beta * o_conv``, ``alpha = beta = 0.5`` at init (learned). The
    logits and the softmax are computed in float32 under autocast.

    Striding (``stride=s``): the queries are every ``s``-th position and the shift conv strides,
    giving ``ceil(H / s)`` like a padded strided conv. (The authors' attention path views its
    output as ``H // s``, which fails on odd maps.) Maps smaller than the window reflect again
    at the far edge, where ``F.pad``'s reflection (and the authors' ``ReflectionPad2d``) refuses.

    Shapes: ``(N, C, H, W) -> (N, C', H / s, W / s)``. Attention map ``(N, 1, H, W)``: the
    attention each input position receives (a reflected key's weight goes to the position it
    copies), averaged over queries and heads (sums to 1).

    Parameters (``h`` heads, ``d = C'/h``, conv kernel ``k_c``):
    ``3 C C' + 3 C' + 3 d + 3 h k_c^2 + C' k_c^4 + 2`` (q, k, v convs; ``W_p``; ``fc``; the
    shift conv; ``alpha``, ``beta``).

    Args:
        channels: input channels ``C``.
        out_channels: output channels ``C'`` (default ``C``; a multiple of ``heads``).
        stride: output stride.
        heads: attention heads (official 4).
        kernel_att: attention window (odd; official 7).
        kernel_conv: kernel of the convolution path (odd; official 3).
    """

    def __init__(
        self,
        channels: int,
        out_channels: int | None = None,
        stride: int = 1,
        heads: int = 4,
        kernel_att: int = 7,
        kernel_conv: int = 3,
    ) -> None:
        super().__init__()
        out = init_conv_io(self, channels, out_channels, stride, heads=heads)
        check_positive_int("kernel_att", kernel_att, odd=True)
        check_positive_int("kernel_conv", kernel_conv, odd=True)
        self.heads, self.dim_head = heads, out // heads
        self.kernel_att, self.kernel_conv = kernel_att, kernel_conv
        self.scale = self.dim_head**-0.5
        self.conv1 = nn.Conv2d(channels, out, 1)
        self.conv2 = nn.Conv2d(channels, out, 1)
        self.conv3 = nn.Conv2d(channels, out, 1)
        self.conv_p = nn.Conv2d(2, self.dim_head, 1)
        kc2 = kernel_conv * kernel_conv
        self.fc = nn.Conv2d(3 * heads, kc2, 1, bias=False)
        self.dep_conv = nn.Conv2d(
            kc2 * self.dim_head,
            out,
            kernel_conv,
            stride=stride,
            padding=kernel_conv // 2,
            groups=self.dim_head,
            bias=False,  # the authors' reset_parameters replaces their bias with None
        )
        self.rate1 = nn.Parameter(torch.empty(1))
        self.rate2 = nn.Parameter(torch.empty(1))
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """Mixing rates 0.5 each; the shift conv as the ``k_c^2`` one-hot shift kernels
        (official)."""
        nn.init.constant_(self.rate1, 0.5)
        nn.init.constant_(self.rate2, 0.5)
        kc = self.kernel_conv
        shifts = torch.eye(kc * kc).reshape(kc * kc, kc, kc)
        with torch.no_grad():
            self.dep_conv.weight.copy_(shifts.expand(self.out_channels, -1, -1, -1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        q, k, v = self.conv1(x), self.conv2(x), self.conv3(x)
        n, h, w = x.shape[0], x.shape[2], x.shape[3]
        o_att = self._attention_path(q, k, v, n, h, w)
        heads, d = self.heads, self.dim_head
        qkv = torch.cat(
            [
                q.reshape(n, heads, d, h * w),
                k.reshape(n, heads, d, h * w),
                v.reshape(n, heads, d, h * w),
            ],
            dim=1,
        )
        f = self.fc(qkv).permute(0, 2, 1, 3).reshape(n, self.dep_conv.in_channels, h, w)
        o_conv = self.dep_conv(f)
        return same_memory_format(self.rate1 * o_att + self.rate2 * o_conv, x)

    def _attention_path(
        self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, n: int, h: int, w: int
    ) -> torch.Tensor:
        heads, d, ka, s = self.heads, self.dim_head, self.kernel_att, self.stride
        pad = ka // 2
        ho, wo = (h + s - 1) // s, (w + s - 1) // s
        pe = self.conv_p(position_grid(h, w, q.device, self.conv_p.weight.dtype))
        idx_h, idx_w = reflect_index(h, pad, q.device), reflect_index(w, pad, q.device)
        qh = q.reshape(n * heads, d, h, w)[:, :, ::s, ::s]
        kh = k.reshape(n * heads, d, h, w).index_select(2, idx_h).index_select(3, idx_w)
        vh = v.reshape(n * heads, d, h, w).index_select(2, idx_h).index_select(3, idx_w)
        pe_pad = pe.index_select(2, idx_h).index_select(3, idx_w)
        if not torch.jit.is_scripting():  # noqa: SIM102 (scripting skips the inner test)
            if exporting():
                return self._attention_gathered(qh, pe[:, :, ::s, ::s], kh, pe_pad, vh, n)
        keys = window_slices(kh, ka, ho, wo, s)
        rel = window_slices(pe_pad, ka, ho, wo, s)
        values = window_slices(vh, ka, ho, wo, s)
        a = self._attend(qh, pe[:, :, ::s, ::s], keys, rel)  # (N heads, k_a^2, Ho, Wo)
        if not torch.jit.is_scripting():  # noqa: SIM102 (scripting skips the inner test)
            if is_capturing(self):
                record_attention(self, self._received(a, idx_h, idx_w, n, h, w))
        o = torch.zeros_like(qh)
        for p, view in enumerate(values):
            o = o + a[:, p : p + 1].to(view.dtype) * view
        return o.reshape(n, self.out_channels, ho, wo)

    def _attention_gathered(
        self,
        q: torch.Tensor,
        q_pe: torch.Tensor,
        keys: torch.Tensor,
        rel: torch.Tensor,
        values: torch.Tensor,
        n: int,
    ) -> torch.Tensor:
        """The attention path on stacked windows (:func:`window_gather`): the same sums as the
        sliced path in a few graph nodes per block, for the exporters; it holds ``k_a^2``
        copies of the keys and values, which training does not need."""
        ka, s = self.kernel_att, self.stride
        ho, wo = q.shape[2], q.shape[3]
        dt = torch.promote_types(q.dtype, torch.float32)
        k_win = window_gather(keys, ka, ho, wo, s).to(dt)  # (N heads, d, k_a^2, Ho, Wo)
        pe_win = window_gather(rel, ka, ho, wo, s).to(dt)
        qs = (q.to(dt) * self.scale)[:, :, None]
        logits = (qs * (k_win + q_pe.to(dt)[:, :, None] - pe_win)).sum(1)
        a = torch.softmax(logits, dim=1)  # (N heads, k_a^2, Ho, Wo)
        v_win = window_gather(values, ka, ho, wo, s)
        o = (a[:, None].to(values.dtype) * v_win).sum(2)
        return o.reshape(n, self.out_channels, ho, wo)

    def _attend(
        self, q: torch.Tensor, q_pe: torch.Tensor, keys: list[torch.Tensor], rel: list[torch.Tensor]
    ) -> torch.Tensor:
        """Softmax over the window of ``q . (k_j + pe_i - pe_j) / sqrt(d)``, in float32."""
        dt = torch.promote_types(q.dtype, torch.float32)
        qs = q.to(dt) * self.scale
        logits: list[torch.Tensor] = []
        for kj, pj in zip(keys, rel):
            logits.append((qs * (kj.to(dt) + q_pe.to(dt) - pj.to(dt))).sum(1))
        return torch.softmax(torch.stack(logits, 1), dim=1)

    def _received(
        self,
        a: torch.Tensor,
        idx_h: torch.Tensor,
        idx_w: torch.Tensor,
        n: int,
        h: int,
        w: int,
    ) -> torch.Tensor:
        """``(N, 1, H, W)``: each window weight added at its key's place on the padded canvas,
        the canvas folded back onto the map through the reflection indices, divided by
        (queries x heads)."""
        ka, s = self.kernel_att, self.stride
        ho, wo = a.shape[2], a.shape[3]
        pad = ka // 2
        canvas = a.new_zeros(a.shape[0], 1, h + 2 * pad, w + 2 * pad)
        for p in range(ka * ka):
            dy, dx = p // ka, p % ka
            canvas[:, :, dy : dy + s * (ho - 1) + 1 : s, dx : dx + s * (wo - 1) + 1 : s] += a[
                :, p : p + 1
            ]
        canvas = a.new_zeros(a.shape[0], 1, h, w + 2 * pad).index_add(2, idx_h, canvas)
        canvas = a.new_zeros(a.shape[0], 1, h, w).index_add(3, idx_w, canvas)
        return canvas.reshape(n, self.heads, h, w).sum(1, keepdim=True) / (self.heads * ho * wo)

    def extra_repr(self) -> str:
        return (
            f"{self.in_channels}, {self.out_channels}, stride={self.stride}, heads={self.heads}, "
            f"kernel_att={self.kernel_att}, kernel_conv={self.kernel_conv}"
        )
