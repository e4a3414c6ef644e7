"""Polarized self-attention (Liu, Liu, Fan, Huang; arXiv 2107.00782, 2021, "Polarized
Self-Attention: Towards High-quality Pixel-wise Regression")."""

from __future__ import annotations

import torch
import torch.nn as nn

from ._utils import check_choice
from .capture import is_capturing, record_attention
from .registry import register_block

__all__ = ["PolarizedSelfAttention"]

LAYOUTS = ("parallel", "sequential")
FORMS = ("paper", "official")


@register_block("psa", family="hybrid", paper="Liu et al., arXiv 2021")
class PolarizedSelfAttention(nn.Module):
    """Polarized self-attention: a channel-only and a spatial-only branch, in parallel or in
    sequence.

    With ``c = C // 2`` and 1x1 convs without bias (the paper's ``W`` matrices), Sec. 3 of the
    paper:

    * channel-only: ``A_ch(X) = sigmoid(LN(W_z (W_v X) softmax_HW(W_q X)))`` with ``W_q: C -> 1``,
      ``W_v: C -> c``, ``W_z: c -> C`` and LayerNorm over the ``C`` channels; ``(N, C, 1, 1)``;
    * spatial-only: ``A_sp(X) = sigmoid(softmax_c(GP(W_q' X)) (W_v' X))`` with ``W_q', W_v': C ->
      c`` and ``GP`` global average pooling; the softmax runs over the ``c`` pooled channels;
      ``(N, 1, H, W)``;
    * ``layout="parallel"``: ``Y = A_ch(X) * X + A_sp(X) * X``;
      ``layout="sequential"``: ``Z = A_ch(X) * X``, ``Y = A_sp(Z) * Z``.

    ``form="official"`` follows the official code (``DeLightCMU/PSA``) where it differs:

    * parallel: no LayerNorm in the channel branch; the spatial branch takes no softmax over the
      pooled channels but a softmax over the ``HW`` positions of ``GP(W_q' X) W_v' X`` before the
      sigmoid;
    * sequential: the channel branch's ``W_z`` is a bottleneck ``c -> c/4`` (bias), LayerNorm,
      ReLU, ``c/4 -> C`` (bias); the spatial branch takes no softmax over the pooled channels but
      a softmax over the positions of each channel of ``W_v' X``.

    Recorded attention: the effective multiplier ``(N, C, H, W)``, ``A_ch + A_sp`` (parallel) or
    ``A_ch(X) A_sp(Z)`` (sequential), so ``Y = X * map``.

    Shapes: ``(N, C, H, W) -> (N, C, H, W)``.

    Parameters (default options, ``c = C // 2``): ``4 C c + 3 C``
    (``W_q``: ``C``; ``W_v``, ``W_z``, ``W_q'``, ``W_v'``: ``C c`` each; LN: ``2 C``). Official
    parallel: ``4 C c + C``; official sequential, ``b = c // 4``: ``3 C c + C + c b + 3 b + b C +
    C``.

    Args:
        channels: input channels ``C`` (at least 2; at least 8 for the official sequential form).
        layout: ``parallel`` | ``sequential``.
        form: ``paper`` | ``official``.
    """

    def __init__(self, channels: int, layout: str = "parallel", form: str = "paper") -> None:
        super().__init__()
        check_choice("layout", layout, LAYOUTS)
        check_choice("form", form, FORMS)
        c = channels // 2
        if c < 1:
            raise ValueError(f"channels={channels} leaves {c} channels for the branches (C // 2)")
        self.layout, self.form, self.inner_channels = layout, form, c
        self.ch_q = nn.Conv2d(channels, 1, 1, bias=False)
        self.ch_v = nn.Conv2d(channels, c, 1, bias=False)
        if form == "paper":
            self.ch_z = nn.Sequential(
                nn.Conv2d(c, channels, 1, bias=False), nn.LayerNorm([channels, 1, 1])
            )
        elif layout == "parallel":
            self.ch_z = nn.Sequential(nn.Conv2d(c, channels, 1, bias=False))
        else:
            b = c // 4
            if b < 1:
                raise ValueError(
                    f"option 'form'='official' with layout='sequential' needs channels >= 8 "
                    f"(its bottleneck has C // 8 channels), got channels={channels}"
                )
            self.ch_z = nn.Sequential(
                nn.Conv2d(c, b, 1),
                nn.LayerNorm([b, 1, 1]),
                nn.ReLU(),
                nn.Conv2d(b, channels, 1),
            )
        self.sp_q = nn.Conv2d(channels, c, 1, bias=False)
        self.sp_v = nn.Conv2d(channels, c, 1, bias=False)

    def _channel_gate(self, x: torch.Tensor) -> torch.Tensor:
        n = x.shape[0]
        q = torch.softmax(self.ch_q(x).flatten(2), dim=-1)  # (N, 1, HW)
        v = self.ch_v(x).flatten(2)  # (N, c, HW)
        z = (v @ q.transpose(1, 2).to(v.dtype)).reshape(n, self.inner_channels, 1, 1)
        return torch.sigmoid(self.ch_z(z))  # (N, C, 1, 1)

    def _spatial_gate(self, x: torch.Tensor) -> torch.Tensor:
        n, _, h, w = x.shape
        q = self.sp_q(x).mean(dim=(2, 3)).unsqueeze(1)  # (N, 1, c)
        v = self.sp_v(x).flatten(2)  # (N, c, HW)
        if self.form == "paper":
            s = torch.softmax(q, dim=-1).to(v.dtype) @ v
        elif self.layout == "parallel":
            s = torch.softmax(q @ v, dim=-1)
        else:
            s = q @ torch.softmax(v, dim=-1).to(q.dtype)
        return torch.sigmoid(s).reshape(n, 1, h, w)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        a_ch = self._channel_gate(x)
        if self.layout == "parallel":
            a_sp = self._spatial_gate(x)
            if not torch.jit.is_scripting():  # noqa: SIM102 (TorchScript needs it alone)
                if is_capturing(self):
                    record_attention(self, a_ch + a_sp)
            return x * a_ch + x * a_sp
        z = x * a_ch
        a_sp = self._spatial_gate(z)
        if not torch.jit.is_scripting():  # noqa: SIM102 (TorchScript needs it alone)
            if is_capturing(self):
                record_attention(self, a_ch * a_sp)
        return z * a_sp

    def extra_repr(self) -> str:
        return f"layout={self.layout!r}, form={self.form!r}, inner_channels={self.inner_channels}"
