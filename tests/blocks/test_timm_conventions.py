"""timm's constructor conventions on every block (``rd_ratio``, ``rd_channels``, ``rd_divisor``,
``rd_round_fn``, ``act_layer``, ``gate_layer``), ``visattn.timm_attn``, and visattn blocks built
by timm's own models (EfficientNet's ``se_layer``, ByobNet's and ResNet's ``attn_layer``) with the
widths of the models' own attention.

Parametrised over the registry: a new block is covered by being registered."""

from __future__ import annotations

import copy
import io
import math
import pickle
from types import MappingProxyType

import pytest
import timm
import torch
import torch.nn as nn

import visattn
from visattn.blocks import block_info, create_block, is_block, list_blocks
from visattn.blocks.conventions import Reduced
from visattn.blocks.registry import UnknownBlockError, registered_block

REDUCED = [n for n in list_blocks() if block_info(n).reduced is not None]
NOT_REDUCED = [n for n in list_blocks() if block_info(n).reduced is None]
WITH_REDUCTION = [n for n in REDUCED if block_info(n).reduced.reduction is not None]
WITH_ACT = [n for n in list_blocks() if "act_layer" in block_info(n).defaults]
WITHOUT_ACT = [n for n in list_blocks() if "act_layer" not in block_info(n).defaults]
WITH_GATE = [n for n in list_blocks() if "gate_layer" in block_info(n).defaults]
SE = block_info("se").cls


def make_divisible(v: float, divisor: int) -> int:
    """timm's ``make_divisible(v, divisor, round_limit=0)``, written out: the nearest multiple
    of ``divisor`` (halves up), at least ``divisor``."""
    return max(divisor, int(v + divisor / 2) // divisor * divisor)


def shapes(m: nn.Module) -> list[tuple[int, ...]]:
    return [tuple(p.shape) for p in m.parameters()]


def dims(m: nn.Module) -> set[int]:
    return {d for p in m.parameters() for d in p.shape}


def base(name: str, channels: int) -> int:
    info = block_info(name)
    return info.reduced.base_channels(channels, info.defaults)


def test_the_registry_splits_into_blocks_with_and_without_a_reduced_width():
    assert {"se", "cbam", "gc", "bam", "ge", "coord", "gsop", "sk", "nonlocal"} <= set(REDUCED)
    assert {"eca", "simam", "spatial", "triplet", "ese"} <= set(NOT_REDUCED)


# --- rd_ratio, rd_channels, rd_divisor, rd_round_fn ------------------------------------------


@pytest.mark.parametrize("name", WITH_REDUCTION)
def test_rd_ratio_is_the_inverse_of_the_reduction(name):
    c = 128  # every base (C, SK's output, ResNeSt's C * radix) / 4 is an integer above the floors
    torch.manual_seed(0)
    assert shapes(create_block(name, c, rd_ratio=0.25)) == shapes(
        create_block(name, c, reduction=4)
    )


@pytest.mark.parametrize("name", REDUCED)
def test_rd_channels_sets_the_width(name):
    c, w = 144, 40
    block = create_block(name, c, rd_channels=w)
    assert w in dims(block), f"{name}: no parameter has the {w} reduced channels"
    assert shapes(create_block(name, c, rd_channels=w + 8)) != shapes(block)


@pytest.mark.parametrize("name", REDUCED)
def test_rd_divisor_rounds_as_timms_make_divisible(name):
    c, ratio = 144, 0.25
    b = base(name, c)
    expected = make_divisible(b * ratio, 8)
    block = create_block(name, c, rd_ratio=ratio, rd_divisor=8)
    assert shapes(block) == shapes(create_block(name, c, rd_channels=expected))
    # without a divisor rd_ratio rounds to the nearest integer (timm's EfficientNet SE)
    nearest = create_block(name, c, rd_ratio=ratio)
    assert shapes(nearest) == shapes(create_block(name, c, rd_channels=round(b * ratio)))
    if expected != round(b * ratio):
        assert shapes(nearest) != shapes(block)


@pytest.mark.parametrize("name", REDUCED)
def test_rd_round_fn_rounds_the_width(name):
    c = 144
    b = base(name, c)
    up = lambda v: 4 * math.floor(v / 4) + 4  # noqa: E731 (a multiple of bat's 4 groups)
    block = create_block(name, c, rd_ratio=0.25, rd_round_fn=up)
    assert shapes(block) == shapes(create_block(name, c, rd_channels=up(b * 0.25)))
    assert shapes(block) != shapes(create_block(name, c, rd_ratio=0.25))


@pytest.mark.parametrize("name", WITH_REDUCTION)
def test_rd_divisor_alone_rounds_the_blocks_own_reduction(name):
    c = 144
    r = block_info(name).defaults["reduction"]
    expected = make_divisible(base(name, c) / r, 8)
    block = create_block(name, c, rd_divisor=8)
    assert shapes(block) == shapes(create_block(name, c, rd_channels=expected))


def test_se_widths_by_hand():
    assert create_block("se", 144, rd_ratio=0.25).fc1.out_channels == 36
    assert create_block("se", 144, rd_ratio=0.25, rd_divisor=8).fc1.out_channels == 40
    assert create_block("se", 144, rd_channels=12).fc1.out_channels == 12
    assert create_block("se", 144).fc1.out_channels == 9  # its own reduction 16, unchanged
    assert create_block("se", 144, rd_divisor=8).fc1.out_channels == 8
    assert create_block("se", 144, rd_ratio=0.25, rd_channels=36).fc1.out_channels == 36  # agree
    assert create_block("se", 144, rd_ratio=0.25, rd_round_fn=None).fc1.out_channels == 36
    assert create_block("sk", 64, reduction=4, rd_channels=None).rd_channels == 32  # None: unset


# --- refusals ---------------------------------------------------------------------------------


@pytest.mark.parametrize("option", ["rd_ratio", "rd_channels", "rd_divisor"])
@pytest.mark.parametrize("name", NOT_REDUCED)
def test_a_block_without_a_reduced_width_ignores_timms_width_keywords(name, option):
    """timm's rule (its EcaModule takes rd_ratio and uses none of it): accepted, ignored."""
    value = 0.25 if option == "rd_ratio" else 8
    plain, given = create_block(name, 64), create_block(name, 64, **{option: value})
    assert [p.shape for p in plain.parameters()] == [p.shape for p in given.parameters()]


@pytest.mark.parametrize("name", WITH_REDUCTION)
def test_reduction_with_rd_ratio_or_rd_channels_is_refused_naming_both(name):
    with pytest.raises(ValueError, match=rf"block '{name}'.*'reduction'.*'rd_ratio'"):
        create_block(name, 128, reduction=8, rd_ratio=0.25)
    with pytest.raises(ValueError, match=rf"block '{name}'.*'reduction'.*'rd_channels'"):
        create_block(name, 128, reduction=8, rd_channels=16)


@pytest.mark.parametrize("name", REDUCED)
def test_disagreeing_or_clashing_keywords_are_refused_naming_both(name):
    with pytest.raises(ValueError, match=rf"block '{name}'.*'rd_ratio'.*'rd_channels'.*disagree"):
        create_block(name, 128, rd_ratio=0.25, rd_channels=7)
    with pytest.raises(ValueError, match=rf"block '{name}'.*'rd_divisor'.*'rd_round_fn'"):
        create_block(name, 128, rd_ratio=0.25, rd_divisor=8, rd_round_fn=round)
    with pytest.raises(ValueError, match=rf"block '{name}'.*'rd_channels'=12.*'rd_divisor'=8"):
        create_block(name, 128, rd_channels=12, rd_divisor=8)
    with pytest.raises(ValueError, match=rf"block '{name}'.*leave 0 channels"):
        create_block(name, 128, rd_ratio=0.001)
    with pytest.raises(ValueError, match=rf"block '{name}'.*'rd_ratio' must be a positive"):
        create_block(name, 128, rd_ratio=-0.25)


def test_a_blocks_own_width_option_clashes_with_timms():
    with pytest.raises(ValueError, match=r"'inner_channels' or 'rd_ratio'"):
        create_block("nonlocal", 64, inner_channels=16, rd_ratio=0.25)
    with pytest.raises(ValueError, match=r"'divisor' or 'rd_divisor'"):
        create_block("coord", 64, divisor=8, rd_divisor=8)


@pytest.mark.parametrize("name", WITHOUT_ACT)
def test_a_block_without_an_activation_ignores_the_keywords_timms_hooks_pass(name):
    """EfficientNet passes act_layer, RegNet rd_ratio, others gate_layer/norm_layer/bias: a block
    without the option ignores it, as timm's modules do; a misspelt option is still refused."""
    plain = create_block(name, 64)
    given = create_block(name, 64, act_layer=nn.SiLU)
    assert [p.shape for p in plain.parameters()] == [p.shape for p in given.parameters()]
    assert [type(m) for m in plain.modules()] == [type(m) for m in given.modules()]
    with pytest.raises(TypeError, match=rf"block '{name}': unknown option 'act_layr'"):
        create_block(name, 64, act_layr=nn.SiLU)


# --- act_layer and gate_layer -----------------------------------------------------------------


def _has(m: nn.Module, kind: type[nn.Module]) -> bool:
    return any(isinstance(x, kind) for x in m.modules())


@pytest.mark.parametrize("layer", [nn.Mish, "mish"], ids=["class", "timm name"])
@pytest.mark.parametrize("name", WITH_ACT)
def test_act_layer_as_class_or_name_changes_the_activation(name, layer):
    c = 64
    assert not _has(create_block(name, c), nn.Mish)
    assert _has(create_block(name, c, act_layer=layer), nn.Mish)


@pytest.mark.parametrize("layer", [nn.Hardsigmoid, "hard_sigmoid"], ids=["class", "name"])
@pytest.mark.parametrize("name", WITH_GATE)
def test_gate_layer_as_class_or_name_changes_the_gate(name, layer):
    c = 64
    assert not _has(create_block(name, c), nn.Hardsigmoid)
    assert _has(create_block(name, c, gate_layer=layer), nn.Hardsigmoid)


def test_an_unknown_layer_name_is_refused_with_a_close_match():
    with pytest.raises(ValueError, match=r"block 'se'.*'act_layer'.*'rleu'.*did you mean 'relu'"):
        create_block("se", 64, act_layer="rleu")


# --- a new block: declared as data --------------------------------------------------------------


class _Hidden(nn.Module):
    def __init__(self, channels: int, hidden: int = 4, act_layer: str = "relu") -> None:
        super().__init__()
        self.fc = nn.Conv2d(channels, hidden, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x


def test_a_new_block_declares_its_width_option_as_data():
    with registered_block(
        "tc_hidden", _Hidden, family="channel", paper="test", reduced=Reduced(None, width="hidden")
    ):
        assert create_block("tc_hidden", 64, rd_ratio=0.25).fc.out_channels == 16
        assert create_block("tc_hidden", 64, rd_ratio=0.35, rd_divisor=8).fc.out_channels == 24
    no_spec = registered_block("tc_hidden", _Hidden, family="channel", paper="test")
    with no_spec:  # without the declaration timm's width is not the block's: ignored
        assert create_block("tc_hidden", 64, rd_ratio=0.25).fc.out_channels == 4
    bad = registered_block("tc_bad", _Hidden, family="channel", paper="t", reduced=Reduced())
    with pytest.raises(TypeError, match=r"block 'tc_bad'.*no option 'reduction'"), bad:
        pass  # pragma: no cover
    assert "tc_bad" not in list_blocks()


# --- timm's models --------------------------------------------------------------------------------


def _attn_shapes(model: nn.Module, part: str) -> list[tuple[int, ...]]:
    return [tuple(p.shape) for n, p in model.named_parameters() if part in n]


def _forward_backward(model: nn.Module) -> None:
    model.train()
    out = model(torch.randn(2, 3, 64, 64))
    out.sum().backward()
    assert out.shape == (2, 1000) and torch.isfinite(out).all()


def _copy_by_order(src: nn.Module, dst: nn.Module) -> None:
    a, b = src.state_dict(), dst.state_dict()
    assert [v.shape for v in a.values()] == [v.shape for v in b.values()]
    dst.load_state_dict(dict(zip(b, a.values(), strict=True)))


def test_efficientnet_se_layer_keeps_the_models_widths_and_function():
    torch.manual_seed(0)
    ref = timm.create_model("efficientnet_b0")
    ours = timm.create_model("efficientnet_b0", se_layer=SE)
    assert sum(isinstance(m, SE) for m in ours.modules()) == 16
    assert _attn_shapes(ours, ".se.") == _attn_shapes(ref, ".se.")
    assert all(isinstance(m.act, nn.SiLU) for m in ours.modules() if isinstance(m, SE))
    _copy_by_order(ref, ours)
    x = torch.randn(2, 3, 64, 64)
    with torch.no_grad():
        torch.testing.assert_close(ours.eval()(x), ref.eval()(x), rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("name", ["cbam", "gc"])
def test_efficientnet_with_other_blocks_keeps_the_se_ratio(name):
    model = timm.create_model("efficientnet_b0", se_layer=block_info(name).cls)
    blocks = [m for m in model.modules() if is_block(m)]
    ref = [m.se for m in timm.create_model("efficientnet_b0").modules() if hasattr(m, "se")]
    assert len(blocks) == len(ref) == 16
    for ours, theirs in zip(blocks, ref, strict=True):
        assert theirs.conv_reduce.out_channels in dims(ours)
    _forward_backward(model)


def test_efficientnet_falls_back_to_the_blocks_own_form_without_a_reduced_width():
    model = timm.create_model("efficientnet_b0", se_layer=block_info("ela").cls)
    assert sum(is_block(m) for m in model.modules()) == 16  # rd_ratio ignored: ela's own form


def test_regnetz_attn_layer_keeps_the_models_widths():
    ref = timm.create_model("regnetz_b16")
    bound = timm.create_model("regnetz_b16", attn_layer=visattn.timm_attn("se"))
    assert _attn_shapes(bound, ".attn.") == _attn_shapes(ref, ".attn.")
    # the bare class rounds rd_ratio=0.25 to the nearest integer: SEModule with rd_divisor=1
    bare = timm.create_model("regnetz_b16", attn_layer=SE)
    nearest = timm.create_model("regnetz_b16", attn_kwargs=dict(rd_ratio=0.25, rd_divisor=1))
    assert _attn_shapes(bare, ".attn.") == _attn_shapes(nearest, ".attn.")
    assert _attn_shapes(bare, ".attn.") != _attn_shapes(ref, ".attn.")  # 144 -> 36, not 40
    _forward_backward(timm.create_model("regnetz_b16", attn_layer=visattn.timm_attn("cbam")))


def test_resnet_attn_layer_matches_timms_seresnet():
    torch.manual_seed(0)
    ref = timm.create_model("seresnet50")
    ours = timm.create_model("resnet50", block_args=dict(attn_layer=SE))
    assert _attn_shapes(ours, ".se.") == _attn_shapes(ref, ".se.")
    _copy_by_order(ref, ours)
    x = torch.randn(2, 3, 64, 64)
    with torch.no_grad():
        torch.testing.assert_close(ours.eval()(x), ref.eval()(x), rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize(
    ("arch", "name", "options"),
    [("resnet50", "gsop", {}), ("resnet18", "cbam", {"reduction": 8}), ("resnet18", "eca", {})],
)
def test_timm_attn_inside_timms_resnet(arch, name, options):
    cls = visattn.timm_attn(name, **options)
    model = timm.create_model(arch, block_args=dict(attn_layer=cls))
    blocks = [m for m in model.modules() if isinstance(m, cls)]
    assert len(blocks) == (16 if arch == "resnet50" else 8)
    assert all(is_block(b) and isinstance(b, block_info(name).cls) for b in blocks)
    if "reduction" in options:
        assert blocks[0].channel.fc1.out_channels == blocks[0].channel.fc1.in_channels // 8
    _forward_backward(model)


# --- timm_attn ------------------------------------------------------------------------------------


def test_timm_attn_binds_options_and_the_callers_override():
    cls = visattn.timm_attn("se", reduction=4)
    assert cls is visattn.timm_attn("se", reduction=4)
    assert cls is not visattn.timm_attn("se", reduction=8)
    assert cls(64).fc1.out_channels == 16
    assert cls(64, reduction=2).fc1.out_channels == 32
    assert cls(64, rd_ratio=0.125).fc1.out_channels == 8  # timm's ratio replaces the bound one
    assert visattn.timm_attn("se", act_layer="silu")(64).act.__class__ is nn.SiLU


def test_timm_attn_takes_the_divisor_of_timms_module_of_that_name():
    from timm.layers import SEModule

    for c in (72, 144, 200):
        ours = visattn.timm_attn("se")(c)
        assert ours.fc1.out_channels == SEModule(c).fc1.out_channels == make_divisible(c / 16, 8)
    from timm.layers.coord_attn import CoordAttn

    for c in (72, 200):  # coord rounds with its own option 'divisor'
        assert visattn.timm_attn("coord")(c).conv1.out_channels == CoordAttn(c).conv1.out_channels
    assert visattn.timm_attn("gsop").bound_options == {}  # timm has no 'gsop'


def test_timm_attn_of_an_alias_is_its_block_with_the_aliases_options():
    cls = visattn.timm_attn("gca")
    block = cls(64)
    assert isinstance(block, block_info("gc").cls) and block.fc1.out_channels == 8


def test_timm_attn_classes_pickle_and_copy():
    model = timm.create_model("resnet18", block_args=dict(attn_layer=visattn.timm_attn("gsop")))
    buf = io.BytesIO()
    torch.save(model, buf)
    buf.seek(0)
    back = torch.load(buf, weights_only=False)
    assert type(back.layer1[0].se) is visattn.timm_attn("gsop")
    assert pickle.loads(pickle.dumps(visattn.timm_attn("se", reduction=4))) is visattn.timm_attn(
        "se", reduction=4
    )
    assert type(copy.deepcopy(model).layer1[0].se) is visattn.timm_attn("gsop")


def test_timm_attn_unknown_name_or_option():
    with pytest.raises(UnknownBlockError, match=r"unknown block 'gsopp'; did you mean 'gsop'"):
        visattn.timm_attn("gsopp")
    with pytest.raises(TypeError, match=r"block 'se': unknown option 'reductoin'.*'reduction'"):
        visattn.timm_attn("se", reductoin=4)
    assert visattn.timm_attn("eca", rd_ratio=0.25)(64).conv.kernel_size == (3,)  # ignored
    with pytest.raises(TypeError, match=r"block 'eca': unknown option 'rd_ration'"):
        visattn.timm_attn("eca", rd_ration=0.25)


class _Doubler(nn.Module):
    def __init__(self, channels: int, scale: float = 2.0) -> None:
        super().__init__()
        self.scale = scale

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * self.scale


class _Halver(_Doubler):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x / self.scale


def test_bound_classes_follow_a_block_registered_again_under_the_same_name(monkeypatch):
    """``timm_attn`` and an alias's ``cls`` are cached per name; after another class is
    registered under the block's name, both build the new class, not the cached old one."""
    from visattn.blocks import aliases, registry
    from visattn.blocks.aliases import BlockAlias

    alias = BlockAlias("test_half", "test_scale", MappingProxyType({"scale": 4.0}), "none")
    monkeypatch.setattr(registry, "TIMM_ALIASES", {**aliases.TIMM_ALIASES, alias.name: alias})
    x = torch.ones(1, 4, 2, 2)
    with registered_block("test_scale", _Doubler, family="channel", paper="test"):
        first, first_alias = visattn.timm_attn("test_scale"), block_info("test_half").cls
        assert first is visattn.timm_attn("test_scale")  # cached
        assert first_alias is block_info("test_half").cls
        assert first(4)(x).max() == 2.0 and first_alias(4)(x).max() == 4.0  # scale 4 bound
    with registered_block("test_scale", _Halver, family="channel", paper="test"):
        again, again_alias = visattn.timm_attn("test_scale"), block_info("test_half").cls
        assert again is not first and again_alias is not first_alias
        assert isinstance(again(4), _Halver) and isinstance(again_alias(4), _Halver)
        assert again(4)(x).max() == 0.5 and again_alias(4)(x).max() == 0.25
