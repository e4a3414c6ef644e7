"""The one softmax-attention primitive of the blocks: ``softmax(q k^T s + bias) v``.

Every block whose maths is a row softmax of dot-product logits (mhsa, halo, danet, nonlocal, bra,
agent_attn, area_attn, and scsa over its channels) calls :func:`softmax_attention`. It has two
paths with the same value:

* **fused** (the default): ``F.scaled_dot_product_attention`` (Vaswani et al., NeurIPS 2017,
  Eq. 1). PyTorch's flash and memory-efficient kernels never build the ``(Lq, Lk)`` logits, so
  memory grows linearly in the tokens, and they keep the logits and the softmax's normaliser in
  float32 under fp16/bf16.
* **math**: the logits, the softmax and the product written out, in float32 (float64 stays
  float64) with autocast switched off. It is taken when the caller asks for the weights (an
  active :func:`visattn.capture_attention`) or for this path (``fused=False``).

Relative-position logits (BoTNet, HaloNet) are a bias that depends on the query and is learned.
The fused kernels take a dense bias only as a constant on CPU (a bias that needs a gradient sends
PyTorch back to its math path, which builds the full matrix). Such a bias is a product of two
thin factors, ``bias = q_bias k_bias^T``, with ``q_bias`` ``(Lq, R)`` and ``k_bias`` ``(Lk, R)``:
the fused path appends them to the queries and keys as ``R`` extra channels, so the kernel sees a
plain dot product of ``E + R`` channels. The CPU flash kernel also needs queries, keys and values
of one width: the narrower ones are padded with zero channels (to a multiple of 8), which leave
every dot product unchanged.

The 2-D relative logits of BoTNet and HaloNet are such a bias over a grid of keys: key ``(y, x)``
gets ``rows[y] + cols[x]`` (``grid_bias``). Their factors are ``[rows, cols]`` and each key's
one-hot row and column, ``R = Hk + Wk`` channels: at 14x14 keys that widens a 64-channel dot
product by 28 (padded to 96), more than the fused kernel saves on a small logits matrix. So a grid
bias over at most :data:`DENSE_GRID_KEYS` keys takes the math path, which adds ``rows`` and
``cols`` to the ``(Lq, Lk)`` logits by broadcasting (two passes over a small matrix) and keeps the
products at ``E`` channels; larger grids take the fused path through the factors.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import torch
import torch.nn.functional as F
from timm.layers import register_notrace_function

from .capture import is_capturing

__all__ = [
    "ATTN_IMPLS",
    "DENSE_GRID_KEYS",
    "AttendMixin",
    "counted_as_equation",
    "float32_region",
    "softmax_attention",
    "widen",
]

#: set while :func:`counted_as_equation` runs (one flag for the process: counting is not
#: done from several threads)
_AS_EQUATION = [False]


@contextlib.contextmanager
def counted_as_equation() -> Iterator[None]:
    """Inside, :func:`softmax_attention` runs its math path: ``q k^T`` and ``weights v`` as
    plain matmuls of the equation's own widths, which a flop counter counts the same on every
    device. (The fused path's kernel is counted as 0 on CPU by ``torch.utils.flop_counter``,
    and its queries may be padded to a common width.) Used by :func:`visattn.profile.count_macs`;
    the outputs are the same function either way."""
    before = _AS_EQUATION[0]
    _AS_EQUATION[0] = True
    try:
        yield
    finally:
        _AS_EQUATION[0] = before


#: the blocks' ``attn_impl`` option: the primitive's ``fused`` path, or its ``math`` path (the
#: full logits written out, as the blocks computed them before the primitive)
ATTN_IMPLS = ("fused", "math")


def widen(t: torch.Tensor) -> torch.Tensor:
    """``t`` in float32, or as it is if wider (float64)."""
    return t.to(torch.promote_types(t.dtype, torch.float32))


def float32_region(like: torch.Tensor) -> torch.autocast:
    """A context with autocast off on ``like``'s device: the normalisations of the attention
    blocks (softmaxes, their sums and the products that feed them) run there on
    :func:`widen`-ed tensors. Not for TorchScript (its autocast needs a constant device type):
    callers take their plain path under ``torch.jit.is_scripting()``."""
    return torch.autocast(device_type=like.device.type, enabled=False)


#: the most keys for which a grid bias (``softmax_attention(grid_bias=...)``) takes the math path
#: with the bias added to the logits rather than the fused kernel with the bias as factors. Where
#: the two cross, measured with ``benchmarks/bench_blocks.py``'s mhsa (d = 64, batch 8, one
#: thread, fp32 forward and backward; Intel Xeon with AVX-512/AMX): 14x14 = 196 keys, math 0.82x
#: the fused time; 16x16, 0.88x; 20x20, 1.09x; 24x24, 1.37x.
DENSE_GRID_KEYS = 256


def _grid_keys(hk: int, wk: int, like: torch.Tensor) -> torch.Tensor:
    """``(Hk * Wk, Hk + Wk)``: key ``(y, x)`` (row ``y * Wk + x``) as its one-hot row ``y`` among
    the first ``Hk`` channels and its one-hot column ``x`` among the last ``Wk``: the key factor
    of a grid bias, so that ``[rows, cols] @ _grid_keys(..).T`` adds ``rows[y] + cols[x]``."""
    rows = torch.eye(hk, dtype=like.dtype, device=like.device)[:, None, :].expand(hk, wk, hk)
    cols = torch.eye(wk, dtype=like.dtype, device=like.device)[None, :, :].expand(hk, wk, wk)
    return torch.cat([rows, cols], dim=-1).reshape(hk * wk, hk + wk)


def _pad_last(t: torch.Tensor, size: int) -> torch.Tensor:
    """``t`` zero-padded to ``size`` channels, its channels contiguous (as the flash kernel
    requires: a transposed view would send SDPA to its math fallback)."""
    if t.shape[-1] != size:
        return F.pad(t, [0, size - t.shape[-1]])
    return t if t.stride(-1) == 1 else t.contiguous()


def _with_factors(
    q: torch.Tensor, k: torch.Tensor, q_bias: torch.Tensor | None, k_bias: torch.Tensor | None
) -> tuple[torch.Tensor, torch.Tensor]:
    """``[q, q_bias]`` and ``[k, k_bias]`` (``k_bias`` broadcast over ``k``'s leading dims), so
    that their dot products are ``q k^T + q_bias k_bias^T``."""
    if q_bias is None or k_bias is None:
        return q, k
    k_bias = k_bias.to(k.dtype).expand(k.shape[:-1] + k_bias.shape[-1:])
    return torch.cat([q, q_bias.to(q.dtype)], dim=-1), torch.cat([k, k_bias], dim=-1)


def _math(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    scale: float,
    bias: torch.Tensor | None,
    q_bias: torch.Tensor | None,
    k_bias: torch.Tensor | None,
    grid_bias: tuple[torch.Tensor, torch.Tensor] | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """The written-out path in float32 or wider: ``(output, weights)``."""
    q, k = widen(q), widen(k)
    wide = torch.promote_types(q.dtype, k.dtype)
    if scale != 1.0:
        q = q * scale
    q, k = _with_factors(q, k, q_bias, k_bias)
    logits = q @ k.transpose(-1, -2)
    if grid_bias is not None:
        rows, cols = grid_bias
        lq, hk, wk = logits.shape[-2], rows.shape[-1], cols.shape[-1]
        grid = logits.reshape(logits.shape[:-1] + (hk, wk))  # noqa: RUF005 (TorchScript)
        grid = grid + widen(rows).unsqueeze(-1) + widen(cols).unsqueeze(-2)
        logits = grid.reshape(logits.shape[:-2] + (lq, hk * wk))  # noqa: RUF005 (TorchScript)
    if bias is not None:
        if bias.dtype == torch.bool:
            logits = logits.masked_fill(~bias, float("-inf"))
        else:
            logits = logits + bias.to(wide)
    weights = torch.softmax(logits, dim=-1)
    out = weights @ v.to(torch.promote_types(v.dtype, wide))
    return out, weights


def _fused(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    scale: float,
    bias: torch.Tensor | None,
    q_bias: torch.Tensor | None,
    k_bias: torch.Tensor | None,
    grid_bias: tuple[torch.Tensor, torch.Tensor] | None,
    dtype: torch.dtype,
) -> torch.Tensor:
    """The fused path: ``F.scaled_dot_product_attention`` on ``dtype`` inputs, a factored or
    grid bias as extra channels, the widths made one, the leading dimensions folded to 4-D."""
    ev = v.shape[-1]
    if grid_bias is not None:  # a large grid as factors
        q_bias = torch.cat([grid_bias[0], grid_bias[1]], dim=-1)
        k_bias = _grid_keys(grid_bias[0].shape[-1], grid_bias[1].shape[-1], q_bias)
    q, k, v = q.to(dtype), k.to(dtype), v.to(dtype)
    if bias is not None and bias.dtype != torch.bool:
        # one dtype with q: CPU SDPA silently misreads a float mask of another dtype (a float32
        # mask beside float64 queries)
        bias = bias.to(dtype)
    if q_bias is not None and k_bias is not None:
        q, k = _with_factors(q * scale if scale != 1.0 else q, k, q_bias, k_bias)
        scale = 1.0
    width = max(q.shape[-1], v.shape[-1])
    if q.shape[-1] != v.shape[-1]:  # one width for the flash kernel (zeros: same products)
        width += -width % 8
    q, k, v = _pad_last(q, width), _pad_last(k, width), _pad_last(v, width)
    lead = q.shape[:-2]
    lq, lk = q.shape[-2], k.shape[-2]
    flat = q.dim() != 4  # as (B, 1, L, E): the only form the ONNX exporter takes
    if flat:
        q, k, v = (t.reshape(-1, 1, t.shape[-2], t.shape[-1]) for t in (q, k, v))
        if bias is not None:
            bias = bias.expand(list(lead) + [lq, lk]).reshape(-1, 1, lq, lk)  # noqa: RUF005
    out = F.scaled_dot_product_attention(q, k, v, bias, scale=scale)
    if flat:
        out = out.reshape(list(lead) + [lq, out.shape[-1]])  # noqa: RUF005 (TorchScript)
    return out[..., :ev]


@register_notrace_function  # timm's FX feature path: one leaf call
def softmax_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    scale: float,
    bias: torch.Tensor | None = None,
    q_bias: torch.Tensor | None = None,
    k_bias: torch.Tensor | None = None,
    need_weights: bool = False,
    fused: bool = True,
    grid_bias: tuple[torch.Tensor, torch.Tensor] | None = None,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """``softmax(q k^T * scale + q_bias k_bias^T + grid + bias) v`` over the last two
    dimensions.

    Args:
        q: queries ``(..., Lq, E)``.
        k: keys ``(..., Lk, E)``.
        v: values ``(..., Lk, Ev)``.
        scale: multiplies ``q k^T`` only (not the biases).
        bias: ``None``, an additive float bias broadcastable to ``(..., Lq, Lk)`` (a constant: one
            that needs a gradient should come as factors), or a bool mask, True where a query
            may attend a key (every query must see at least one key).
        q_bias, k_bias: a bias given as factors, ``q_bias`` ``(..., Lq, R)`` and ``k_bias``
            ``(..., Lk, R)`` or ``(Lk, R)``; both or neither.
        need_weights: also return the weights (the math path runs).
        fused: ``F.scaled_dot_product_attention`` unless the weights are needed (or a grid
            bias is small, see :data:`DENSE_GRID_KEYS`); ``False`` forces the math path.
        grid_bias: ``(rows, cols)``, a bias over keys on an ``Hk x Wk`` grid (key ``y * Wk +
            x``, ``Lk = Hk * Wk``): ``rows`` ``(..., Lq, Hk)`` and ``cols`` ``(..., Lq, Wk)``;
            query ``i`` and key ``(y, x)`` get ``rows[i, y] + cols[i, x]``, not scaled. Not
            with ``q_bias``/``k_bias``.

    Returns:
        ``(out, weights)``: ``out`` ``(..., Lq, Ev)`` in the inputs' common dtype (the autocast
        dtype under autocast; the math path casts its float32 result to it); ``weights``
        ``(..., Lq, Lk)`` in float32 or wider when ``need_weights``, else ``None``.
    """
    if (q_bias is None) != (k_bias is None):
        raise ValueError("softmax_attention: give both q_bias and k_bias, or neither")
    if grid_bias is not None and q_bias is not None:
        raise ValueError("softmax_attention: give grid_bias or q_bias/k_bias, not both")
    dtype = torch.promote_types(torch.promote_types(q.dtype, k.dtype), v.dtype)
    if not torch.jit.is_scripting():  # (TorchScript skips this branch: it cannot read globals)
        fused = fused and not _AS_EQUATION[0]
        if grid_bias is not None and k.shape[-2] <= DENSE_GRID_KEYS:
            fused = False  # small grid: the bias added to the logits (module docstring)
    if fused and not need_weights:
        return _fused(q, k, v, scale, bias, q_bias, k_bias, grid_bias, dtype), None
    if torch.jit.is_scripting():  # TorchScript's autocast needs a constant device type
        out, weights = _math(q, k, v, scale, bias, q_bias, k_bias, grid_bias)
        return out.to(dtype), (weights if need_weights else None)
    with float32_region(q):
        out, weights = _math(q, k, v, scale, bias, q_bias, k_bias, grid_bias)
    return out.to(dtype), (weights if need_weights else None)


# the call in AttendMixin._attend is one leaf of a torch.fx graph, as in the blocks' own modules
torch.fx.wrap("softmax_attention")


class AttendMixin:
    """``self._attend(q, k, v, bias)`` for a block with ``scale`` and ``attn_impl`` attributes:
    :func:`softmax_attention` with the block's scale (``scale=1.0`` for queries scaled
    beforehand), a dense ``bias``, the factored ``q_bias``/``k_bias`` or the ``grid_bias`` of
    relative positions,
    fused unless ``attn_impl`` is ``"math"``, and the weights only while a capture of the block
    is active (``(out, None)`` otherwise, and always in TorchScript).

    A caller records its map under the same test as every block,
    ``if not torch.jit.is_scripting(): if is_capturing(self): ...``, not under ``weights is not
    None``: torch.fx traces this call as one leaf whose weights are a proxy, never ``None``, so
    that test would put the recording into the graph, where the weights are ``None``."""

    def _attend(
        self,
        q: torch.Tensor,
        k: torch.Tensor,
        v: torch.Tensor,
        bias: torch.Tensor | None = None,
        q_bias: torch.Tensor | None = None,
        k_bias: torch.Tensor | None = None,
        scale: float | None = None,
        grid_bias: tuple[torch.Tensor, torch.Tensor] | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        need = False
        if not torch.jit.is_scripting():
            need = is_capturing(self)
        return softmax_attention(
            q,
            k,
            v,
            self.scale if scale is None else scale,
            bias=bias,
            q_bias=q_bias,
            k_bias=k_bias,
            need_weights=need,
            fused=self.attn_impl == "fused",
            grid_bias=grid_bias,
        )
