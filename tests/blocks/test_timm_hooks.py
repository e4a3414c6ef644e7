"""Every block through timm's own hooks (issue: every keyword timm passes): ResNet's
``block_args=dict(attn_layer=...)``, EfficientNet's and MobileNetV3's ``se_layer=...`` and
RegNetZ's ``attn_layer=...`` pass ``act_layer``, ``rd_ratio`` and more to the block; a block
takes those it has and ignores the rest, as timm's own modules do, and the model runs. Blocks
that cannot sit in a hook (they replace a conv and may change the shape) are listed in
:data:`CANNOT_FIT` and in the blocks guide."""

from __future__ import annotations

import pytest
import timm
import torch
from helpers.tiers import tiered
from timm.models._efficientnet_builder import decode_arch_def
from timm.models.mobilenetv3 import MobileNetV3

import visattn
from visattn import block_info, list_blocks

#: the representative blocks of the default run; the rest of the matrix is ``heavy``
KEEP = {"se", "eca", "cbam", "gsop", "simam", "nonlocal", "coord", "gc"}
#: blocks that replace a conv or change the channel count: not for an attention hook
CANNOT_FIT = sorted(n for n in list_blocks() if block_info(n).replaces_conv)

MOBILENET_ARCH = [
    ["ds_r1_k3_s2_e1_c16_se0.25_nre"],
    ["ir_r1_k3_s2_e4.5_c24_se0.25"],
    ["ir_r1_k5_s2_e4_c40_se0.25"],
]
HOOKS = {
    "resnet18": lambda cls: timm.create_model(
        "resnet18", num_classes=10, block_args=dict(attn_layer=cls)
    ),
    "efficientnet_b0": lambda cls: timm.create_model(
        "efficientnet_b0", num_classes=10, se_layer=cls
    ),
    # timm's mobilenetv3_* functions fix their own SE; the class takes se_layer (a small
    # MobileNetV3-Small-like layout, SE in every block as timm's builder passes it)
    "mobilenetv3": lambda cls: MobileNetV3(
        decode_arch_def(MOBILENET_ARCH),
        num_classes=10,
        se_layer=cls,
    ),
    # RegNet's attention hook lives in timm's RegNetZ (a ByobNet): attn_layer
    "regnetz_b16": lambda cls: timm.create_model("regnetz_b16", num_classes=10, attn_layer=cls),
}
FITS = [n for n in list_blocks() if n not in CANNOT_FIT]
#: fca needs as many channels as frequencies (16 by default); the test models' narrowest SE
#: sites have 8, so fca is given 8 there (the blocks guide says so)
NARROW = {"fca": {"freq_sel": "top8"}}
#: timm's EfficientNet and MobileNetV3 initialise weights with _init_weight_goog, which zeroes
#: every nn.Linear's bias without checking it has one; fca's MLP is the authors' bias-free Linear
TIMM_INIT_NEEDS_LINEAR_BIAS = {"efficientnet_b0", "mobilenetv3"}


@pytest.mark.parametrize("family", sorted(TIMM_INIT_NEEDS_LINEAR_BIAS))
def test_fca_in_efficientnets_fails_in_timms_init_as_the_guide_says(family: str) -> None:
    with pytest.raises(AttributeError, match="zero_"):
        HOOKS[family](visattn.timm_attn("fca", freq_sel="top8"))


@pytest.mark.parametrize("family", list(HOOKS))
@pytest.mark.parametrize("name", tiered(FITS, keep=KEEP))
def test_every_block_runs_in_timms_attention_hooks(name: str, family: str) -> None:
    if name == "fca" and family in TIMM_INIT_NEEDS_LINEAR_BIAS:
        pytest.skip("timm's EfficientNet init zeroes every nn.Linear's bias; fca has none")
    torch.manual_seed(0)
    model = HOOKS[family](visattn.timm_attn(name, **NARROW.get(name, {})))
    assert any(visattn.blocks.is_block(m) for m in model.modules())
    out = model.eval()(torch.randn(1, 3, 64, 64))
    assert out.shape == (1, 10) and torch.isfinite(out).all()


def test_efficientnet_with_eca_is_the_call_that_used_to_fail() -> None:
    """``se_layer=timm_attn("eca")``: EfficientNet passes act_layer (and its probe rd_ratio),
    which ECA does not have: ignored, 16 ECA modules built."""
    model = timm.create_model("efficientnet_b0", se_layer=visattn.timm_attn("eca"))
    assert sum(type(m).__name__ == "ECA" or visattn.blocks.is_block(m) for m in model.modules())
    assert sum(visattn.blocks.is_block(m) for m in model.modules()) == 16


def test_the_keywords_timm_passes_are_ignored_by_a_block_without_them() -> None:
    plain = visattn.create_block("simam", 64)
    given = visattn.create_block(
        "simam", 64, act_layer="silu", gate_layer="sigmoid", norm_layer=None, bias=False,
        rd_ratio=0.25, rd_divisor=8,
    )  # fmt: skip
    assert repr(plain) == repr(given)


def test_cannot_fit_blocks_are_the_conv_replacing_ones() -> None:
    assert "acmix" in CANNOT_FIT and "se" not in CANNOT_FIT
