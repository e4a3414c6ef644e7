"""Small helpers shared by the blocks: layer lookup by name or class, option checks, and the
channels and stride of conv-replacing blocks."""

from __future__ import annotations

import math
import numbers
from typing import Any

import torch
import torch.nn as nn
from timm.layers import get_act_layer, register_notrace_function

from .._registry import did_you_mean
from ._attention import float32_region, widen
from .identity import ScaledSigmoid, unit_gate

_ACTIVATIONS: dict[str, type[nn.Module]] = {
    "relu": nn.ReLU,
    "relu6": nn.ReLU6,
    "silu": nn.SiLU,
    "swish": nn.SiLU,
    "gelu": nn.GELU,
    "hard_swish": nn.Hardswish,
    "leaky_relu": nn.LeakyReLU,
    "sigmoid": nn.Sigmoid,
    "hard_sigmoid": nn.Hardsigmoid,
    "tanh": nn.Tanh,
    "identity": nn.Identity,
}


def get_layer(layer: str | type[nn.Module] | Any, option: str) -> type[nn.Module]:
    """Resolve an activation/gate option given as a class, a callable or a name (visattn's
    names first, then timm's ``get_act_layer``: ``"mish"``, ``"gelu_tanh"``, ...)."""
    if isinstance(layer, str):
        if layer.lower() in _ACTIVATIONS:
            return _ACTIVATIONS[layer.lower()]
        try:
            return get_act_layer(layer)
        except KeyError:
            hint = did_you_mean(layer.lower(), sorted(_ACTIVATIONS), n=1)
            raise ValueError(
                f"option '{option}': unknown layer {layer!r}{hint}; choose from "
                f"{sorted(_ACTIVATIONS)}, a name timm's get_act_layer knows, or an nn.Module class"
            ) from None
    if callable(layer):
        return layer
    raise ValueError(f"option '{option}' must be a layer name or class, got {layer!r}")


class Excitation(nn.Module):
    """The excitation MLP of squeeze-and-excitation and its kin, ``W2 act(W1 z)`` with
    ``W1: C -> hidden`` and ``W2: hidden -> C`` as 1x1 convolutions, and its identity form.

    A base class: :meth:`add_excitation` puts the layers on the block itself as ``fc1``, ``act``
    and ``fc2`` (the names of the papers' code), so state-dict keys, released weights and the
    parameter order stay those of each block. SE, scSE's channel half, CBAM's channel gate and
    GAM's channel MLP use it.
    """

    def add_excitation(
        self,
        channels: int,
        hidden: int,
        act_layer: str | type[nn.Module] = "relu",
        bias: bool = True,
    ) -> None:
        self.fc1 = nn.Conv2d(channels, hidden, 1, bias=bias)
        self.act = get_layer(act_layer, "act_layer")()
        self.fc2 = nn.Conv2d(hidden, channels, 1, bias=bias)

    def excite(self, z: torch.Tensor) -> torch.Tensor:
        """``W2 act(W1 z)``, before the gate."""
        return self.fc2(self.act(self.fc1(z)))

    def identity_gate(self) -> ScaledSigmoid:
        """Zero ``W2`` (weight and bias) and return the gate ``2 * sigmoid``: the excitation then
        gives exactly 1 for every input."""
        return unit_gate(self.fc2)


def check_choice(option: str, value: Any, choices: tuple[Any, ...] | list[Any]) -> None:
    if value not in choices:
        raise ValueError(f"option '{option}' must be one of {list(choices)}, got {value!r}")


def check_positive_int(option: str, value: Any, *, odd: bool = False) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"option '{option}' must be a positive int, got {value!r}")
    if odd and value % 2 == 0:
        raise ValueError(f"option '{option}' must be odd, got {value}")


def init_conv_io(
    block: nn.Module,
    channels: int,
    out_channels: int | None,
    stride: int,
    *,
    heads: int | None = None,
) -> int:
    """Check and store a conv-replacing block's ``in_channels``, ``out_channels`` (``None``:
    ``channels``) and ``stride`` as attributes of ``block``; with ``heads``, also check that the
    heads divide ``out_channels``. Returns ``out_channels``. Errors name the option."""
    out = channels if out_channels is None else out_channels
    check_positive_int("out_channels", out)
    check_positive_int("stride", stride)
    if heads is not None:
        check_positive_int("heads", heads)
        if out % heads:
            raise ValueError(f"option 'heads'={heads} must divide out_channels={out}")
    block.in_channels, block.out_channels, block.stride = channels, out, stride
    return out


def attention_heads(channels: int, heads: int | None, dim_head: int = 32) -> int:
    """Heads of a block that splits its ``channels`` into heads: ``heads`` checked, or for
    ``None`` the rule ``max(1, channels // dim_head)`` (YOLOv12, Swin: heads of depth 32), lowered
    to the nearest count that divides ``channels`` where it does not (``C = 240``: 6 heads of 40,
    as EfficientNet's widths need). Given heads must divide ``channels``."""
    if heads is None:
        heads = max(1, channels // dim_head)
        while channels % heads:
            heads -= 1
    check_positive_int("heads", heads)
    if channels % heads:
        raise ValueError(f"option 'heads'={heads} must divide channels={channels}")
    return heads


def reduced_channels(
    channels: int, reduction: float, *, min_channels: int = 0, option: str = "reduction"
) -> int:
    """``channels // reduction`` (raised to ``min_channels``); a result of 0 is refused.
    ``reduction`` may be any real number, e.g. the exact ``Fraction(C, width)`` that timm's
    keywords become (:mod:`visattn.blocks.conventions`)."""
    if isinstance(reduction, bool) or not isinstance(reduction, numbers.Real) or reduction <= 0:
        raise ValueError(f"option '{option}' must be a positive number, got {reduction!r}")
    rd = int(channels // reduction)
    rd = max(rd, min_channels)
    if rd < 1:
        raise ValueError(
            f"option '{option}'={reduction} leaves {rd} channels for {channels} input channels"
        )
    return rd


def window_slices(
    padded: torch.Tensor, kernel: int, out_h: int, out_w: int, stride: int = 1
) -> list[torch.Tensor]:
    """The ``k^2`` shifted views of a padded ``(N, C, H + k - 1, W + k - 1)`` map that a ``k x k``
    window with ``stride`` visits: view ``p = (dy, dx)`` (row-major over the window) holds
    ``padded[..., dy + stride i, dx + stride j]`` for ``i < out_h``, ``j < out_w``. Local
    attention and dynamic filters sum over them without building an ``(N, C, k^2, H, W)`` tensor
    (``F.unfold``), and every exporter sees plain slicing."""
    views: list[torch.Tensor] = []
    for p in range(kernel * kernel):
        dy, dx = p // kernel, p % kernel
        views.append(
            padded[
                :,
                :,
                dy : dy + stride * (out_h - 1) + 1 : stride,
                dx : dx + stride * (out_w - 1) + 1 : stride,
            ]
        )
    return views


def window_gather(
    padded: torch.Tensor, kernel: int, out_h: int, out_w: int, stride: int = 1
) -> torch.Tensor:
    """The views of :func:`window_slices` stacked in one ``(N, C, k^2, out_h, out_w)`` tensor by
    one gather over the flattened map, with indices built from ``arange`` (so an exported graph
    keeps the map size symbolic). The exporters' form: one node where the slices give ``2 k^2``
    (a 7x7 window: 98 per map, which made a 27-block network take longer than 10 minutes to
    export); eager code keeps the slices, which build no ``k^2``-fold tensor."""
    device, width = padded.device, padded.shape[3]
    offsets = torch.arange(kernel, device=device)
    rows = offsets[:, None] + stride * torch.arange(out_h, device=device)[None, :]  # (k, Ho)
    cols = offsets[:, None] + stride * torch.arange(out_w, device=device)[None, :]  # (k, Wo)
    flat = rows[:, None, :, None] * width + cols[None, :, None, :]  # (dy, dx, i, j)
    n, c = padded.shape[0], padded.shape[1]
    gathered = padded.flatten(2).index_select(2, flat.reshape(-1))
    return gathered.reshape(n, c, kernel * kernel, out_h, out_w)


def exporting() -> bool:
    """Whether ``torch.export`` (the dynamo ONNX exporter's capture) or the TorchScript ONNX
    exporter is tracing the call: blocks switch to forms with fewer graph nodes there."""
    return torch.compiler.is_exporting() or torch.onnx.is_in_onnx_export()


def eca_kernel_size(channels: int, gamma: float = 2.0, b: float = 1.0) -> int:
    """ECA-Net Eq. (12): k = |log2(C)/gamma + b/gamma|_odd (nearest odd number, at least 1)."""
    t = int(abs(math.log2(channels) / gamma + b / gamma))
    return t if t % 2 else t + 1


def resolve_eca_kernel(
    channels: int, kernel_size: int | None, gamma: float, b: float, min_kernel: int = 1
) -> int:
    """``kernel_size`` if given, else ECA's adaptive size from ``gamma`` and ``b`` (Eq. (12)),
    at least ``min_kernel`` (timm's modules: 3); checked: a positive odd int. Errors name the
    option."""
    check_positive_int("min_kernel", min_kernel, odd=True)
    if kernel_size is None:
        if isinstance(gamma, bool) or not isinstance(gamma, (int, float)) or gamma <= 0:
            raise ValueError(f"option 'gamma' must be a positive number, got {gamma!r}")
        if isinstance(b, bool) or not isinstance(b, (int, float)):
            raise ValueError(f"option 'b' must be a number, got {b!r}")
        kernel_size = max(eca_kernel_size(channels, gamma, b), min_kernel)
    check_positive_int("kernel_size", kernel_size, odd=True)
    return kernel_size


def is_channels_last(x: torch.Tensor) -> bool:
    """``x`` is a 4-D tensor laid out channels-last and not also NCHW-contiguous (a tensor with
    ``C = 1`` or ``H = W = 1`` is both)."""
    cl = x.dim() == 4 and x.is_contiguous(memory_format=torch.channels_last)
    return cl and not x.is_contiguous()


def same_memory_format(y: torch.Tensor, like: torch.Tensor) -> torch.Tensor:
    """``y`` in the memory format of ``like``: channels-last if ``like`` is (and not also
    contiguous), else ``y`` unchanged. For blocks whose grouped reshapes copy a channels-last input
    into NCHW order, so that their output keeps the format they received."""
    if is_channels_last(like):
        return y.contiguous(memory_format=torch.channels_last)
    return y.contiguous() if like.is_contiguous() else y


def spatial_mean(x: torch.Tensor, keepdim: bool = True) -> torch.Tensor:
    """Global average pooling ``x.mean((2, 3), keepdim)``, computed as a sum divided by ``H W``.

    Equal up to float rounding, and 25-45% faster forward+backward on CPU in a squeeze-excite
    gate: the gradient of a sum is a broadcast view that the gate's other gradient absorbs in
    one pass, while the gradient of ``mean`` is first written out as a dense ``(N, C, H, W)``
    tensor (in NCHW order even for a channels-last input).

    The sum accumulates and is divided in float32 (float64 stays float64) and the mean is given
    back in ``x``'s dtype: a float16 sum of ``H W`` activations passes 65,504 long before the
    mean does (CPU autocast keeps ``sum`` in float16). Unchanged for float32 and float64 input.
    """
    wide = torch.promote_types(x.dtype, torch.float32)
    total = x.sum((2, 3), keepdim=keepdim, dtype=wide)
    return (total / (x.shape[2] * x.shape[3])).to(x.dtype)


def axis_sum(x: torch.Tensor, dim: int, dtype: torch.dtype | None = None) -> torch.Tensor:
    """``x.sum(dim, keepdim=True)`` over the height (``dim=2``) or the width (``dim=3``) of an
    ``(N, C, H, W)`` tensor, run along memory.

    The same sum; for a channels-last ``x`` it is taken over the ``(N, H, W, C)`` view, whose
    memory order it follows, and given back as a view of shape ``(N, C, H, 1)`` or
    ``(N, C, 1, W)``: 4-7x faster on CPU than ``x.sum(dim, keepdim=True)``, whose output layout
    sends a channels-last input down a strided loop.
    """
    if is_channels_last(x):
        return x.permute(0, 2, 3, 1).sum(dim - 1, keepdim=True, dtype=dtype).permute(0, 3, 1, 2)
    return x.sum(dim, keepdim=True, dtype=dtype)


@register_notrace_function  # a leaf of traced graphs: its layout test runs at call time
def axis_mean(x: torch.Tensor, dim: int) -> torch.Tensor:
    """The mean over the height (``dim=2``) or the width (``dim=3``) of ``(N, C, H, W)``, kept
    as a dimension of size 1 (coordinate attention's directional pooling): :func:`axis_sum`
    divided by the axis length, accumulated in float32 (as :func:`spatial_mean`), so that its
    gradient is a broadcast view rather than a dense map."""
    wide = torch.promote_types(x.dtype, torch.float32)
    return (axis_sum(x, dim, dtype=wide) / x.shape[dim]).to(x.dtype)


def _times(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """``a * b``, written into ``a`` (a temporary) when the product keeps ``a``'s dtype."""
    return a.mul_(b) if torch.promote_types(a.dtype, b.dtype) == a.dtype else a * b


class _GateHW(torch.autograd.Function):
    """``x * g_h * g_w`` with one backward that saves only its inputs (see :func:`gate_hw`)."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, g_h: torch.Tensor, g_w: torch.Tensor) -> torch.Tensor:
        fmt = torch.channels_last if is_channels_last(x) else torch.contiguous_format
        # the gates in x's layout: a broadcast product against a gate in the other layout
        # takes a strided loop, 3-4x slower on CPU
        g_h, g_w = g_h.contiguous(memory_format=fmt), g_w.contiguous(memory_format=fmt)
        ctx.save_for_backward(x, g_h, g_w)
        ctx.fmt = fmt
        return _times(x * g_w, g_h)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor | None, ...]:
        x, g_h, g_w = ctx.saved_tensors
        grad = grad.contiguous(memory_format=ctx.fmt)
        need_x, need_h, need_w = ctx.needs_input_grad
        gx = _times(grad * g_w, g_h) if need_x else None
        gh = gw = None
        if need_h or need_w:
            gxy = grad * x
            gw = axis_sum(gxy * g_h, 2) if need_w else None
            gh = axis_sum(_times(gxy, g_w), 3) if need_h else None
        return gx, gh, gw


@register_notrace_function  # a leaf of traced graphs, as axis_mean
def gate_hw(x: torch.Tensor, g_h: torch.Tensor, g_w: torch.Tensor) -> torch.Tensor:
    """``x * g_h * g_w`` for an ``(N, C, H, W)`` map and its two directional gates
    ``g_h: (N, C, H, 1)`` and ``g_w: (N, C, 1, W)`` (coordinate attention, ELA).

    The same product; when a gradient is needed it runs as one autograd function that puts the
    gates in ``x``'s memory layout and takes each gate's gradient with :func:`axis_sum`: 2-3x
    faster forward and backward on CPU for a channels-last map than autograd's three products,
    whose broadcast gradients are summed along strided axes. Under TorchScript and tracing it is
    the plain product.
    """
    if not torch.jit.is_scripting():
        wanted = x.requires_grad or g_h.requires_grad or g_w.requires_grad
        if wanted and torch.is_grad_enabled() and not torch.jit.is_tracing():
            return _GateHW.apply(x, g_h, g_w)
    return x * g_h * g_w


class _ChannelMeanMax(torch.autograd.Function):
    """``cat([x.mean(1), x.max(1)], 1)`` with one fused backward (see :func:`channel_mean_max`)."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor) -> torch.Tensor:
        mx, idx = x.max(dim=1, keepdim=True)
        ctx.save_for_backward(idx)
        ctx.fmt = torch.channels_last if is_channels_last(x) else torch.contiguous_format
        ctx.shape = x.shape
        return torch.cat([x.mean(dim=1, keepdim=True), mx], dim=1)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> torch.Tensor:
        (idx,) = ctx.saved_tensors
        gx = torch.empty(ctx.shape, dtype=grad.dtype, device=grad.device, memory_format=ctx.fmt)
        gx.copy_((grad[:, :1] / ctx.shape[1]).expand(ctx.shape))
        return gx.scatter_add_(1, idx, grad[:, 1:])


def channel_mean_max(x: torch.Tensor) -> torch.Tensor:
    """CBAM's channel pooling ``[AvgPool_c(x); MaxPool_c(x)]``: ``(N, C, H, W) -> (N, 2, H, W)``.

    Forward as ``torch.cat([x.mean(1, keepdim=True), x.amax(1, keepdim=True)], 1)``. When a
    gradient is needed it goes through one fused backward that writes ``grad_mean / C`` over the
    input once and adds ``grad_max`` at each position's arg-max channel: 2x faster than autograd's
    (``amax``'s backward builds an equality mask and divides by the tie count). Ties (measure
    zero for real-valued features) send the whole max gradient to one channel, as ``torch.max``
    does, instead of sharing it.
    """
    if not torch.jit.is_scripting():  # noqa: SIM102 (TorchScript skips the inner test)
        # not under torch.jit.trace: the trace would hold a Python call (not savable) and
        # differ between a tracing run with and one without gradients (the trace check)
        if x.requires_grad and not torch.jit.is_tracing():
            return _ChannelMeanMax.apply(x)
    return torch.cat([x.mean(dim=1, keepdim=True), x.amax(dim=1, keepdim=True)], dim=1)


def adaptive_bins(n_in: int, n_out: int, like: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The bins of adaptive average pooling along one axis of ``n_in`` points to ``n_out``:
    a 0/1 matrix ``(n_out, n_in)`` whose row ``i`` selects the points ``floor(i n_in / n_out)``
    to ``ceil((i + 1) n_in / n_out) - 1`` (PyTorch's bins, for shrinking and for growing), and the
    bin sizes ``(n_out, 1)``, in ``like``'s dtype and device.

    ``bins @ t / sizes`` is ``F.adaptive_avg_pool1d`` along that axis. Built from ``arange`` of
    the sizes, so a traced or exported graph keeps them symbolic (ONNX has no adaptive pooling to
    an input-dependent size), and a constant input stays exactly constant.
    """
    i = torch.arange(n_out, device=like.device)
    j = torch.arange(n_in, device=like.device)
    start = torch.div(i * n_in, n_out, rounding_mode="floor")
    end = torch.div((i + 1) * n_in + n_out - 1, n_out, rounding_mode="floor")
    bins = ((j[None, :] >= start[:, None]) & (j[None, :] < end[:, None])).to(like.dtype)
    return bins, (end - start).to(like.dtype)[:, None]


def adaptive_avg_pool(x: torch.Tensor, height: int, width: int) -> torch.Tensor:
    """``F.adaptive_avg_pool2d(x, (height, width))`` of ``(N, C, H, W)`` as two bin-matrix
    products (see :func:`adaptive_bins`): exportable with symbolic ``H``, ``W``, ``height`` and
    ``width``, also when growing the map.

    The bin sums are taken in float32 (float64 stays float64) with autocast off, and the result
    is given back in ``x``'s dtype: a bin's float16 sum passes 65,504 where its mean does not.
    Unchanged for float32 and float64 input outside autocast."""
    if torch.jit.is_scripting():  # TorchScript's autocast needs a constant device type
        return _bin_means(x, height, width)
    with float32_region(x):
        return _bin_means(widen(x), height, width).to(x.dtype)


def _bin_means(x: torch.Tensor, height: int, width: int) -> torch.Tensor:
    bins_h, size_h = adaptive_bins(x.shape[2], height, x)
    bins_w, size_w = adaptive_bins(x.shape[3], width, x)
    return (bins_h @ x @ bins_w.t()) / (size_h @ size_w.t())
