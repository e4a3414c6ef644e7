"""timm's attention strings as visattn aliases: each builds the visattn block that computes the
function of the module timm's ``create_attn`` builds for the same string.

For each alias, timm's module is built from the string with timm's own defaults, every floating
tensor of it (BN statistics included) is randomised and copied into ``create_block(alias, C)``,
and both run on the same input in train and then eval mode (float32). The copy maps tensors by
order (same shapes required, so the reduced widths are checked too) or, for ``nl``, by name.
"""

from __future__ import annotations

import inspect
import pickle
import re

import pytest
import torch
import torch.nn as nn
from helpers.reference import TIMM_NONLOCAL_NAMES
from helpers.weights import randomize
from timm.layers.create_attn import get_attn

import visattn
from visattn.blocks.aliases import TIMM_ALIASES

ALIASES = ("ecam", "ceca", "gca", "lcbam", "scoord", "bottleneck", "nl")
SIZE = (14, 14)


def timm_module(alias: str, channels: int) -> nn.Module:
    if alias == "bottleneck":  # timm's BottleneckAttn needs the feature size
        return get_attn(alias)(channels, feat_size=SIZE)
    return get_attn(alias)(channels)


def floats(m: nn.Module) -> dict[str, torch.Tensor]:
    return {k: v for k, v in m.state_dict(keep_vars=True).items() if v.is_floating_point()}


@torch.no_grad()
def copy_timm_into_ours(alias: str, theirs: nn.Module, ours: nn.Module) -> None:
    src, dst = floats(theirs), floats(ours)
    if alias == "nl":
        names = {**TIMM_NONLOCAL_NAMES, "z.bias": "w_z.bias"}  # nl keeps timm's W_z bias
        assert sorted(names.values()) == sorted(dst) and sorted(names) == sorted(src)
        for k, v in names.items():
            dst[v].copy_(src[k])
        return
    # same sizes in the same order (timm's LayerNorm2d weight is (C,), visattn's (C, 1, 1))
    if alias == "bottleneck":  # visattn registers the relative tables before the projection
        src = {k: src[k] for k in ("pos_embed.height_rel", "pos_embed.width_rel", "qkv.weight")}
    assert [t.numel() for t in src.values()] == [t.numel() for t in dst.values()], (
        {k: tuple(t.shape) for k, t in src.items()},
        {k: tuple(t.shape) for k, t in dst.items()},
    )
    for s, d in zip(src.values(), dst.values()):
        d.copy_(s.reshape(d.shape))


def run_both(ours: nn.Module, theirs: nn.Module, x: torch.Tensor, train: bool):
    ours.train(train)
    theirs.train(train)
    with torch.no_grad():
        return ours(x), theirs(x)


#: every multiple of 8 up to 1024 and widths that are not, where timm's rounding shows
WIDTHS = (*range(8, 1025, 8), 3, 6, 12, 20, 36, 72, 100, 120, 200, 1000)
#: BoTNet's q/k depth: timm rounds it up to a multiple of 8, visattn keeps C / heads
ODD_WIDTHS_DIFFER = {"bottleneck"}


def n_params(m: nn.Module) -> int:
    return sum(p.numel() for p in m.parameters())


@pytest.mark.parametrize("alias", ALIASES)
def test_alias_has_timms_parameter_count_at_every_width(alias: str) -> None:
    """D3: the width rules are timm's (``make_divisible`` with its round limit, ECA's kernel of
    at least 3), not ``C // reduction``."""
    differ = []
    for c in WIDTHS:
        if alias in ODD_WIDTHS_DIFFER and c % 8:
            continue
        if n_params(visattn.create_block(alias, c)) != n_params(timm_module(alias, c)):
            differ.append(c)
    assert not differ, f"{alias}: parameter counts differ from timm's at C = {differ}"


@pytest.mark.parametrize("channels", [64, 256, 24, 120, 200])
@pytest.mark.parametrize("alias", ALIASES)
def test_alias_equals_timms_module_with_copied_weights(alias: str, channels: int) -> None:
    theirs = timm_module(alias, channels)
    ours = visattn.create_block(alias, channels)
    randomize(theirs, 0)
    copy_timm_into_ours(alias, theirs, ours)
    x = torch.randn(3, channels, *SIZE, generator=torch.Generator().manual_seed(1))
    for train in (True, False):
        y_ours, y_theirs = run_both(ours, theirs, x, train)
        assert (y_theirs - x).abs().max() > 1e-2, "the check needs a module that changes x"
        # float32 rounding, relative to the output's scale (train-mode BN with random weights
        # reaches |y| ~ 10)
        tol = 1e-5 * max(1.0, y_theirs.abs().max().item())
        torch.testing.assert_close(y_ours, y_theirs, rtol=1e-5, atol=tol, msg=f"train={train}")


def test_the_aliases_differ_from_their_blocks_defaults() -> None:
    """Each alias is a real variant: with the same weights its block's defaults compute another
    function (so the equality above is not that of the plain block)."""
    x = torch.randn(2, 64, *SIZE, generator=torch.Generator().manual_seed(3))
    for alias in ALIASES:
        info = visattn.block_info(alias)
        theirs = timm_module(alias, 64)
        randomize(theirs, 0)
        ours = visattn.create_block(alias, 64)
        copy_timm_into_ours(alias, theirs, ours)
        plain = visattn.create_block(info.alias_of, 64)
        same_shapes = [t.shape for t in floats(plain).values()] == [
            t.shape for t in floats(ours).values()
        ]
        if same_shapes:
            plain.load_state_dict(ours.state_dict())
            y_alias, y_plain = run_both(ours, plain, x, train=False)
            assert (y_alias - y_plain).abs().max() > 1e-4, alias
        # else: the options change the block's tensors (widths, biases), so it differs anyway


def test_every_timm_attention_string_is_a_block_or_an_alias() -> None:
    """The strings are read from timm's ``get_attn`` itself, so a string timm adds shows up."""
    strings = set(re.findall(r"attn_type == '(\w+)'", inspect.getsource(get_attn)))
    assert len(strings) >= 21
    blocks = set(visattn.list_blocks())
    for s in strings:
        assert s in blocks or s in TIMM_ALIASES, f"timm's {s!r} is neither a block nor an alias"
    assert set(ALIASES) == set(TIMM_ALIASES) == strings - blocks


def test_list_blocks_keeps_the_canonical_names_and_block_info_explains_the_alias() -> None:
    names = visattn.list_blocks()
    assert not set(TIMM_ALIASES) & set(names)
    for alias in ALIASES:
        info = visattn.block_info(alias)
        base = visattn.block_info(info.alias_of)
        assert info.name == alias and info.alias_of in names and base.alias_of is None
        assert issubclass(info.cls, base.cls) and info.family == base.family
        assert info.cls.bound_options == info.alias_args and info.cls is not base.cls
        assert info.defaults == {**base.defaults, **info.alias_args}
        assert info.alias_args == dict(TIMM_ALIASES[alias].args) and info.alias_notes
        assert "timm" in info.paper
    assert visattn.block_info("nl").alias_args["scale_by"] == "channels"
    assert visattn.block_info("gca").defaults["fusion"] == "add"


@pytest.mark.parametrize("channels", [64, 128, 256])
def test_nl_has_timms_parameters_and_takes_timms_keywords(channels: int) -> None:
    """The same parameter count as timm's NonLocalAttn (W_z's bias included: 2,264 at C=64),
    and timm's own call conventions work (they raised 'give either inner_channels or
    reduction')."""
    theirs = sum(p.numel() for p in timm_module("nl", channels).parameters())
    ours = visattn.create_block("nl", channels)
    assert sum(p.numel() for p in ours.parameters()) == theirs
    assert sum(p.numel() for p in visattn.create_block("nl", 64).parameters()) == 2264
    via_hook = visattn.timm_attn("nl")(channels)
    assert sum(p.numel() for p in via_hook.parameters()) == theirs
    assert visattn.create_block("nl", channels, rd_divisor=8).inner_channels == channels // 8


@pytest.mark.parametrize("alias", ALIASES)
def test_the_alias_class_builds_what_create_block_builds(alias: str) -> None:
    """``block_info(alias).cls`` is the alias (it built the plain block before), the same class
    on every lookup, and its instances pickle as the alias."""
    info = visattn.block_info(alias)
    made, built = visattn.create_block(alias, 64), info.cls(64)
    assert type(made) is type(built) is visattn.block_info(alias).cls
    assert {k: v.shape for k, v in made.state_dict().items()} == {
        k: v.shape for k, v in built.state_dict().items()
    }
    x = torch.randn(2, 64, *SIZE, generator=torch.Generator().manual_seed(0))
    built.load_state_dict(made.state_dict())
    torch.testing.assert_close(*run_both(made, built, x, train=False), rtol=0, atol=0)
    again = pickle.loads(pickle.dumps(made))
    assert type(again) is type(made)
    torch.testing.assert_close(*run_both(made, again, x, train=False), rtol=0, atol=0)


def test_caller_options_override_the_alias_options() -> None:
    blk = visattn.create_block("gca", 64, reduction=16)
    assert blk.fc1.out_channels == 4 and blk.norm.eps == 1e-6
    blk = visattn.create_block("lcbam", 64, mlp_bias=True)
    assert blk.channel.fc1.bias is not None and blk.channel.light


def test_aliases_work_in_placements_and_identity_init() -> None:
    x = torch.randn(2, 3, 32, 32)
    for alias in ("ecam", "lcbam", "nl", "gca"):
        model = visattn.create_model(
            "resnet20_cifar", attention={"name": alias, "stages": [3], "init": "identity"}
        ).eval()
        plain = visattn.create_model("resnet20_cifar").eval()
        plain.load_state_dict(model.state_dict(), strict=False)
        assert model.attention_paths
        with torch.no_grad():
            torch.testing.assert_close(model(x), plain(x), rtol=1e-5, atol=1e-5)
    model = visattn.create_model(
        "resnet50",
        num_classes=10,
        attention={"name": "bottleneck", "position": "conv", "stages": [4], "blocks": [1, 2]},
    )
    assert isinstance(model.layer4[1].conv2, visattn.block_info("mhsa").cls)
    assert model.layer4[1].conv2.scale_pos is False


def test_unknown_names_still_get_close_matches_aliases_included() -> None:
    with pytest.raises(KeyError, match=r"did you mean.*'ecam'"):
        visattn.create_block("ecma", 64)
    with pytest.raises(KeyError, match=r"did you mean.*'lcbam'"):
        visattn.block_info("lcbm")
