"""SimAM, a parameter-free 3-D attention (Yang, Zhang, Li, Xie; ICML 2021, "SimAM: A Simple,
Parameter-Free Attention Module for Convolutional Neural Networks")."""

from __future__ import annotations

import torch
import torch.nn as nn

from . import _stats
from ._utils import check_choice
from .capture import record_attention
from .registry import register_block

_VARIANCES = ("biased", "unbiased")


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

    Shapes: ``(N, C, H, W) -> (N, C, H, W)``; attention map ``sigmoid(1 / E)``, ``(N, C, H, W)``.

    Parameters: 0 (parameter-free; ``create_block(..., init="identity")`` wraps it in the generic
    residual form, which adds one).

    Args:
        channels: input channels ``C`` (unused: the block has no weights; kept for the common
            constructor).
        e_lambda: the regulariser ``lambda > 0`` of the energy function.
        variance: ``"biased"`` (paper, ``1/M``) or ``"unbiased"`` (official code, ``1/(M-1)``).
    """

    def __init__(self, channels: int, e_lambda: float = 1e-4, variance: str = "biased") -> None:
        super().__init__()
        if isinstance(e_lambda, bool) or not isinstance(e_lambda, (int, float)) or e_lambda <= 0:
            raise ValueError(f"option 'e_lambda' must be a positive number, got {e_lambda!r}")
        check_choice("variance", variance, _VARIANCES)
        self.e_lambda = float(e_lambda)
        self.unbiased = variance == "unbiased"

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h, w = x.shape[2], x.shape[3]
        d = (x - x.mean((2, 3), keepdim=True)).pow(2)  # (t - mu)^2
        var = d.sum((2, 3), keepdim=True) / _stats.variance_divisor(h * w, self.unbiased)
        a = torch.sigmoid(d / (4 * (var + self.e_lambda)) + 0.5)  # sigmoid(1 / E)
        if not torch.jit.is_scripting():
            record_attention(self, a)
        return x * a

    def extra_repr(self) -> str:
        return f"e_lambda={self.e_lambda}, variance={'unbiased' if self.unbiased else 'biased'!r}"
