"""timm twins: for each visattn block that timm also has, the timm module that computes the same
function, the visattn options that make them equal, and how to pair their tensors. The one
table of them, beside the benchmark that compares the two (``bench_blocks.py``), read also by
the tests (``tests/blocks/test_timm_twins.py``, ``tests/blocks/test_sk_splat_lambda_mhsa_halo.py``,
which find it on pytest's ``pythonpath``) and the docs' block pages; it needs only torch and
timm, and the package does not import it.

A twin is built from the *instance* of the visattn block (:attr:`Twin.build`), so that it has
the same widths, kernel sizes, biases and activations; :func:`check_twin` gives the twin the
block's (randomised) weights and compares their outputs in train and eval mode.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.nn as nn
from timm.layers.bottleneck_attn import BottleneckAttn
from timm.layers.cbam import CbamModule, LightCbamModule, SpatialAttn
from timm.layers.coord_attn import CoordAttn, EfficientLocalAttn, SimpleCoordAttn, StripAttn
from timm.layers.eca import CecaModule, EcaModule
from timm.layers.gather_excite import GatherExcite
from timm.layers.global_context import GlobalContext
from timm.layers.halo_attn import HaloAttn
from timm.layers.lambda_layer import LambdaLayer
from timm.layers.mlp import ConvMlp
from timm.layers.non_local_attn import BatNonLocalAttn, NonLocalAttn
from timm.layers.selective_kernel import SelectiveKernel
from timm.layers.split_attn import SplitAttn
from timm.layers.squeeze_excite import EffectiveSEModule, SEModule

__all__ = [
    "TWINS",
    "Twin",
    "block_of",
    "check_twin",
    "pairs_by_order",
    "randomize",
    "timm_type_of",
]


def _convs(m: nn.Module, kind: type[nn.Module] = nn.Conv2d) -> list[nn.Module]:
    return [c for c in m.modules() if isinstance(c, kind)]


def _one(m: nn.Module, kind: type[nn.Module], what: str) -> nn.Module:
    found = [c for c in m.modules() if isinstance(c, kind)]
    if len(found) != 1:
        raise ValueError(
            f"expected one {kind.__name__} ({what}) in {type(m).__name__}, got {found}"
        )
    return found[0]


_ACTS = (nn.ReLU, nn.ReLU6, nn.SiLU, nn.GELU, nn.Hardswish, nn.LeakyReLU, nn.Tanh)
_GATES = (nn.Sigmoid, nn.Hardsigmoid)


def _act(m: nn.Module) -> type[nn.Module]:
    return type(next(c for c in m.modules() if isinstance(c, _ACTS)))


def _gate(m: nn.Module) -> type[nn.Module]:
    return type(next(c for c in m.modules() if isinstance(c, _GATES)))


def _se_twin(b: nn.Module, c: int) -> nn.Module:
    if getattr(b, "pool", "avg") != "avg":
        raise ValueError("timm's SEModule only has average pooling")
    fc1 = _convs(b)[0]
    return SEModule(
        c,
        rd_channels=fc1.out_channels,
        bias=fc1.bias is not None,
        act_layer=_act(b),
        gate_layer=_gate(b),
    )


def _eca_twin(b: nn.Module, c: int) -> nn.Module:
    conv = _one(b, nn.Conv1d, "channel conv")
    # channels=None: timm then uses kernel_size as given instead of its own adaptive formula
    return EcaModule(None, kernel_size=conv.kernel_size[0], gate_layer=_gate(b))


def _ecam_twin(b: nn.Module, c: int) -> nn.Module:
    if b.mlp is None:
        raise ValueError("timm's ecam is eca with mlp=True")
    twin = EcaModule(c, use_mlp=True, rd_channels=b.mlp[0].out_channels, gate_layer=_gate(b))
    if twin.conv2.kernel_size[0] != b.kernel_size:  # timm adapts k from C, floored at 3
        raise ValueError(f"timm's kernel {twin.conv2.kernel_size[0]} != {b.kernel_size}")
    return twin


def _ceca_twin(b: nn.Module, c: int) -> nn.Module:
    if not b.circular_pad:
        raise ValueError("timm's ceca is eca with padding='circular'")
    return CecaModule(None, kernel_size=b.kernel_size, gate_layer=_gate(b))


def _ese_twin(b: nn.Module, c: int) -> nn.Module:
    return EffectiveSEModule(c, gate_layer=_gate(b))


def _ge_twin(b: nn.Module, c: int) -> nn.Module:
    """timm's GatherExcite. timm 1.0.31's constructor fails whenever it builds the MLP or a
    parametric gather (``*dd`` passes 'device'/'dtype' positionally), so it is built without
    them and they are added exactly as the constructor would build them; timm's forward runs."""
    if b.extent == 0 and b.gather is not None:
        raise ValueError("timm's parametric global gather pads to 'same' size: not global")
    twin = GatherExcite(c, extent=b.extent, use_mlp=False, gate_layer=_gate(b))
    if b.mlp is not None:
        twin.mlp = ConvMlp(c, b.mlp[0].out_channels, act_layer=_act(b))
    if b.gather is not None:
        twin.gather = nn.Sequential()
        n = int(math.log2(b.extent))
        for i in range(n):
            twin.gather.add_module(f"conv{i + 1}", nn.Conv2d(c, c, 3, 2, 1, groups=c, bias=False))
            twin.gather.add_module(f"norm{i + 1}", nn.BatchNorm2d(c))
            if i != n - 1:
                twin.gather.add_module(f"act{i + 1}", _act(b)(inplace=True))
    return twin


def _ge_pairs(b: nn.Module, t: nn.Module) -> list[tuple[torch.Tensor, torch.Tensor]]:
    # timm registers the gather added after construction behind its MLP
    dst = t.state_dict(keep_vars=True)
    keys = sorted(
        (k for k, v in dst.items() if v.is_floating_point()),
        key=lambda k: not k.startswith("gather"),
    )
    src = [v for v in b.state_dict(keep_vars=True).values() if v.is_floating_point()]
    return list(zip(src, (dst[k] for k in keys)))


def _cbam_twin(b: nn.Module, c: int) -> nn.Module:
    fc1, spatial = b.channel.fc1, b.spatial.conv
    if spatial.bias is not None:
        raise ValueError("timm's CBAM spatial conv is bias-free + BN: compare with use_bn=True")
    return (LightCbamModule if b.channel.light else CbamModule)(
        c,
        rd_channels=fc1.out_channels,
        spatial_kernel_size=spatial.kernel_size[0],
        act_layer=_act(b),
        gate_layer=_gate(b),
        mlp_bias=fc1.bias is not None,
    )


def _spatial_twin(b: nn.Module, c: int) -> nn.Module:
    conv = _one(b, nn.Conv2d, "spatial conv")
    if conv.bias is not None:
        raise ValueError("timm's SpatialAttn is a bias-free conv + BN: compare with use_bn=True")
    return SpatialAttn(conv.kernel_size[0], gate_layer=_gate(b))


def _gc_twin(b: nn.Module, c: int) -> nn.Module:
    first = b.fc1 if b.fc1 is not None else b.scale[0]
    twin = GlobalContext(
        c,
        use_attn=b.conv_attn is not None,
        fuse_add=b.fc2 is not None,
        fuse_scale=b.scale is not None,
        rd_channels=first.out_channels,
        act_layer=_act(b),
        gate_layer=_gate(b),
    )
    # GCNet's (and visattn's) nn.LayerNorm([C', 1, 1]) has eps 1e-5, timm's LayerNorm2d 1e-6
    for mlp in (twin.mlp_add, twin.mlp_scale):
        if mlp is not None:
            mlp.norm.eps = 1e-5
    return twin


def _gc_pairs(b: nn.Module, t: nn.Module) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """timm holds the scale MLP after the add MLP; visattn's add transform comes first too, but
    its scale transform is registered last: pair by role."""
    src = b.state_dict(keep_vars=True)
    dst = t.state_dict(keep_vars=True)
    pairs = [(src[k], dst[k]) for k in ("conv_attn.weight", "conv_attn.bias") if k in src]
    for prefix, names in (
        ("mlp_add.", ("fc1", "norm", "fc2")),
        ("mlp_scale.", ("scale.0", "scale.1", "scale.3")),
    ):
        for theirs, ours in zip(("fc1", "norm", "fc2"), names):
            for p in ("weight", "bias"):
                if f"{prefix}{theirs}.{p}" in dst:
                    pairs.append((src[f"{ours}.{p}"], dst[f"{prefix}{theirs}.{p}"]))
    return pairs


def _coord_twin(b: nn.Module, c: int) -> nn.Module:
    # timm's `bias` applies to all three convs; visattn's F_h, F_w have one, F1 (before BN) not:
    # the twin gets biases everywhere and its F1 bias is zeroed for the check.
    return CoordAttn(
        c,
        rd_channels=b.conv1.out_channels,
        bias=True,
        act_layer=_act(b),
        norm_layer=nn.BatchNorm2d,
        gate_layer=_gate(b),
    )


def _coord_pairs(b: nn.Module, t: nn.Module) -> list[tuple[torch.Tensor, torch.Tensor]]:
    dst = t.state_dict(keep_vars=True)
    pairs = [(v, dst[k]) for k, v in b.state_dict(keep_vars=True).items()]
    return [*pairs, (torch.zeros_like(dst["conv1.bias"]), dst["conv1.bias"])]


def _scoord_twin(b: nn.Module, c: int) -> nn.Module:
    if not b.simple:
        raise ValueError("timm's scoord is coord with simple=True")
    return SimpleCoordAttn(
        c, rd_channels=b.conv1.out_channels, act_layer=_act(b), gate_layer=_gate(b)
    )


def _ela_twin(b: nn.Module, c: int) -> nn.Module:
    if b.shared or b.norm_h.num_groups != 1:
        raise ValueError("timm's ela: one conv and norm per strip (shared=False), num_groups=1")
    return EfficientLocalAttn(
        c, kernel_size=b.conv_h.kernel_size[0], act_layer=_act(b), gate_layer=_gate(b)
    )


def _ela_pairs(b: nn.Module, t: nn.Module) -> list[tuple[torch.Tensor, torch.Tensor]]:
    src, dst = b.state_dict(keep_vars=True), t.state_dict(keep_vars=True)
    return [(src[k], v) for k, v in dst.items()]  # same names, another registration order


def _strip_twin(b: nn.Module, c: int) -> nn.Module:
    conv = b.conv_h if isinstance(b.conv_h, nn.Conv2d) else None
    return StripAttn(
        c,
        use_conv=conv is not None,
        kernel_size=conv.kernel_size[0] if conv is not None else 3,
        bias=conv is not None and conv.bias is not None,
        gate_layer=_gate(b),
    )


def _bat_twin(b: nn.Module, c: int) -> nn.Module:
    return BatNonLocalAttn(
        c,
        block_size=b.ba.block_size,
        groups=b.ba.groups,
        rd_channels=b.inner_channels,
        drop_rate=b.dropout.p,
        act_layer=_act(b),
    )


def _nonlocal_twin(b: nn.Module, c: int) -> nn.Module:
    inner = b.inner_channels
    if b.heads != 1 or b.subsample != 1 or b.window is not None or b.selection != "soft":
        raise ValueError("timm's NonLocalAttn has one head, no sub-sampling, global soft attention")
    twin = NonLocalAttn(c, rd_channels=inner)
    # timm scales by in_channels**-0.5 (or 1); give it the visattn score's scale so both compute
    # the same function (the cost is identical: one multiply of the score matrix either way).
    scale = {"dot": 1.0, "scaled_dot": inner**-0.5}.get(b.score)
    if scale is None:
        raise ValueError(f"timm's NonLocalAttn has no score {b.score!r}")
    twin.scale = scale / b.temperature
    return twin


def _nonlocal_pairs(b: nn.Module, t: nn.Module) -> list[tuple[torch.Tensor, torch.Tensor]]:
    pairs = [(b.theta.weight, t.t.weight), (b.theta.bias, t.t.bias), (b.phi.weight, t.p.weight)]
    pairs += [(b.phi.bias, t.p.bias), (b.g.weight, t.g.weight), (b.g.bias, t.g.bias)]
    pairs += [(b.w_z.weight, t.z.weight), (torch.zeros_like(t.z.bias), t.z.bias)]
    pairs += [
        (v, t.norm.state_dict(keep_vars=True)[k])
        for k, v in b.norm.state_dict(keep_vars=True).items()
    ]
    return pairs


@dataclass(frozen=True)
class Twin:
    """How to build timm's version of a block from a visattn instance and pair their tensors.

    ``options``: visattn options for the comparison (where the defaults follow the paper and timm
    follows the official code, e.g. CBAM's BN); ``pairs``: (visattn tensor, timm tensor) to copy
    for the equivalence check (default: all floating tensors of both state dicts, in order);
    ``block``: the visattn block (default: the twin's key, which is otherwise timm's type name,
    e.g. ``ecam`` for eca with ``mlp=True``); ``timm_type``: the name timm's
    ``timm.layers.get_attn`` knows the module by (``""``: the key; ``None``: it has none);
    ``multiple``: timm only takes inputs whose H and W are multiples of it; ``check_size``: the
    H, W of the equivalence check; ``sized``: options that depend on the input shape
    ``(N, C, H, W)``, e.g. a feature or block size (the check then runs at that shape's H x W).
    """

    build: Callable[[nn.Module, int], nn.Module]
    note: str = ""
    pairs: Callable[[nn.Module, nn.Module], list[tuple[torch.Tensor, torch.Tensor]]] | None = None
    options: dict = field(default_factory=dict)
    block: str | None = None
    timm_type: str | None = ""
    multiple: int = 1
    check_size: tuple[int, int] = (12, 10)
    sized: Callable[[tuple[int, ...]], dict] | None = None

    def block_options(self, shape: tuple[int, ...] | None = None) -> dict[str, Any]:
        """The visattn options of the comparison, for input ``shape`` if it has ``sized`` ones."""
        if self.sized is None or shape is None:
            return dict(self.options)
        return {**self.options, **self.sized(shape)}


_GATE_TWINS: dict[str, Twin] = {
    "se": Twin(_se_twin),
    "eca": Twin(
        _eca_twin, "timm's adaptive kernel formula differs (floors k at 3); kernel given explicitly"
    ),
    "cbam": Twin(
        _cbam_twin,
        "visattn use_bn=True (official code; default is the paper's conv with bias, no BN)",
        options={"use_bn": True},
    ),
    "spatial": Twin(
        _spatial_twin,
        "visattn use_bn=True (official code; default is the paper's conv with bias, no BN)",
        options={"use_bn": True},
        timm_type=None,  # CBAM's spatial half, without a name of its own
    ),
    "ecam": Twin(
        _ecam_twin,
        "timm's ecam: eca with mlp=True (timm experiment)",
        block="eca",
        options={"mlp": True},
    ),
    "ceca": Twin(
        _ceca_twin,
        "timm's ceca: eca with circular padding",
        block="eca",
        options={"padding": "circular"},
    ),
    "ese": Twin(
        _ese_twin,
        "visattn gate_layer='hard_sigmoid' (official code; default: sigmoid)",
        options={"gate_layer": "hard_sigmoid"},
    ),
    "ge": Twin(
        _ge_twin,
        "GE-theta-plus, extent 8; timm 1.0.31's constructor fails with an MLP or a parametric "
        "gather: those layers added as it would build them",
        _ge_pairs,
    ),
    "gc": Twin(
        _gc_twin,
        "timm's gc (its default): fusion='scale', LayerNorm eps 1e-5",
        _gc_pairs,
        options={"fusion": "scale"},
    ),
    "gca": Twin(
        _gc_twin,
        "timm's gca = visattn's default: GlobalContext(fuse_add=True, fuse_scale=False), "
        "LayerNorm eps 1e-5",
        _gc_pairs,
        block="gc",
    ),
    "lcbam": Twin(
        _cbam_twin,
        "timm's lcbam: cbam with light=True, use_bn=True",
        block="cbam",
        options={"light": True, "use_bn": True},
    ),
    "scoord": Twin(
        _scoord_twin,
        "timm's scoord: coord with simple=True, act_layer='silu'",
        block="coord",
        options={"simple": True, "act_layer": "silu"},
    ),
    "ela": Twin(
        _ela_twin,
        "timm's ela: shared=False, num_groups=1, act_layer='silu' (paper: shared conv/GN, 16 "
        "groups, no act)",
        _ela_pairs,
        options={"shared": False, "num_groups": 1, "act_layer": "silu"},
    ),
    "strip": Twin(_strip_twin),
    "bat": Twin(
        _bat_twin,
        "timm's width C/4 and 2 groups (the authors': C/2, 4 groups); timm needs H, W "
        "multiples of s=7 (visattn pads); both without dropout",
        options={"reduction": 4, "groups": 2},
        multiple=7,
        check_size=(14, 21),
    ),
    "coord": Twin(
        _coord_twin,
        "timm's conv before BN has a bias (zeroed for the check): +mip parameters",
        _coord_pairs,
    ),
    "nonlocal": Twin(
        _nonlocal_twin,
        "timm W_z conv has a bias (cancelled by the BN that follows); score scale set to visattn's",
        _nonlocal_pairs,
        timm_type="nl",
    ),
}


# twins of the conv-replacing blocks (sk, splat, lambda, mhsa, halo), at the block's own widths
def _sk_twin(b: nn.Module, c: int) -> nn.Module:
    return SelectiveKernel(
        c, b.out_channels, stride=b.stride, rd_channels=b.rd_channels, split_input=b.split_input
    )


def _splat_twin(b: nn.Module, c: int) -> nn.Module:
    if b.rd_channels % b.radix:
        raise ValueError("timm's SplitAttn takes rd_channels per split: d must divide by radix")
    return SplitAttn(
        c,
        b.out_channels,
        stride=b.stride,
        radix=b.radix,
        groups=b.groups,
        rd_channels=b.rd_channels // b.radix,
        norm_layer=nn.BatchNorm2d,
    )


def _lambda_twin(b: nn.Module, c: int) -> nn.Module:
    if b.pos_conv.bias is None:
        raise ValueError("timm's lambda conv has a bias: compare with pos_bias=True")
    return LambdaLayer(
        c, b.out_channels, stride=b.stride, num_heads=b.heads, dim_head=b.dim_k, r=b.r
    )


def _rel_attn_options(b: nn.Module) -> dict[str, Any]:
    """timm's names for the options visattn's mhsa and halo share."""
    return {
        "stride": b.stride,
        "num_heads": b.heads,
        "dim_head": b.dim_head,
        "scale_pos_embed": b.scale_pos,
    }


def _mhsa_twin(b: nn.Module, c: int) -> nn.Module:
    return BottleneckAttn(c, b.out_channels, feat_size=b.feat_size, **_rel_attn_options(b))


def _halo_twin(b: nn.Module, c: int) -> nn.Module:
    return HaloAttn(
        c,
        b.out_channels,
        block_size=b.block_size,
        halo_size=b.halo_size,
        **_rel_attn_options(b),
    )


def _rel_attn_pairs(b: nn.Module, t: nn.Module) -> list[tuple[torch.Tensor, torch.Tensor]]:
    pairs = [(b.rel_h, t.pos_embed.height_rel), (b.rel_w, t.pos_embed.width_rel)]
    for name in ("qkv", "q", "kv"):
        if hasattr(b, name):
            pairs.append((getattr(b, name).weight, getattr(t, name).weight))
    return pairs


def _halo_block_size(shape: tuple[int, ...]) -> dict:
    """timm's HaloAttn needs the map to be a multiple of the block: 8 (paper) where it divides."""
    h, w = shape[2:]
    for b in (8, 7, 4):
        if h % b == 0 and w % b == 0:
            return {"block_size": b}
    raise ValueError(f"no block size in (8, 7, 4) divides {h}x{w}")


_CONV_TWINS: dict[str, Twin] = {
    "sk": Twin(
        _sk_twin,
        "visattn split_input=True (timm; the paper does not split); d given (paper max(C/16, 32))",
        options={"split_input": True},
    ),
    "splat": Twin(_splat_twin, "timm SplitAttn with BatchNorm2d (as ResNeSt); d given"),
    "lambda": Twin(
        _lambda_twin,
        "visattn pos_bias=True, r=9 (timm; the paper's embeddings have no bias, r=23)",
        options={"pos_bias": True, "r": 9},
    ),
    "mhsa": Twin(
        _mhsa_twin,
        "feat_size = the map (timm requires it); scale_pos_embed=True (the paper's gist)",
        _rel_attn_pairs,
        timm_type="bottleneck",
        sized=lambda shape: {"feat_size": tuple(shape[2:])},
    ),
    "halo": Twin(
        _halo_twin,
        "block size dividing the map (timm requires it); scale_pos_embed=True",
        _rel_attn_pairs,
        check_size=(16, 8),
        sized=_halo_block_size,
    ),
}
#: visattn block (with options) -> timm module that computes the same function, by timm's
#: type name where it has one (``ecam``, ``gca``, ``lcbam``, ``scoord``: options of a visattn block)
TWINS: dict[str, Twin] = {**_GATE_TWINS, **_CONV_TWINS}


def block_of(key: str) -> str:
    """The visattn block of the twin ``key``."""
    return TWINS[key].block or key


def timm_type_of(key: str) -> str | None:
    """timm's ``get_attn`` name of the twin ``key`` (``None``: it has none)."""
    t = TWINS[key].timm_type
    return key if t == "" else t


# the twin check: same weights, same input -> same output?
@torch.no_grad()
def randomize(m: nn.Module, gen: torch.Generator) -> None:
    """Weights away from their (often degenerate) initialisation: zero-initialised BN scales and
    output convs would make different functions look equal."""
    for name, t in m.state_dict(keep_vars=True).items():
        if not t.is_floating_point():
            continue
        if name.endswith("running_var"):
            t.copy_(torch.rand(t.shape, generator=gen) + 0.5)
        elif t.dim() > 1:
            t.copy_(torch.randn(t.shape, generator=gen) / math.sqrt(t[0].numel()))
        else:
            t.copy_(torch.rand(t.shape, generator=gen) + 0.5)


def pairs_by_order(b: nn.Module, t: nn.Module) -> list[tuple[torch.Tensor, torch.Tensor]]:
    src = [v for v in b.state_dict(keep_vars=True).values() if v.is_floating_point()]
    dst = [v for v in t.state_dict(keep_vars=True).values() if v.is_floating_point()]
    if [s.numel() for s in src] != [d.numel() for d in dst]:
        raise ValueError(
            f"tensors differ: visattn {[tuple(s.shape) for s in src]} vs timm "
            f"{[tuple(d.shape) for d in dst]}"
        )
    return list(zip(src, dst))


def check_twin(
    block: nn.Module,
    twin: nn.Module,
    spec: Twin,
    channels: int,
    size: tuple[int, ...] | None = None,
) -> str:
    """``same (max|d|=...)`` if the twin computes the block's function, else what differs."""
    b, t = copy.deepcopy(block).float().cpu(), copy.deepcopy(twin).float().cpu()
    gen = torch.Generator().manual_seed(0)
    randomize(b, gen)
    try:
        pairs = (spec.pairs or pairs_by_order)(b, t)
    except (ValueError, AttributeError) as e:
        return f"not comparable: {e}"
    with torch.no_grad():
        for src, dst in pairs:
            dst.copy_(src.reshape(dst.shape))
    x = torch.randn(4, channels, *(size or spec.check_size), generator=gen)
    worst = 0.0
    with torch.no_grad():
        for train in (True, False):
            b.train(train)
            t.train(train)
            yb, yt = b(x), t(x)
            worst = max(worst, ((yb - yt).abs().max() / yb.abs().max().clamp_min(1e-12)).item())
    return f"same (rel {worst:.0e})" if worst < 1e-4 else f"DIFFERS (rel {worst:.2g})"
