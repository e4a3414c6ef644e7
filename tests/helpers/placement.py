"""A conv-replacing block for the tests of placement position ``conv`` (the mechanism does not
need one of the shipped ones: SK, split attention, MHSA, lambda, halo). Registered only while a
test uses it (the ``conv_block`` fixture of tests/models/conftest.py), so registry-wide tests
never see it."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import torch
import torch.nn as nn

from visattn.blocks.registry import registered_block

NAME = "_test_conv"


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
