"""Every block checks its input early: an empty batch passes (forward and backward), a 3-D or 5-D
tensor is refused with a message naming the block and the expected ``(N, C, H, W)``, and the
check survives TorchScript and ``torch.export``."""

from __future__ import annotations

import warnings

import pytest
import torch

import visattn


@pytest.mark.parametrize("name", visattn.list_blocks())
@pytest.mark.parametrize("train", [True, False], ids=["train", "eval"])
def test_every_block_handles_an_empty_batch(name: str, train: bool) -> None:
    blk = visattn.create_block(name, 16).train(train)
    x = torch.randn(0, 16, 8, 8, requires_grad=True)
    y = blk(x)
    assert y.shape == (0, 16, 8, 8)
    y.sum().backward()  # backward through an empty batch works too


@pytest.mark.parametrize("name", visattn.list_blocks())
def test_every_block_rejects_3d_input_naming_itself(name: str) -> None:
    for blk in (visattn.create_block(name, 16), visattn.block_info(name).cls(16)):
        with pytest.raises(ValueError, match=rf"block '{name}'.*\(N, C, H, W\)") as err:
            blk(torch.randn(16, 8, 8))
        assert "(16, 8, 8)" in str(err.value)
        with pytest.raises(ValueError, match=r"\(N, C, H, W\)"):
            blk(torch.randn(1, 2, 16, 8, 8))


def test_input_check_survives_scripting_and_export() -> None:
    blk = visattn.create_block("sge", 16).eval()  # a block that compiles with torch.jit.script
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        scripted = torch.jit.script(blk)
    x = torch.randn(2, 16, 8, 8)
    torch.testing.assert_close(scripted(x), blk(x))
    with pytest.raises(Exception, match=r"\(N, C, H, W\)"):
        scripted(torch.randn(16, 8, 8))
    exported = torch.export.export(blk, (x,)).module()
    torch.testing.assert_close(exported(x), blk(x))
