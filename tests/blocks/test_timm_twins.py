"""Every timm attention type that visattn covers computes the same function as timm's module.

The pairs are the package's one table of twins (:data:`visattn.blocks.twins.TWINS`: block and
options -> timm module and how their tensors pair). For each twin the visattn block is built with
the table's options, its weights are randomised (so zero-initialised layers cannot make
different functions look equal) and copied into timm's module, and both are run on the same
input in train and then eval mode (fp32): same outputs and input gradients. Variants beyond the
table (GE's extents, GC's fusions, the non-local score scale, BAT's dropout) are built here from
``timm.layers.create_attn.get_attn`` (the type names timm uses).
"""

from __future__ import annotations

import copy
import functools
import math

import pytest
import torch
import torch.nn as nn
from helpers.reference import TIMM_NONLOCAL_NAMES
from helpers.weights import randomize
from timm.layers.create_attn import get_attn
from timm.layers.mlp import ConvMlp
from twins import TWINS, block_of, pairs_by_order, timm_type_of

import visattn

C = 64
TOL = dict(rtol=1e-5, atol=1e-5)


def floats(m: nn.Module) -> dict[str, torch.Tensor]:
    return {k: v for k, v in m.state_dict(keep_vars=True).items() if v.is_floating_point()}


@torch.no_grad()
def copy_weights(
    src: nn.Module, dst: nn.Module, names: dict[str, str] | None = None, zero: tuple[str, ...] = ()
) -> None:
    """Copy every floating tensor of src into dst: in order, or by ``names`` {dst: src}; the dst
    tensors in ``zero`` (ones visattn does not have, e.g. a conv bias before BN) are zeroed."""
    s = floats(src)
    d = {k: v for k, v in floats(dst).items() if k not in zero}
    pairs = [(names[k], k) for k in d] if names else list(zip(s, d))
    assert len(pairs) == len(d) and sorted(ks for ks, _ in pairs) == sorted(s), (list(s), list(d))
    for ks, kd in pairs:
        assert s[ks].numel() == d[kd].numel(), (ks, kd, s[ks].shape, d[kd].shape)
        d[kd].copy_(s[ks].reshape(d[kd].shape))
    for k in zero:
        floats(dst)[k].zero_()


def assert_same_function(
    ours: nn.Module,
    theirs: nn.Module,
    names: dict[str, str] | None = None,
    zero: tuple[str, ...] = (),
    size: tuple[int, int] = (14, 14),
    seed_each_call: bool = False,
    dtype: torch.dtype = torch.float32,
) -> None:
    randomize(ours, 0)
    copy_weights(ours, theirs, names, zero)
    ours.to(dtype)
    theirs.to(dtype)
    x = torch.randn(3, C, *size, generator=torch.Generator().manual_seed(1), dtype=dtype)
    for train in (True, False):
        ours.train(train)
        theirs.train(train)
        with torch.no_grad():
            if seed_each_call:  # dropout: the same mask for both
                torch.manual_seed(2)
            y_ours = ours(x)
            if seed_each_call:
                torch.manual_seed(2)
            y_theirs = theirs(x)
        assert (y_ours - x).abs().max() > 1e-3, "the twin check needs a block that changes x"
        torch.testing.assert_close(y_ours, y_theirs, **TOL, msg=f"train={train}")


def block(name: str, **kw) -> nn.Module:
    return visattn.create_block(name, C, **kw)


# --------------------------------------------------------------------------- channel


def test_eca_adaptive_kernel_agrees_with_timm_where_timm_does_not_raise_it() -> None:
    for c in (64, 256, 1024):
        t = get_attn("eca")(c)
        assert visattn.create_block("eca", c).kernel_size == t.conv.kernel_size[0]


def test_circular_padding_differs_from_zero_padding_only_at_the_ends() -> None:
    """(timm's ceca, eca with circular padding, is a twin in the table.)"""
    ours = block("eca", padding="circular", kernel_size=3)
    zero = block("eca", kernel_size=3)
    zero.load_state_dict(ours.state_dict())
    x = torch.randn(2, C, 5, 5)
    with torch.no_grad():
        d = (zero.eval()(x) - ours.eval()(x)).abs().amax(dim=(0, 2, 3))
    assert d[0] > 0 and d[-1] > 0 and d[1:-1].max() == 0


def _timm_ge(extent: int, mlp: bool = False, param_gather: bool = False) -> nn.Module:
    """timm's GatherExcite. In timm 1.0.31 its constructor fails when it builds the MLP or a
    parametric gather (it passes ``*dd``, the keys 'device' and 'dtype', as positional
    arguments); those parts are built here exactly as that constructor would, then timm's own
    ``forward`` runs."""
    m = get_attn("ge")(C, extent=extent, use_mlp=False)
    if mlp:
        m.mlp = ConvMlp(C, C // 16, act_layer=nn.ReLU)
    if param_gather:
        m.gather = nn.Sequential()
        n = int(math.log2(extent))
        for i in range(n):
            m.gather.add_module(f"conv{i + 1}", nn.Conv2d(C, C, 3, 2, 1, groups=C, bias=False))
            m.gather.add_module(f"norm{i + 1}", nn.BatchNorm2d(C))
            if i != n - 1:
                m.gather.add_module(f"act{i + 1}", nn.ReLU(inplace=True))
    return m


def test_timm_gather_excite_constructor_still_fails_with_an_mlp() -> None:
    """The reason _timm_ge builds parts by hand; when timm fixes it, this test says so."""
    with pytest.raises(TypeError):
        get_attn("ge")(C)


@pytest.mark.parametrize("extent", ["global", 2, 4, 8])
def test_ge_theta_minus_equals_timm_parameter_free_gather(extent) -> None:
    ours = block("ge", variant="minus", extent=extent, mlp=True)  # timm's ge: + MLP
    theirs = _timm_ge(0 if extent == "global" else extent, mlp=True)
    assert_same_function(ours, theirs, size=(15, 13))
    # without MLP: the paper's parameter-free GE-theta-minus
    ours = block("ge", variant="minus", extent=extent)
    theirs = _timm_ge(0 if extent == "global" else extent)
    x = torch.randn(2, C, 15, 13)
    torch.testing.assert_close(ours(x), theirs(x), **TOL)


@pytest.mark.parametrize("extent", [2, 8])
@pytest.mark.parametrize("variant", ["theta", "plus"])
def test_ge_parametric_gather_equals_timm_extra_params(variant: str, extent: int) -> None:
    ours = block("ge", variant=variant, extent=extent)
    theirs = _timm_ge(extent, mlp=variant == "plus", param_gather=True)
    # timm registers its gather after its MLP: pair gather with gather, MLP with MLP
    dst = sorted(floats(theirs), key=lambda k: not k.startswith("gather"))
    assert_same_function(ours, theirs, dict(zip(dst, floats(ours))), size=(16, 12))


def test_gc_both_fusions_and_average_pooling_equal_timm() -> None:
    ours = block("gc", reduction=8, fusion="both", pool="avg")
    theirs = get_attn("gc")(C, use_attn=False, fuse_add=True, fuse_scale=True)
    theirs.mlp_add.norm.eps = theirs.mlp_scale.norm.eps = 1e-5
    names = {
        **{f"mlp_add.{k}": v for k, v in _gc_names("").items()},
        **{f"mlp_scale.{k}": v for k, v in _gc_names("scale.").items()},
    }
    assert_same_function(ours, theirs, names)


def _gc_names(prefix: str) -> dict[str, str]:
    if prefix:  # the scale transform is an nn.Sequential
        src = ["0.weight", "0.bias", "1.weight", "1.bias", "3.weight", "3.bias"]
        src = [prefix + s for s in src]
    else:
        src = ["fc1.weight", "fc1.bias", "norm.weight", "norm.bias", "fc2.weight", "fc2.bias"]
    dst = ["fc1.weight", "fc1.bias", "norm.weight", "norm.bias", "fc2.weight", "fc2.bias"]
    return dict(zip(dst, src))


# --------------------------------------------------------------------------- spatial / hybrid


# --------------------------------------------------------------------------- non-local


def test_nonlocal_equals_timm_nl() -> None:
    """timm's NonLocalAttn scales scores by C**-0.5: visattn's dot score with temperature
    sqrt(C) is the same. timm's W_z conv has a bias, zeroed here (BN follows it)."""
    ours = block("nonlocal", inner_channels=8, score="dot", temperature=math.sqrt(C))
    theirs = get_attn("nl")(C, rd_channels=8)
    # float64: the fused kernel and timm's bmm round differently, and train-mode BN amplifies
    # float32 round-off past 1e-5
    assert_same_function(
        ours, theirs, TIMM_NONLOCAL_NAMES, zero=("z.bias",), size=(9, 7), dtype=torch.float64
    )


@pytest.mark.parametrize("size", [(14, 14), (7, 21)])
def test_bat_equals_timm_bat_with_its_dropout(size) -> None:
    ours = block("bat", reduction=4, groups=2, drop_rate=0.2)  # timm's width and groups
    theirs = get_attn("bat")(C)
    assert_same_function(ours, theirs, size=size, seed_each_call=True)


# --------------------------------------------------------------------------- the table


@pytest.mark.parametrize("key", sorted(TWINS))
def test_twin_computes_the_same_function(key: str) -> None:
    """The table's twin, with the block's weights, gives its outputs and input gradients."""
    twin = TWINS[key]
    c = 32 if visattn.block_info(block_of(key)).replaces_conv else C
    shape = (3, c, *twin.check_size)
    ours = visattn.create_block(block_of(key), c, **twin.block_options(shape))
    theirs = twin.build(ours, c)
    randomize(ours, 0)
    with torch.no_grad():
        for src, dst in (twin.pairs or pairs_by_order)(ours, theirs):
            dst.copy_(src.reshape(dst.shape))
    x = torch.randn(shape, generator=torch.Generator().manual_seed(1))
    for train in (True, False):
        ours.train(train)
        theirs.train(train)
        xa, xb = x.clone().requires_grad_(), x.clone().requires_grad_()
        ya, yb = ours(xa), theirs(xb)
        torch.testing.assert_close(ya, yb, **TOL, msg=f"{key}, train={train}")
        gy = torch.randn(ya.shape, generator=torch.Generator().manual_seed(2))
        ya.backward(gy)
        yb.backward(gy)
        scale = max(1.0, xa.grad.abs().max().item())  # float32 rounding of large gradients
        if not torch.allclose(xa.grad, xb.grad, rtol=1e-5, atol=1e-5 * scale):
            # a formula with other rounding (BAT's row normalisation as a softmax of log
            # sigmoid: timm's P / P.sum() loses 0.35 of gradients of 11 where sigmoids
            # saturate): ours no farther from a float64 run than theirs, and close to it
            ref = copy.deepcopy(ours).double()
            x64 = x.double().requires_grad_()
            ref(x64).backward(gy.double())
            mine = float((xa.grad.double() - x64.grad).abs().max())
            other = float((xb.grad.double() - x64.grad).abs().max())
            assert mine <= min(other, 1e-4 * scale), (
                f"{key} gradient, train={train}: ours {mine:.3g} from float64, timm's {other:.3g}"
            )
    if ya.shape == x.shape:
        assert (ya - x).abs().max() > 1e-3, "the twin check needs a block that changes x"


def _timm_class(factory) -> type:
    return factory.func if isinstance(factory, functools.partial) else factory


@pytest.mark.parametrize("key", sorted(TWINS))
def test_twin_is_the_timm_type_it_names(key: str) -> None:
    twin = TWINS[key]
    c = 32
    ours = visattn.create_block(block_of(key), c, **twin.block_options((2, c, *twin.check_size)))
    theirs = twin.build(ours, c)
    if timm_type_of(key) is None:
        assert key == "spatial"  # CBAM's spatial half: timm names no type for it alone
        return
    factory = get_attn(timm_type_of(key))
    assert type(theirs) is _timm_class(factory)
    if isinstance(factory, functools.partial):  # ecam, gca: timm's class with options set
        assert set(factory(c).state_dict()) == set(theirs.state_dict())


def test_every_timm_attention_type_is_in_the_table() -> None:
    """timm's 16 lightweight types, nl, bat and its 5 conv-replacing ones (sk, splat, lambda,
    bottleneck, halo) are all twinned; spatial is CBAM's half, without a timm type name."""
    types = {timm_type_of(k) for k in TWINS} - {None}
    expected = {"se", "ese", "eca", "ecam", "ceca", "ge", "gc", "gca", "cbam", "lcbam", "coord"}
    expected |= {"scoord", "ela", "strip", "nl", "bat", "sk", "splat", "lambda", "bottleneck"}
    expected |= {"halo"}
    assert types == expected
    for t in types:
        assert get_attn(t) is not None
    assert all(block_of(k) in visattn.list_blocks() for k in TWINS)
