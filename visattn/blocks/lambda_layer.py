"""Lambda layer (Bello; ICLR 2021, "LambdaNetworks: Modeling Long-Range Interactions Without
Attention")."""

from __future__ import annotations

import torch
import torch.nn as nn
import torch.nn.functional as F
from timm.layers import register_notrace_function

from ._attention import float32_region, widen
from ._utils import check_positive_int, init_conv_io, same_memory_format
from .capture import record_attention
from .registry import register_block

# format bookkeeping outside the traced graph (torch.fx cannot branch on a proxy)
torch.fx.wrap("same_memory_format")

__all__ = ["LambdaLayer", "apply_lambdas"]


@register_notrace_function  # timm's FX feature path: one leaf call
def apply_lambdas(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    pos_weight: torch.Tensor,
    pos_bias: torch.Tensor | None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """``(y, K_bar)``: the lambda layer's output ``(N, |h|, |v|, HW)`` and normalised keys.

    ``q``: ``(N, |h|, |k|, HW)`` (normalised queries), ``k``: ``(N, |k|, HW)`` (raw keys), ``v``:
    ``(N, |v|, H, W)`` (normalised values), ``pos_weight`` ``(|k|, 1, r, r)``: the lambda
    convolution's filters (``pos_bias`` ``(|k|,)`` or ``None``).

    Float32 (float64 stays float64) with autocast off: the positional lambdas sum ``r^2`` values
    and the output ``|k| r^2`` products, which overflow float16 at moderate activations.
    """
    if torch.jit.is_scripting():
        return _apply_lambdas(q, k, v, pos_weight, pos_bias)
    with float32_region(q):
        bias = None if pos_bias is None else widen(pos_bias)
        return _apply_lambdas(widen(q), widen(k), widen(v), widen(pos_weight), bias)


torch.fx.wrap("apply_lambdas")


def _apply_lambdas(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    pos_weight: torch.Tensor,
    pos_bias: torch.Tensor | None,
) -> tuple[torch.Tensor, torch.Tensor]:
    n, dv, h, w = v.shape[0], v.shape[1], v.shape[2], v.shape[3]
    dk, m, r = k.shape[1], h * w, pos_weight.shape[-1]
    k = k.softmax(dim=-1)
    content = torch.einsum("nkm,nvm->nkv", k, v.reshape(n, dv, m))
    y = torch.einsum("nhkm,nkv->nhvm", q, content)
    position = F.conv3d(  # (N, |k|, H, W, |v|); faster than a 2-D conv over N |v| maps
        v.unsqueeze(1).permute(0, 1, 3, 4, 2),
        pos_weight.unsqueeze(-1),
        pos_bias,
        padding=(r // 2, r // 2, 0),
    )
    y = y + torch.einsum("nhkm,nkmv->nhvm", q, position.reshape(n, dk, m, dv))
    return y, k


@register_block(
    "lambda",
    family="spatial",
    paper="Bello, ICLR 2021",
    replaces_conv=True,
    composed_zero_init=True,
)
class LambdaLayer(nn.Module):
    """Lambda layer with multi-query heads and a local positional lambda (lambda convolution).

    Follows Sec. 3 and Eq. (2)-(3) of the paper (intra-depth ``|u| = 1``)::

        q = BN(W_Q x), k = W_K x, v = BN(W_V x)          (1x1 convs, no bias)
        K_bar = softmax over the context positions of k  (|k| x |m|)
        lambda_c = K_bar V^T                              content lambda, |k| x |v|
        lambda_p_n = E_n^T V                              positional lambda of position n
        y_n^h = (lambda_c + lambda_p_n)^T q_n^h           for each of the |h| query heads

    ``|v| = C' / |h|`` and the heads' outputs are concatenated, so ``C' = |h| |v|``. The
    positional lambdas use the paper's *lambda convolution*: ``E`` is a local ``r x r`` scope,
    i.e. a 2-D convolution of each value channel into ``|k|`` maps (the paper's 3-D conv with
    kernel ``(r, r, 1)`` over ``(H, W, |v|)``), zero padded, so any input size works.

    ``stride > 1`` applies an ``s x s`` average pool after the layer (the layer itself cannot
    stride; timm, like BoTNet, pools after it), ``ceil_mode`` so the output size matches a padded
    strided conv (``ceil(H / s)``).

    The softmax and the lambdas run in float32 under autocast (:func:`apply_lambdas`).

    Shapes: ``(N, C, H, W) -> (N, C', H / s, W / s)``. Attention map ``(N, 1, H, W)``: the
    normalised keys ``K_bar`` averaged over the ``|k|`` key channels, i.e. the share of each
    position in the content lambda (the layer builds no attention map).

    Parameters (``d = |k| (|h| + 1) + C'/|h|`` projected channels):
    ``C d + 2 |h| |k| + 2 C' / |h| + |k| r^2`` (``+ |k|`` with ``pos_bias``, ``+ d`` with
    ``qkv_bias``).

    Args:
        channels: input channels ``C``.
        out_channels: output channels ``C'`` (default ``C``; a multiple of ``heads``).
        stride: average-pool stride after the layer.
        heads: query heads ``|h|`` (paper 4).
        dim_k: query/key depth ``|k|`` (paper 16).
        r: scope of the lambda convolution (odd; the paper's LambdaResNets use 23, timm 9).
        qkv_bias: bias on the projections (paper: none).
        pos_bias: bias on the lambda convolution (timm's ``nn.Conv3d`` has one; the paper's
            positional embeddings do not).
    """

    def __init__(
        self,
        channels: int,
        out_channels: int | None = None,
        stride: int = 1,
        heads: int = 4,
        dim_k: int = 16,
        r: int = 23,
        qkv_bias: bool = False,
        pos_bias: bool = False,
    ) -> None:
        super().__init__()
        out = init_conv_io(self, channels, out_channels, stride, heads=heads)
        check_positive_int("dim_k", dim_k)
        check_positive_int("r", r, odd=True)
        self.heads, self.dim_k, self.dim_v, self.r = heads, dim_k, out // heads, r
        self.qkv = nn.Conv2d(channels, dim_k * heads + dim_k + self.dim_v, 1, bias=qkv_bias)
        self.norm_q = nn.BatchNorm2d(dim_k * heads)
        self.norm_v = nn.BatchNorm2d(self.dim_v)
        # E: |k| filters of r x r, applied to each value channel alike: a 3-D conv over
        # (H, W, |v|) with kernel (r, r, 1). The weight is kept 4-D, (|k|, 1, r, r), so that
        # the block converts to channels_last like any conv (5-D weights cannot).
        self.pos_conv = nn.Conv2d(1, dim_k, r, padding=r // 2, bias=pos_bias)
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """Normal initialisation scaled by fan-in (``C^-1/2`` for the projections, ``|k|^-1/2``
        for the positional embeddings)."""
        nn.init.normal_(self.qkv.weight, std=self.in_channels**-0.5)
        nn.init.normal_(self.pos_conv.weight, std=self.dim_k**-0.5)
        for conv in (self.qkv, self.pos_conv):
            if conv.bias is not None:
                nn.init.zeros_(conv.bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        n, _, h, w = x.shape
        m, heads, dk, dv = h * w, self.heads, self.dim_k, self.dim_v
        q, k, v = torch.split(self.qkv(x), [dk * heads, dk, dv], dim=1)
        q = self.norm_q(q).reshape(n, heads, dk, m)
        v = self.norm_v(v)  # (N, |v|, H, W)
        y, k = apply_lambdas(q, k.reshape(n, dk, m), v, self.pos_conv.weight, self.pos_conv.bias)
        y = y.to(x.dtype)  # the lambdas ran in float32: back to the input's (a bf16 model's)
        if not torch.jit.is_scripting():
            record_attention(self, k.mean(1).view(n, 1, h, w))
        y = y.reshape(n, self.out_channels, h, w)
        if self.stride > 1:
            y = F.avg_pool2d(y, self.stride, self.stride, ceil_mode=True)
        return same_memory_format(y, x)

    def extra_repr(self) -> str:
        return (
            f"{self.in_channels}, {self.out_channels}, stride={self.stride}, heads={self.heads}, "
            f"dim_k={self.dim_k}, r={self.r}"
        )
