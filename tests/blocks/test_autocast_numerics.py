"""Every registered block under CPU autocast, float16 and bfloat16, at activation scales 1, 100 and
1e4, in train and eval mode, with its default and its identity initialisation: the output is
finite, or (float16 only) the block refuses by name.

Reductions and normalisations run in float32 (the softmax-attention primitive, cc's criss-cross
softmax, external's double normalisation, lambda's lambdas, GSoP's covariance and excitation,
pooled sums), so most blocks are finite everywhere. A block whose own feature map passes float16's
65,504 at scale 1e4 (as a plain convolution's output would) declares it in its registry entry,
``block_info(name).fp16_limit``, and raises ``FloatingPointError`` naming itself instead of
returning a non-finite result. Nothing here is a list of names: which blocks may refuse comes from
the registry, and a declaration that no case needs fails as stale.
"""

from __future__ import annotations

import itertools
import warnings

import pytest
import torch
import torch.nn as nn

import visattn
from visattn.blocks.identity import make_identity
from visattn.blocks.registry import registered_block

SCALES = (1.0, 100.0, 1e4)
DTYPES = {"fp16": torch.float16, "bf16": torch.bfloat16}


def _block(name: str, init: str, train: bool) -> torch.nn.Module | None:
    torch.manual_seed(0)
    blk = visattn.create_block(name, 32)
    if init == "identity":
        try:
            blk = make_identity(blk, name)
        except ValueError:  # an option set that cannot start as the identity says so by name
            return None
    return blk.train(train)


@pytest.mark.parametrize("dtype", sorted(DTYPES))
@pytest.mark.parametrize("name", visattn.list_blocks())
def test_autocast_output_is_finite_or_refused_by_name(name: str, dtype: str) -> None:
    limit = visattn.block_info(name).fp16_limit
    x0 = torch.randn(2, 32, 9, 9, generator=torch.Generator().manual_seed(0))
    refused = []
    for scale, mode, init in itertools.product(SCALES, ("train", "eval"), ("default", "identity")):
        case = (scale, mode, init)
        blk = _block(name, init, mode == "train")
        if blk is None:
            continue
        try:
            with torch.no_grad(), torch.autocast("cpu", dtype=DTYPES[dtype]):
                y = blk(x0 * scale)
        except FloatingPointError as e:
            assert dtype == "fp16" and limit is not None, f"{name} refused {case}: {e}"
            assert scale == max(SCALES), f"{name} refused float16 at an ordinary scale: {case}"
            msg = str(e)
            assert msg.startswith(f"block '{name}': non-finite output in float16"), msg
            assert limit in msg and "bfloat16" in msg, msg
            refused.append(case)
            continue
        assert y.shape == x0.shape
        assert y.dtype in (torch.float32, DTYPES[dtype])
        assert torch.isfinite(y.float()).all(), f"{name} {dtype} {case}: non-finite output"
    if dtype == "fp16" and limit is not None:
        assert refused, f"{name} declares fp16_limit but is finite in every case: a stale entry"


@pytest.mark.parametrize("name", ["mhsa", "halo", "danet", "nonlocal", "cc", "external", "lambda"])
def test_attention_blocks_have_finite_gradients_under_fp16_autocast_at_scale_100(
    name: str,
) -> None:
    blk = visattn.create_block(name, 32).train()
    x = (torch.randn(2, 32, 9, 9) * 100).requires_grad_()
    with torch.autocast("cpu", dtype=torch.float16):
        y = blk(x)
    (y.float() / y.float().abs().amax()).square().sum().backward()
    assert torch.isfinite(x.grad).all()
    for pname, p in blk.named_parameters():
        assert p.grad is None or torch.isfinite(p.grad).all(), pname


# ------------------------------------------------------------- the refusal, on a block of its own

REASON = "its gain of 1e3 sends activations of 100 past 65,504"


class _Gain(nn.Module):
    """``1e3 * conv_1x1(x)`` with an identity weight: overflows float16 from inputs of ~66."""

    def __init__(self, channels: int) -> None:
        super().__init__()
        self.proj = nn.Conv2d(channels, channels, 1, bias=False)
        nn.init.dirac_(self.proj.weight)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.proj(x) * 1e3


@pytest.fixture()
def gain():
    with registered_block("fp16_gain", _Gain, family="spatial", paper="-", fp16_limit=REASON):
        yield visattn.create_block("fp16_gain", 4)


def test_registry_says_which_blocks_limit_fp16(gain) -> None:
    assert visattn.block_info("fp16_gain").fp16_limit == REASON
    assert visattn.block_info("se").fp16_limit is None


def test_fp16_overflow_raises_naming_block_scale_reason_and_remedy(gain) -> None:
    x = torch.full((1, 4, 3, 3), 100.0)
    with torch.autocast("cpu", dtype=torch.float16), pytest.raises(FloatingPointError) as e:
        gain(x)
    msg = str(e.value)
    assert msg.startswith("block 'fp16_gain': non-finite output in float16 from a finite input")
    assert "largest |input| 100" in msg and REASON in msg
    assert "bfloat16" in msg and "float32" in msg
    with pytest.raises(FloatingPointError, match="block 'fp16_gain'"):  # a half model too
        gain.half()(x.half())


def test_fp16_refusal_passes_finite_results_other_dtypes_and_non_finite_inputs(gain) -> None:
    small = torch.full((1, 4, 3, 3), 10.0)
    with torch.autocast("cpu", dtype=torch.float16):
        assert torch.isfinite(gain(small)).all()  # 1e4: ordinary fp16 use is untouched
        nan_in = small.clone()
        nan_in[0, 0, 0, 0] = float("nan")
        assert not torch.isfinite(gain(nan_in)).all()  # NaN in, NaN out: not the block's
    big = torch.full((1, 4, 3, 3), 1e36)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        gain(torch.full((1, 4, 3, 3), 100.0))
    assert not torch.isfinite(gain(big)).all()  # float32 overflow is not float16's limit


def test_fp16_refusal_leaves_fx_torchscript_and_export_graphs_alone(gain) -> None:
    x = torch.randn(1, 4, 3, 3)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # torch.jit.script is deprecated
        scripted = torch.jit.script(gain)
    traced = torch.fx.symbolic_trace(gain)
    exported = torch.export.export(gain, (x,)).module()
    for m in (scripted, traced, exported):
        torch.testing.assert_close(m(x), gain(x))


def test_fp16_limit_must_be_a_reason() -> None:
    reason = pytest.raises(ValueError, match="fp16_limit must be a non-empty reason")
    with reason, registered_block("fp16_gain", _Gain, family="spatial", paper="-", fp16_limit=" "):
        pass


@pytest.mark.parametrize("name", visattn.list_blocks())
def test_every_block_trains_under_cpu_bfloat16_autocast(name: str) -> None:
    """Issue 49 item 4: ``--trainer.precision bf16-mixed`` on CPU: a training-mode forward and
    backward under bfloat16 autocast, finite outputs and gradients for the input and every
    parameter that gets one."""
    torch.manual_seed(0)
    blk = visattn.create_block(name, 32).train()
    x = torch.randn(2, 32, 9, 9, requires_grad=True)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        y = blk(x)
    assert torch.isfinite(y.float()).all()
    (y.float() * torch.randn(y.shape)).sum().backward()
    assert torch.isfinite(x.grad).all()
    assert all(torch.isfinite(p.grad).all() for p in blk.parameters() if p.grad is not None)
