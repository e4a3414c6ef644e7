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


@pytest.mark.parametrize("name", ["scsa", "se", "cbam", "lambda", "gsop"])
def test_an_input_with_other_channels_is_refused_naming_the_block(name: str) -> None:
    """P19: scsa gave an IndexError, the others torch's convolution message without the block."""
    import visattn

    blk = visattn.create_block(name, 64)
    with pytest.raises(
        ValueError, match=rf"block '{name}' was built for 64 channels, got an input with 32"
    ):
        blk(torch.randn(2, 32, 8, 8))


def test_lambda_keeps_a_bfloat16_models_dtype() -> None:
    """P19: lambda returned float32 for bfloat16 input, so a bfloat16 network failed after it."""
    import visattn

    net = visattn.create_model("resnet20_cifar", attention={"name": "lambda", "position": "conv"})
    assert (
        net.to(torch.bfloat16)(torch.randn(2, 3, 32, 32, dtype=torch.bfloat16)).dtype
        == torch.bfloat16
    )


@pytest.mark.parametrize("in_chans", [0, -1, True, 2.0])
def test_create_model_refuses_an_impossible_input_channel_count(in_chans) -> None:
    import visattn

    with pytest.raises(ValueError, match="in_chans must be an int >= 1"):
        visattn.create_model("resnet20_cifar", in_chans=in_chans)
