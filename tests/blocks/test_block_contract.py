"""Behaviour every registered block must have; parametrized over the registry, so a block is
covered the moment it is registered."""

from __future__ import annotations

import inspect
import re

import pytest
import timm
import torch
import torch.nn as nn
from helpers.tiers import REPRESENTATIVE_BLOCKS, tiered

import visattn
from visattn.blocks import capture as capture_module
from visattn.blocks import registry

BLOCKS = visattn.list_blocks()
CHANNELS = (32, 72)  # 72: not divisible by the usual reduction 16
SIZES = ((7, 7), (15, 15), (8, 13), (1, 1))


def make(name: str, channels: int = 32, **kwargs) -> nn.Module:
    return visattn.create_block(name, channels, **kwargs)


def randn(channels: int, size: tuple[int, int], n: int = 2, **kw) -> torch.Tensor:
    return torch.randn(n, channels, *size, **kw)


# --------------------------------------------------------------------------- forward contract


@pytest.mark.parametrize("size", SIZES, ids=lambda s: f"{s[0]}x{s[1]}")
@pytest.mark.parametrize("channels", CHANNELS)
@pytest.mark.parametrize("name", BLOCKS)
def test_output_keeps_shape_dtype_and_device(name: str, channels: int, size) -> None:
    blk = make(name, channels)
    x = randn(channels, size)
    for mode in (True, False):
        y = blk.train(mode)(x)
        assert y.shape == x.shape and y.dtype == x.dtype and y.device == x.device
        assert torch.isfinite(y).all()


@pytest.mark.parametrize("name", BLOCKS)
def test_float64_block_keeps_float64(name: str) -> None:
    blk = make(name, 32, dtype=torch.float64)
    assert all(p.dtype == torch.float64 for p in blk.parameters())
    y = blk(randn(32, (9, 9), dtype=torch.float64))
    assert y.dtype == torch.float64


@pytest.mark.parametrize("name", BLOCKS)
def test_backward_gives_finite_gradient_to_every_parameter(name: str) -> None:
    blk = make(name, 32).train()
    x = randn(32, (9, 11)).requires_grad_()
    (blk(x) * torch.randn(2, 32, 9, 11)).sum().backward()
    assert x.grad is not None and torch.isfinite(x.grad).all()
    for pname, p in blk.named_parameters():
        assert p.grad is not None, f"{name}: parameter {pname} got no gradient"
        assert torch.isfinite(p.grad).all(), f"{name}: parameter {pname} has non-finite grad"


@pytest.mark.parametrize("name", BLOCKS)
def test_eval_mode_is_deterministic(name: str) -> None:
    blk = make(name, 32).eval()
    x = randn(32, (9, 9))
    with torch.no_grad():
        torch.testing.assert_close(blk(x), blk(x), rtol=0, atol=0)


@pytest.mark.parametrize("name", BLOCKS)
def test_channels_last_input_matches_contiguous(name: str) -> None:
    blk = make(name, 32).eval()
    x = randn(32, (10, 7))
    with torch.no_grad():
        ref = blk(x)
        out = blk(x.to(memory_format=torch.channels_last))
        out_cl_block = blk.to(memory_format=torch.channels_last)(
            x.to(memory_format=torch.channels_last)
        )
    torch.testing.assert_close(out, ref, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(out_cl_block, ref, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("name", BLOCKS)
def test_bfloat16_cpu_autocast_runs_with_finite_output(name: str) -> None:
    blk = make(name, 32).eval()
    x = randn(32, (9, 9))
    with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):
        y = blk(x)
    assert y.shape == x.shape
    assert y.dtype in (torch.float32, torch.bfloat16)
    assert torch.isfinite(y.float()).all()
    # loose agreement with float32: autocast changes precision, not the function
    with torch.no_grad():
        ref = blk(x)
    assert (y.float() - ref).abs().max() <= 0.1 * ref.abs().max() + 0.1


# --------------------------------------------------------------------------- documentation


@pytest.mark.parametrize("name", BLOCKS)
def test_docstring_cites_paper_and_states_parameter_closed_form(name: str) -> None:
    info = visattn.block_info(name)
    doc = inspect.getdoc(info.cls) or ""
    module_doc = inspect.getmodule(info.cls).__doc__ or ""
    assert re.search(r"(19|20)\d\d", doc + module_doc), f"{name}: docstring cites no year"
    assert re.search(r"^Parameters", doc, re.M), f"{name}: no 'Parameters ...' closed form"
    assert re.search(r"(19|20)\d\d", info.paper)


@pytest.mark.parametrize("name", BLOCKS)
def test_block_has_trainable_parameters_without_sharing(name: str) -> None:
    blk = make(name, 32)
    named = list(blk.named_parameters())
    if not named:  # a parameter-free block (SimAM) must say so in its closed form
        doc = inspect.getdoc(visattn.block_info(name).cls) or ""
        assert re.search(r"^Parameters: 0\b", doc, re.M), f"{name} has no parameters"
        return
    assert len({id(p) for _, p in named}) == len(named)
    assert all(p.requires_grad for _, p in named)


# --------------------------------------------------------------------------- attention maps


@pytest.mark.parametrize("name", BLOCKS)
def test_capture_attention_gives_one_map_per_block(name: str) -> None:
    c, (h, w) = 32, (10, 7)
    model = nn.Sequential(make(name, c), nn.Identity(), make(name, c)).eval()
    x = randn(c, (h, w), n=3)
    with visattn.capture_attention(model) as maps:
        model(x)
        assert sorted(maps) == ["0", "2"]
        for m in maps.values():
            assert m.ndim == 4 and m.shape[0] == 3, m.shape
            assert m.shape[1] in (1, c), m.shape
            assert m.shape[2] in (1, h) and m.shape[3] in (1, w), m.shape
            assert not m.requires_grad and torch.isfinite(m).all()
    # the maps are read after the context, as users write it; the hooks are gone
    assert sorted(maps) == ["0", "2"]
    assert not any(capture_module.is_capturing(m) for m in model)


@pytest.mark.parametrize("name", BLOCKS)
def test_block_records_attention_exactly_once_per_forward(name: str) -> None:
    blk = make(name, 32).eval()
    calls = []
    blk.__dict__[capture_module._SINK] = (calls.append,)
    try:
        blk(randn(32, (9, 9)))
    finally:
        blk.__dict__.pop(capture_module._SINK)
    assert len(calls) == 1


# --------------------------------------------------------------------------- export / compile


@pytest.mark.parametrize("name", BLOCKS)
def test_torch_export_matches_eager(name: str) -> None:
    blk = make(name, 32).eval()
    x = randn(32, (9, 11))
    ep = torch.export.export(blk, (x,))
    with torch.no_grad():
        torch.testing.assert_close(ep.module()(x), blk(x), rtol=1e-5, atol=1e-5)


# 45 s over every block on 2 cores: the representatives by default, the rest in the heavy tier
# (torch.export of every block, below, runs by default)
@pytest.mark.parametrize("name", tiered(BLOCKS, keep=REPRESENTATIVE_BLOCKS))
def test_torch_compile_fullgraph_traces_without_graph_breaks(name: str) -> None:
    """Dynamo capture + AOT autograd (backend ``aot_eager``): no graph break, same values,
    gradients flow. The inductor code generation is checked in the slow test below."""
    torch._dynamo.reset()
    blk = make(name, 32).train()
    compiled = torch.compile(blk, fullgraph=True, backend="aot_eager")
    x = randn(32, (9, 11)).requires_grad_()  # so a parameter-free block (SimAM) has a backward
    y = compiled(x)
    torch.testing.assert_close(y, blk(x), rtol=1e-5, atol=1e-5)
    y.sum().backward()
    assert x.grad is not None and torch.isfinite(x.grad).all()


@pytest.mark.heavy
def test_torch_compile_inductor_fullgraph_every_block() -> None:
    x = randn(32, (9, 11))
    for name in BLOCKS:
        torch._dynamo.reset()
        blk = make(name, 32).eval()
        compiled = torch.compile(blk, fullgraph=True)
        with torch.no_grad():
            torch.testing.assert_close(compiled(x), blk(x), rtol=1e-4, atol=1e-4, msg=name)


# --------------------------------------------------------------------------- timm


@pytest.mark.parametrize("name", BLOCKS)
def test_block_works_as_timm_attn_layer(name: str) -> None:
    cls = visattn.block_info(name).cls
    model = timm.create_model("resnet18", num_classes=5, block_args=dict(attn_layer=cls)).eval()
    assert sum(isinstance(m, cls) for m in model.modules()) == 8  # one per BasicBlock
    with torch.no_grad():
        y = model(torch.randn(1, 3, 64, 64))
    assert y.shape == (1, 5) and torch.isfinite(y).all()


# --------------------------------------------------------------------------- registry


def test_list_blocks_is_sorted_and_filters_by_family() -> None:
    assert sorted(BLOCKS) == BLOCKS and len(BLOCKS) == len(set(BLOCKS))
    union = []
    for family in registry.FAMILIES:
        names = visattn.list_blocks(family=family)
        assert names == sorted(names)
        assert all(visattn.block_info(n).family == family for n in names)
        union += names
    assert sorted(union) == BLOCKS
    with pytest.raises(ValueError, match="family"):
        visattn.list_blocks(family="temporal")


@pytest.mark.parametrize("name", BLOCKS)
def test_block_info_describes_the_block(name: str) -> None:
    info = visattn.block_info(name)
    assert info.name == name and info.family in registry.FAMILIES
    # "Hu et al., CVPR 2018"; one or two authors are named ("Bello, ICLR 2021", "Xu & Wan, 2024");
    # a module without a paper cites its library ("timm 2025, after Hou et al., CVPR 2020")
    assert isinstance(info.paper, str)
    assert re.match(r"([A-Z][\w-]+( et al\.| & [A-Z][\w-]+)?|timm \d{4}), ", info.paper), info.paper
    assert isinstance(info.cls, type) and issubclass(info.cls, nn.Module)
    params = list(inspect.signature(info.cls.__init__).parameters.values())
    assert params[1].name == "channels"
    expected = {
        p.name: p.default
        for p in params[2:]
        if p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD) and p.name not in ("device", "dtype")
    }
    assert info.defaults == expected
    assert type(info.cls(32, **info.defaults)) is info.cls


@pytest.mark.parametrize("name", BLOCKS)
def test_unknown_option_raises_type_error_naming_block_and_option(name: str) -> None:
    with pytest.raises(TypeError, match=rf"block '{name}'.*'not_an_option'"):
        make(name, 32, not_an_option=1)


@pytest.mark.parametrize("name", BLOCKS)
@pytest.mark.parametrize("channels", [0, -3, 2.5, True])
def test_invalid_channels_raise_value_error_naming_block(name: str, channels) -> None:
    with pytest.raises(ValueError, match=rf"block '{name}'"):
        visattn.create_block(name, channels)


def test_unknown_block_name_raises_key_error_with_close_matches() -> None:
    with pytest.raises(KeyError) as err:
        visattn.create_block("nonlocl", 32)
    assert "nonlocal" in str(err.value)
    with pytest.raises(KeyError, match="'se'"):
        visattn.block_info("sse")


class _Gate(nn.Module):
    """A test gate."""

    def __init__(self, channels: int, scale: float = 2.0) -> None:
        super().__init__()
        self.w = nn.Parameter(torch.full((channels, 1, 1), scale))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * self.w


def test_registering_a_taken_name_raises_value_error() -> None:
    with registry.registered_block(
        "generic_test_gate", _Gate, family="channel", paper="Test et al., 2026"
    ):
        assert "generic_test_gate" in visattn.list_blocks(family="channel")
        blk = visattn.create_block("generic_test_gate", 4, scale=3.0, dtype=torch.float64)
        assert blk.w.dtype == torch.float64 and blk.w[0].item() == 3.0
        for cls_name in ("generic_test_gate", "se"):
            with pytest.raises(ValueError, match="already registered"):
                visattn.register_block(cls_name, family="channel", paper="x")(_Gate)
        assert visattn.block_info("se").cls.__name__ != "_Gate"


def test_registration_leaves_the_class_as_written_and_a_scoped_one_is_undone() -> None:
    written = dict(vars(_Gate))
    with registry.registered_block("generic_test_gate", _Gate, family="channel", paper="T, 2026"):
        assert dict(vars(_Gate)) == written  # the decorator changes nothing in the class
        info = visattn.block_info("generic_test_gate")
        assert info.impl is _Gate and issubclass(info.cls, _Gate) and info.cls is not _Gate
        with pytest.raises(TypeError, match="block 'generic_test_gate': unknown option"):
            info.cls(4, scael=1.0)
        with pytest.raises(TypeError, match="unexpected keyword argument 'scael'"):  # plain Python
            _Gate(4, scael=1.0)
        assert not _Gate(4)._forward_pre_hooks  # no input check on the class as written
        assert info.cls(4)._forward_pre_hooks  # the registry's class checks its input
        assert registry.is_block(_Gate(4)) and registry.block_of(info.cls(4)) == info
    assert "generic_test_gate" not in visattn.list_blocks()
    with pytest.raises(KeyError, match="generic_test_gate"):
        visattn.block_info("generic_test_gate")
    assert dict(vars(_Gate)) == written and not registry.is_block(_Gate(4))
    with pytest.raises(KeyError, match="generic_test_gat"):
        registry.unregister_block("generic_test_gate")


def test_subscribers_hear_of_every_block_registered_and_removed_until_they_unsubscribe() -> None:
    heard: list[tuple[list[str], list[str]]] = []
    unsubscribe = registry.subscribe(lambda added, removed: heard.append((added, removed)))
    try:
        assert heard == [(visattn.list_blocks(), [])]  # first: what is registered now
        with registry.registered_block("generic_test_gate", _Gate, family="channel", paper="T"):
            assert heard[-1] == (["generic_test_gate"], [])
        assert heard[-1] == ([], ["generic_test_gate"])
    finally:
        unsubscribe()
    with registry.registered_block("generic_test_gate", _Gate, family="channel", paper="T"):
        pass
    assert len(heard) == 3
    with pytest.raises(TypeError, match="callable"):
        registry.subscribe("not a function")


# --------------------------------------------------------------------------- identity at init


@pytest.mark.parametrize("name", BLOCKS)
def test_identity_init_returns_its_input_and_still_learns(name: str) -> None:
    blk = visattn.create_block(name, 32, init="identity")
    x = randn(32, (9, 11))
    for mode in (True, False):
        torch.testing.assert_close(blk.train(mode)(x), x, rtol=0, atol=1e-6)
    blk.train()
    (blk(x.requires_grad_()) * torch.randn_like(x)).sum().backward()
    grads = [p.grad for p in blk.parameters() if p.grad is not None]
    assert any(g.abs().sum() > 0 for g in grads), f"{name}: no parameter gets a gradient"


@pytest.mark.parametrize("name", BLOCKS)
def test_default_init_is_not_the_identity(name: str) -> None:
    """The control for the identity test: the paper's initialisation changes its input."""
    # gc, nonlocal: their last layer starts at zero in the papers' code; danet: its scales alpha
    # and beta start at zero in the paper; gct: gamma = beta = 0 in the paper
    if name in ("gc", "nonlocal", "danet", "gct"):
        pytest.skip(f"{name} starts as the identity by design")
    blk = make(name, 32).eval()
    x = randn(32, (9, 11))
    with torch.no_grad():
        assert (blk(x) - x).abs().max() > 1e-3


def test_identity_init_rejects_unknown_choice() -> None:
    with pytest.raises(ValueError, match="block 'se': option 'init'"):
        visattn.create_block("se", 32, init="zero")


# --------------------------------------------------------------------------- conv replacement


CONV_BLOCKS = [n for n in BLOCKS if visattn.block_info(n).replaces_conv]


@pytest.mark.parametrize("stride", (1, 2))
@pytest.mark.parametrize("name", CONV_BLOCKS)
def test_conv_replacing_block_maps_channels_and_stride(name: str, stride: int) -> None:
    blk = visattn.create_block(name, 32, out_channels=64, stride=stride)
    assert (blk.in_channels, blk.out_channels, blk.stride) == (32, 64, stride)
    y = blk(randn(32, (16, 16)))
    assert y.shape == (2, 64, 16 // stride, 16 // stride)


def test_a_block_from_the_registry_pickles_as_its_registered_name() -> None:
    import pickle

    blk = visattn.create_block("cbam", 16).eval()
    again = pickle.loads(pickle.dumps(blk))
    assert type(again) is type(blk) is visattn.block_info("cbam").cls
    assert again._forward_pre_hooks  # the registry's input check came back with it
    x = torch.randn(2, 16, 8, 8)
    torch.testing.assert_close(again(x), blk(x))
