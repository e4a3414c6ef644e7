"""Helpers for the placement tests.

* :func:`registered_conv_block`: a conv-replacing block for tests of placement position
  ``conv`` (the mechanism does not need one of the shipped ones: SK, split attention, MHSA,
  lambda, halo). Registered only while a test uses it, so registry-wide tests never see it.
* :func:`as_if_trained`: random norm statistics and affine parameters, so a randomly
  initialised ResNet stands in for a pretrained one (timm zero-initialises the last norm of each
  residual branch, which would make every branch, and any test of what it computes, trivial).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import torch
import torch.nn as nn

from visattn.blocks.registry import registered_block

NAME = "_test_conv"


def as_if_trained(model: nn.Module, seed: int = 0) -> nn.Module:
    """Give every BatchNorm of ``model`` random weights, biases and running statistics (in
    place, reproducibly); returns ``model``."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for m in model.modules():
            if isinstance(m, nn.BatchNorm2d):
                n = m.num_features
                m.weight.copy_(0.5 + torch.rand(n, generator=g))
                m.bias.copy_(0.2 * torch.randn(n, generator=g))
                m.running_mean.copy_(0.1 * torch.randn(n, generator=g))
                m.running_var.copy_(0.5 + torch.rand(n, generator=g))
    return model


@contextmanager
def registered_conv_block() -> Iterator[str]:
    """Register :data:`NAME` (a 3x3 conv with a sigmoid gate on its output channels) for the
    duration of the ``with`` block; yields the name."""

    class TestConvBlock(nn.Module):
        """``y = conv(x) * sigmoid(scale)``: a 3x3 conv with the contract of a conv-replacing
        block (``channels, out_channels=None, stride=1``). With ``gate=False`` it is exactly the
        conv, so copying a ResNet's conv weights into it must reproduce the ResNet."""

        def __init__(
            self, channels: int, out_channels: int | None = None, stride: int = 1, gate: bool = True
        ) -> None:
            super().__init__()
            self.in_channels = channels
            self.out_channels = out_channels or channels
            self.stride = stride
            self.conv = nn.Conv2d(channels, self.out_channels, 3, stride, 1, bias=False)
            self.scale = nn.Parameter(torch.zeros(self.out_channels, 1, 1)) if gate else None

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            y = self.conv(x)
            return y if self.scale is None else y * torch.sigmoid(self.scale)

    with registered_block(
        NAME, TestConvBlock, family="spatial", paper="test only", replaces_conv=True
    ):
        yield NAME
