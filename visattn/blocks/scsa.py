"""Spatial and Channel Synergistic Attention (Si, Xu, Zhu, Li, Hu, Yang, Zhang; arXiv 2024,
"SCSA: Exploring the Synergistic Effects Between Spatial and Channel Attention")."""

from __future__ import annotations

import torch
import torch.nn as nn
import torch.nn.functional as F

from ._attention import softmax_attention
from ._utils import check_positive_int
from .capture import is_capturing, record_attention
from .identity import ScaledSigmoid
from .registry import register_block

KERNELS = (3, 5, 7, 9)  # one per sub-feature group, as in the paper

torch.fx.wrap("softmax_attention")


@torch.fx.wrap
def window_pool(x: torch.Tensor, window: int) -> torch.Tensor:
    """Non-overlapping ``window x window`` average pooling (remainders dropped, as
    ``nn.AvgPool2d(window, window)``); a side shorter than ``window`` is pooled whole, and
    ``window = 0`` pools the whole map. A leaf for ``torch.fx``: it reads the input's size."""
    kh = x.shape[2] if window == 0 else min(window, x.shape[2])
    kw = x.shape[3] if window == 0 else min(window, x.shape[3])
    return F.avg_pool2d(x, (kh, kw), (kh, kw))


@register_block("scsa", family="hybrid", paper="Si et al., arXiv 2024 (SCSA)")
class SpatialChannelSynergisticAttention(nn.Module):
    """SCSA: shared multi-semantic spatial attention (SMSA), then progressive channel-wise
    self-attention (PCSA) on the spatially refined map.

    Follows the paper's SMSA and PCSA modules and the authors' code (``HZAI-ZJNU/SCSA``):

    * SMSA: ``X_H = mean_W X`` ``(N, C, H)`` and ``X_W = mean_H X`` ``(N, C, W)``, each split into
      4 groups of ``C/4`` channels; group ``i`` goes through a depthwise 1-D conv of size
      ``3, 5, 7, 9`` (with bias; the same four convs for both directions), the groups are
      concatenated, normalised by GroupNorm with 4 groups (one GN per direction) and gated by a
      sigmoid: ``Attn_H`` ``(N, C, H, 1)``, ``Attn_W`` ``(N, C, 1, W)``;
      ``X_s = X * Attn_H * Attn_W``;
    * PCSA: ``Y = GN_1(P_{7x7}(X_s))`` (average pooling with window and stride 7, GroupNorm with
      one group), ``Q, K, V`` = depthwise 1x1 convs of ``Y`` (no bias), split into ``heads``;
      over the channels of each head ``Attn = softmax(Q K^T / sqrt(C / heads)) V``
      (``(C/h) x (C/h)`` weights: the channels are the tokens and the pooled positions their
      features); ``a_c = sigmoid(mean_{positions} Attn)`` ``(N, C, 1, 1)``;
    * ``Y_out = X_s * a_c``.

    Defaults are the authors' ResNet-50 setting (``heads=1``, ``window=7``, average pooling).
    Difference from their code: a map side shorter than the window is pooled whole (their
    ``AvgPool2d(7, 7)`` leaves no position and fails below 7x7). ``window=0`` is their
    ``window_size=-1`` (global pooling).

    ``Attn`` is the blocks' softmax-attention primitive
    (:func:`visattn.blocks._attention.softmax_attention`: fused scaled-dot-product attention,
    logits and normaliser in float32 under autocast), with the channels as tokens. Its weights are
    never recorded, so the fused path always runs.

    Shapes: ``(N, C, H, W) -> (N, C, H, W)``, ``C`` divisible by 4 and by ``heads``. The recorded
    map is the applied weights ``Attn_H * Attn_W * a_c`` ``(N, C, H, W)`` (only computed while
    ``capture_attention`` is active).

    Parameters: ``16 C`` (the four 1-D convs ``(3 + 5 + 7 + 9) C/4 + C``, the two direction
    GroupNorms ``4 C``, the PCSA GroupNorm ``2 C``, ``Q``, ``K``, ``V`` ``3 C``).

    Args:
        channels: input channels ``C`` (a multiple of 4).
        heads: attention heads of PCSA, dividing ``C``.
        window: pooling window of PCSA (0: the whole map).
    """

    def __init__(self, channels: int, heads: int = 1, window: int = 7) -> None:
        super().__init__()
        if channels % 4:
            raise ValueError(f"channels={channels} must be divisible by 4 (four kernel groups)")
        check_positive_int("heads", heads)
        if channels % heads:
            raise ValueError(f"option 'heads'={heads} must divide channels={channels}")
        if isinstance(window, bool) or not isinstance(window, int) or window < 0:
            raise ValueError(f"option 'window' must be a non-negative int, got {window!r}")
        self.heads, self.window = heads, window
        g = channels // 4
        self.group_channels = g
        self.dwc = nn.ModuleList([nn.Conv1d(g, g, k, padding=k // 2, groups=g) for k in KERNELS])
        self.norm_h = nn.GroupNorm(4, channels)
        self.norm_w = nn.GroupNorm(4, channels)
        self.norm = nn.GroupNorm(1, channels)
        self.q = nn.Conv2d(channels, channels, 1, groups=channels, bias=False)
        self.k = nn.Conv2d(channels, channels, 1, groups=channels, bias=False)
        self.v = nn.Conv2d(channels, channels, 1, groups=channels, bias=False)
        self.sa_gate = nn.Sigmoid()
        self.ca_gate = nn.Sigmoid()

    def init_identity(self) -> None:
        """native: both direction GroupNorms' affine and V zero, gates 2*sigmoid: all maps 1."""
        for t in (self.norm_h.weight, self.norm_h.bias, self.norm_w.weight, self.norm_w.bias):
            nn.init.zeros_(t)
        nn.init.zeros_(self.v.weight)
        self.sa_gate = ScaledSigmoid(2.0)
        self.ca_gate = ScaledSigmoid(2.0)

    def _multi_scale(self, t: torch.Tensor) -> torch.Tensor:
        """The four group convs on ``(N, C, L)``."""
        parts = torch.split(t, self.group_channels, dim=1)
        out: list[torch.Tensor] = []  # a loop over a ModuleList: TorchScript compiles it
        for i, conv in enumerate(self.dwc):
            out.append(conv(parts[i]))
        return torch.cat(out, dim=1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        n, c, h, w = x.shape
        a_h = self.sa_gate(self.norm_h(self._multi_scale(x.mean(dim=3)))).view(n, c, h, 1)
        a_w = self.sa_gate(self.norm_w(self._multi_scale(x.mean(dim=2)))).view(n, c, 1, w)
        xs = x * a_h * a_w
        y = self.norm(window_pool(xs, self.window))
        d, tokens = c // self.heads, y.shape[2] * y.shape[3]
        q = self.q(y).reshape(n, self.heads, d, tokens)
        k = self.k(y).reshape(n, self.heads, d, tokens)
        v = self.v(y).reshape(n, self.heads, d, tokens)
        # softmax(q k^T / sqrt(d)) v with the d channels as tokens: (N, heads, d, tokens)
        attn, _ = softmax_attention(q, k, v, d**-0.5)
        a_c = self.ca_gate(attn.mean(-1).reshape(n, c, 1, 1))
        if not torch.jit.is_scripting():  # noqa: SIM102 (TorchScript needs it alone)
            if is_capturing(self):
                record_attention(self, a_h * a_w * a_c)
        return xs * a_c

    def extra_repr(self) -> str:
        return f"heads={self.heads}, window={self.window}"
