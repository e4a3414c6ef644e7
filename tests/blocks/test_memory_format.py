"""Every registered block returns its output in the memory format it received: a channels-last
input gives a channels-last output (a network converted with ``.to(memory_format=
torch.channels_last)`` stays channels-last through its attention blocks instead of paying a copy
back and forth), a contiguous (NCHW) input a contiguous output."""

from __future__ import annotations

import pytest
import torch

import visattn

BLOCKS = visattn.list_blocks()
FORMATS = {"channels_last": torch.channels_last, "contiguous": torch.contiguous_format}


def _check(y: torch.Tensor, fmt: torch.memory_format, what: str) -> None:
    # 2x32x9x11: C, H, W > 1, so the two formats cannot both hold for one tensor
    assert y.is_contiguous(memory_format=fmt), (
        f"{what}: output strides {y.stride()} are not {fmt} (shape {tuple(y.shape)})"
    )


@pytest.mark.parametrize("fmt", FORMATS, ids=list(FORMATS))
@pytest.mark.parametrize("name", BLOCKS)
def test_output_keeps_the_input_memory_format(name: str, fmt: str) -> None:
    memory_format = FORMATS[fmt]
    blk = visattn.create_block(name, 32)
    x = torch.randn(2, 32, 9, 11).contiguous(memory_format=memory_format)
    for converted in (False, True):  # block as built, then converted like a channels-last model
        if converted:
            blk = blk.to(memory_format=memory_format)
        for train in (True, False):
            blk.train(train)
            with torch.no_grad():
                y = blk(x)
            what = f"{name} ({'train' if train else 'eval'}, {fmt} input"
            _check(y, memory_format, what + (", converted block)" if converted else ")"))


@pytest.mark.parametrize("name", BLOCKS)
def test_input_gradient_keeps_the_channels_last_format(name: str) -> None:
    """The backward too: a channels-last input gets a channels-last gradient."""
    blk = visattn.create_block(name, 32).to(memory_format=torch.channels_last).train()
    x = torch.randn(2, 32, 9, 11).contiguous(memory_format=torch.channels_last)
    x.requires_grad_()
    y = blk(x)
    y.backward(torch.randn_like(y))
    _check(x.grad, torch.channels_last, f"{name} input gradient")
