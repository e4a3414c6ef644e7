"""SimAM, a parameter-free 3-D attention (Yang, Zhang, Li, Xie; ICML 2021, "SimAM: A Simple,
Parameter-Free Attention Module for Convolutional Neural Networks")."""

from __future__ import annotations

from typing import Any

import torch
import torch.nn as nn
from torch.autograd.function import once_differentiable

from . import _stats
from ._compiled import CompiledKernel
from ._utils import check_choice
from .capture import is_capturing, record_attention
from .registry import register_block

_VARIANCES = ("biased", "unbiased")
_KERNELS = ("compiled", "eager")


def _weights(c: torch.Tensor, n: int, e_lambda: float) -> tuple[torch.Tensor, torch.Tensor]:
    """``(sigmoid(1 / E), k)`` from ``c = t - mu`` (Eqs. (5)-(6)): ``1 / e_t = c^2 k + 1/2`` with
    ``k = 1 / (4 (sigma^2 + lambda))`` per channel, ``sigma^2 = sum(c^2) / n``."""
    d = c * c
    k = 0.25 / (d.sum((2, 3), keepdim=True) / n + e_lambda)
    return _map(d, k), k


def _map(d: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
    """``sigmoid(d k + 1/2)``: the map from ``d = c^2`` and its channel's ``k``."""
    return torch.addcmul(torch.full_like(k, 0.5), d, k).sigmoid_()


def _grad(
    g: torch.Tensor, x: torch.Tensor, c: torch.Tensor, a: torch.Tensor, k: torch.Tensor, n: int
) -> torch.Tensor:
    """``dL/dx`` of ``y = x a`` from ``g = dL/dy``, written out: autograd would take about
    twice as many passes over the feature map. With ``c = x - mu``,
    ``k = 1 / (4 (sigma^2 + lambda))`` and ``a = sigmoid(c^2 k + 1/2)``::

        g_z = g x a (1 - a)
        g_k = sum_hw(g_z c^2),  so  dL/dsigma^2 = -4 k^2 g_k
        dL/dx = g a + 2 k (c g_z - mean_hw(c g_z)) - (8 k^2 g_k / n) c

    (``n`` the variance's divisor; ``mean_hw(c) = 0`` removes the last term's mean)."""
    g_z = torch.ops.aten.sigmoid_backward(g * x, a)  # g x a (1 - a), one pass
    cg = c * g_z
    g_k = (cg * c).sum((2, 3), keepdim=True)
    two_k = 2 * k
    gx = torch.addcmul(-two_k * cg.mean((2, 3), keepdim=True), g, a)
    gx.addcmul_(c, g_k * k * k * (-8.0 / n))
    return gx.addcmul_(cg, two_k)


def _forward_parts(
    x: torch.Tensor, e_lambda: float, n: int
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``(y, mu, k)``: the output and the per-channel statistics the map is rebuilt from."""
    mu = x.mean((2, 3), keepdim=True)
    a, k = _weights(x - mu, n, e_lambda)
    return x * a, mu, k


def _grad_from_stats(
    g: torch.Tensor, x: torch.Tensor, mu: torch.Tensor, k: torch.Tensor, n: int
) -> torch.Tensor:
    """:func:`_grad` with ``c`` and ``a`` rebuilt from ``x`` and the statistics, which costs
    nothing in a fused loop and saves writing and reading them."""
    c = x - mu
    return _grad(g, x, c, _map(c * c, k), k, n)


#: ``kernel="compiled"``: Inductor fuses the forward's and the backward's passes into a few
#: loops each (reductions over the map, then one elementwise loop)
_COMPILED_FORWARD = CompiledKernel(_forward_parts, "block 'simam'", "kernel='eager'")
_COMPILED_BACKWARD = CompiledKernel(
    _grad_from_stats, "block 'simam'", "kernel='eager'", shares_with=_COMPILED_FORWARD
)


def _fused_applies(x: torch.Tensor) -> bool:
    """Whether a training kernel (:class:`_SimAMFunction`, :class:`_SimAMCompiled`) serves this
    call: a gradient is wanted and nothing is tracing, scripting, compiling or exporting the
    graph (those see the plain operations)."""
    return (
        not isinstance(x, torch.fx.Proxy)  # fx's symbolic trace
        and torch.is_grad_enabled()
        and x.requires_grad
        and not torch.jit.is_scripting()
        and not torch.jit.is_tracing()
        and not torch.compiler.is_compiling()
        and not torch.onnx.is_in_onnx_export()
    )


class _SimAMFunction(torch.autograd.Function):
    """``kernel="eager"``: SimAM's forward as the plain operations compute it (bit for bit,
    :func:`_weights`), with the backward written out (:func:`_grad`; a training step of
    ResNet-20 with SimAM in every block: 1.20x the plain network's instead of 1.29x, on an AVX2
    CPU, one thread). Returns ``(y, a)``; ``a`` (the map, for :func:`record_attention`) carries
    no gradient. Differentiable once: a second derivative raises (the saved ``c``, ``a``, ``k``
    hold no graph)."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, e_lambda: float, n: int) -> Any:
        c = x - x.mean((2, 3), keepdim=True)
        a, k = _weights(c, n, e_lambda)
        ctx.save_for_backward(x, c, a, k)
        ctx.n = n
        ctx.mark_non_differentiable(a)
        return x * a, a

    @staticmethod
    @once_differentiable
    def backward(ctx: Any, g: torch.Tensor, _: Any) -> Any:
        x, c, a, k = ctx.saved_tensors
        return _grad(g, x, c, a, k, ctx.n), None, None


class _SimAMCompiled(torch.autograd.Function):
    """``kernel="compiled"``: :func:`_forward_parts` and :func:`_grad_from_stats` through
    :class:`~._compiled.CompiledKernel` (each falls back to itself, uncompiled). Returns
    ``(y, mu, k)``: the statistics carry no gradient. Differentiable once, as
    :class:`_SimAMFunction`."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, e_lambda: float, n: int) -> Any:
        y, mu, k = _COMPILED_FORWARD(x, e_lambda, n)
        ctx.save_for_backward(x, mu, k)
        ctx.n = n
        ctx.mark_non_differentiable(mu, k)
        return y, mu, k

    @staticmethod
    @once_differentiable
    def backward(ctx: Any, g: torch.Tensor, *_: Any) -> Any:
        x, mu, k = ctx.saved_tensors
        return _COMPILED_BACKWARD(g, x, mu, k, ctx.n), None, None


@register_block("simam", family="hybrid", paper="Yang et al., ICML 2021")
class SimAM(nn.Module):
    r"""SimAM: every neuron is weighted by the inverse of its minimal energy.

    $$
    e_t^* = \frac{4 (\hat{\sigma}^2 + \lambda)}{(t - \hat{\mu})^2 + 2 \hat{\sigma}^2 + 2 \lambda},
    \qquad
    \tilde{X} = \sigma\!\left(\frac{1}{E}\right) \odot X
    $$

    For each channel with ``M = H W`` positions, mean ``mu`` and variance ``sigma^2`` over space,
    the minimal energy of neuron ``t`` is (Eq. (5))
    ``e_t = 4 (sigma^2 + lambda) / ((t - mu)^2 + 2 sigma^2 + 2 lambda)``, and the block refines
    the features as ``X~ = sigmoid(1 / E) * X`` (Eq. (6)), where
    ``1 / e_t = (t - mu)^2 / (4 (sigma^2 + lambda)) + 1/2``. Neurons far from their channel's mean
    (the ones that stand out) get weights near 1, the others near ``sigmoid(1/2)``.

    ``variance="biased"`` (default) is the paper's ``sigma^2 = 1/M sum (x_i - mu)^2``;
    ``"unbiased"`` divides by ``M - 1`` as the official code does (``n = h * w - 1``), kept at 1
    for a 1x1 map, where both give ``sigma^2 = 0``.

    ``lambda`` is 1e-4 in the paper's CIFAR experiments and the official module's default; the
    official ImageNet ResNets were trained with 0.1 (``--attention_param 0.1``).

    Training speed: the block is a chain of elementwise passes over the feature map, bound by
    memory traffic. With ``kernel="compiled"`` (default) a call that needs a gradient runs the
    equations through ``torch.compile`` (TorchInductor), which fuses them into a few loops
    forward and backward: compiled once per process on the first training step (seconds, with
    dynamic shapes, so one graph serves every map size), falling back to ``"eager"`` with a
    warning where compiling fails (for example no C++ compiler). ``kernel="eager"`` computes
    them with ATen operations and a hand-written backward. Both compute the same equations and
    differ in rounding only; inference (no gradient) and traced, scripted, exported or
    whole-network compiled graphs always see the plain operations.

    Shapes: ``(N, C, H, W) -> (N, C, H, W)``; attention map ``sigmoid(1 / E)``, ``(N, C, H, W)``.

    Parameters: 0 (parameter-free; ``create_block(..., init="identity")`` wraps it in the generic
    residual form, which adds one).

    Args:
        channels: input channels ``C`` (unused: the block has no weights; kept for the common
            constructor).
        e_lambda: the regulariser ``lambda > 0`` of the energy function.
        variance: ``"biased"`` (paper, ``1/M``) or ``"unbiased"`` (official code, ``1/(M-1)``).
        kernel: the training step's kernel, ``"compiled"`` or ``"eager"`` (see above).
    """

    def __init__(
        self,
        channels: int,
        e_lambda: float = 1e-4,
        variance: str = "biased",
        kernel: str = "compiled",
    ) -> None:
        super().__init__()
        if isinstance(e_lambda, bool) or not isinstance(e_lambda, (int, float)) or e_lambda <= 0:
            raise ValueError(f"option 'e_lambda' must be a positive number, got {e_lambda!r}")
        check_choice("variance", variance, _VARIANCES)
        check_choice("kernel", kernel, _KERNELS)
        self.e_lambda = float(e_lambda)
        self.unbiased = variance == "unbiased"
        self.kernel = kernel

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        n = _stats.variance_divisor(x.shape[2] * x.shape[3], self.unbiased)
        # two ifs: TorchScript skips a branch under `not is_scripting()` alone, compiling the
        # plain operations only
        if not torch.jit.is_scripting():  # noqa: SIM102
            if _fused_applies(x):
                if self.kernel == "eager":
                    y, a = _SimAMFunction.apply(x, self.e_lambda, n)
                    record_attention(self, a)
                    return y
                y, mu, k = _SimAMCompiled.apply(x, self.e_lambda, n)
                if is_capturing(self):  # the map, rebuilt only when asked for
                    c = x.detach() - mu
                    record_attention(self, _map(c * c, k))
                return y
        a, _ = _weights(x - x.mean((2, 3), keepdim=True), n, self.e_lambda)
        if not torch.jit.is_scripting():
            record_attention(self, a)
        return x * a

    def extra_repr(self) -> str:
        variance = "unbiased" if self.unbiased else "biased"
        return f"e_lambda={self.e_lambda}, variance={variance!r}, kernel={self.kernel!r}"
