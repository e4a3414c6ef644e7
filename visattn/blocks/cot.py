"""Contextual Transformer block (Li, Yao, Pan, Mei; TPAMI 2022, "Contextual Transformer Networks
for Visual Recognition"): a 3x3 conv replaced by local attention whose weights come from the
query and a static context of its neighbourhood."""

from __future__ import annotations

import torch
import torch.nn as nn
import torch.nn.functional as F

from ._utils import (
    check_positive_int,
    init_conv_io,
    same_memory_format,
    spatial_mean,
    window_slices,
)
from .capture import record_attention
from .registry import register_block

# format bookkeeping outside the traced graph (torch.fx cannot branch on a proxy)
torch.fx.wrap("same_memory_format")

__all__ = ["ContextualTransformer"]

KEY_GROUPS = 4  # groups of the k x k key conv (official CotLayer)
SHARE_PLANES = 8  # channels that share one local attention map (official CotLayer)


def local_aggregation(v: torch.Tensor, w: torch.Tensor, kernel: int) -> torch.Tensor:
    """``out[n, c, y, x] = sum_p w[n, c mod G, p, y, x] v[n, c, (y, x) + offset_p]``.

    ``v``: ``(N, C, H, W)``; ``w``: ``(N, G, k^2, H, W)`` with ``G`` dividing ``C`` (channel ``c``
    uses weight group ``c mod G``, as the authors' ``aggregation_zeropad`` kernel); offsets run
    row-major over the ``k x k`` window, zeros outside the map. Written as ``k^2`` shifted slices
    of the zero-padded ``v``, so no ``(N, C, k^2, H, W)`` tensor is built and every exporter sees
    plain slicing."""
    pad = kernel // 2
    views = window_slices(F.pad(v, [pad, pad, pad, pad]), kernel, v.shape[2], v.shape[3])
    reps = v.shape[1] // w.shape[1]
    out = torch.zeros_like(v)
    for p, view in enumerate(views):
        out = out + view * w[:, :, p].repeat(1, reps, 1, 1)
    return out


@register_block(
    "cot",
    family="spatial",
    paper="Li et al., TPAMI 2022 (CoTNet)",
    replaces_conv=True,
    fp16_limit=(
        "its dynamic context A (*) V, a k x k aggregation with predicted weights (a convolution "
        "of its own), passes 65,504 when V is of order 1e4, as in eval mode, where BN does not "
        "rescale V"
    ),
)
class ContextualTransformer(nn.Module):
    """CoT block: a conv-replacing local self-attention with a static and a dynamic context.

    Follows Sec. 3.2 / Fig. 2 of the paper and the authors' ``CotLayer``::

        K_1 = ReLU(BN(conv_kxk(X)))                static context (grouped conv, 4 groups)
        V   = BN(W_v X)                             1x1 conv, no bias
        A   = GN(W_theta ReLU(BN(W_delta [X; K_1])))   local attention: two 1x1 convs on the
                                                    concatenated query and keys, k^2 weights per
                                                    position for every 8 channels, GroupNorm
        K_2 = Swish(BN(A (*) V))                   dynamic context: each position aggregates
                                                    its k x k neighbourhood of V with A
        Y   = a_2 * K_2 + a_1 * K_1                 fusion: a channel softmax over the two
                                                    contexts from GAP(K_1 + K_2) (SK-style MLP)

    ``A`` has ``k^2 C'/8`` channels: channel ``c`` of ``V`` uses weight group ``c mod C'/8``, as the
    official CUDA aggregation. There is no softmax over the window (the paper normalises ``A``
    with GroupNorm). The fusion MLP has ``max(C'/2, 32)`` hidden channels, BN and ReLU, and biases.

    Striding: CoTNet's bottlenecks average-pool the input (3x3, stride ``s``, padding 1) before
    the CoT layer; ``stride=s`` does the same, so sizes are ``ceil(H / s)`` like a padded strided
    conv. ``out_channels`` other than ``C`` map ``K_1`` and ``V`` to ``C'`` (the official layer
    keeps ``C``). The output is normalised and activated already (``includes_norm_act``:
    CoTNet's bottlenecks drop the BN and ReLU after the replaced conv).

    Shapes: ``(N, C, H, W) -> (N, C', H / s, W / s)``. Attention map ``(N, C', 1, 1)``: the
    fusion weight ``a_2`` of the dynamic context (``a_1 = 1 - a_2``).

    float16: the aggregation ``A (*) V`` is the block's own feature map, like a convolution's
    output: with values of order 1e4 (eval mode at activation scale 1e4, BN not rescaling) it
    passes float16's 65,504, and no float32 region can keep the block's output in range. Under
    float16 (autocast or a half model) a non-finite output from a finite input raises
    ``FloatingPointError`` naming the block (``block_info("cot").fp16_limit``); bfloat16
    autocast and float32 are finite. At activation scales 1 and 100 float16 is finite.

    Parameters (kernel ``k``, fusion width ``r = max(C'/2, 32)``, ``g = k^2 C'/8``):
    ``k^2 C C'/4 + 2 C' + (C + C') C'/2 + C' + (C'/2) g + 3 g + C C' + 2 C' + 2 C'
    + C' r + 3 r + 2 r C' + 2 C'`` (key conv and BN; ``W_delta`` and BN; ``W_theta`` with bias and
    GroupNorm; ``W_v`` and BN; the BN after aggregation; the fusion MLP).

    Args:
        channels: input channels ``C`` (a multiple of 4).
        out_channels: output channels ``C'`` (default ``C``; a multiple of 8 and of 4).
        stride: stride of the 3x3 average pool before the layer.
        kernel_size: ``k`` of the key conv and the local window (odd; paper 3).
    """

    includes_norm_act = True

    def __init__(
        self,
        channels: int,
        out_channels: int | None = None,
        stride: int = 1,
        kernel_size: int = 3,
    ) -> None:
        super().__init__()
        out = init_conv_io(self, channels, out_channels, stride)
        check_positive_int("kernel_size", kernel_size, odd=True)
        if channels % KEY_GROUPS or out % KEY_GROUPS:
            raise ValueError(
                f"channels={channels} and out_channels={out} must be multiples of "
                f"{KEY_GROUPS} (the key conv's groups)"
            )
        if out % SHARE_PLANES:
            raise ValueError(
                f"option 'out_channels'={out} must be a multiple of {SHARE_PLANES} "
                "(channels that share one local attention map)"
            )
        k, groups = kernel_size, out // SHARE_PLANES
        self.kernel_size, self.weight_groups = k, groups
        self.key_embed = nn.Sequential(
            nn.Conv2d(channels, out, k, padding=k // 2, groups=KEY_GROUPS, bias=False),
            nn.BatchNorm2d(out),
            nn.ReLU(inplace=True),
        )
        self.embed = nn.Sequential(
            nn.Conv2d(channels + out, out // 2, 1, bias=False),
            nn.BatchNorm2d(out // 2),
            nn.ReLU(inplace=True),
            nn.Conv2d(out // 2, k * k * groups, 1),
            nn.GroupNorm(groups, k * k * groups),
        )
        self.value = nn.Sequential(nn.Conv2d(channels, out, 1, bias=False), nn.BatchNorm2d(out))
        self.bn = nn.BatchNorm2d(out)
        self.act = nn.SiLU(inplace=True)
        attn = max(out // 2, 32)
        self.se = nn.Sequential(
            nn.Conv2d(out, attn, 1),
            nn.BatchNorm2d(attn),
            nn.ReLU(inplace=True),
            nn.Conv2d(attn, 2 * out, 1),
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.stride > 1:
            x = F.avg_pool2d(x, 3, self.stride, padding=1)
        n, h, w = x.shape[0], x.shape[2], x.shape[3]
        k1 = self.key_embed(x)
        a = self.embed(torch.cat([x, k1], dim=1))
        a = a.reshape(n, self.weight_groups, self.kernel_size * self.kernel_size, h, w)
        k2 = self.act(self.bn(local_aggregation(self.value(x), a, self.kernel_size)))
        fuse = self.se(spatial_mean(k1 + k2)).reshape(n, self.out_channels, 2).softmax(-1)
        dynamic, static = fuse[..., 0, None, None], fuse[..., 1, None, None]
        if not torch.jit.is_scripting():
            record_attention(self, dynamic)
        return same_memory_format(k2 * dynamic + k1 * static, x)

    def extra_repr(self) -> str:
        return (
            f"{self.in_channels}, {self.out_channels}, stride={self.stride}, "
            f"kernel_size={self.kernel_size}"
        )
