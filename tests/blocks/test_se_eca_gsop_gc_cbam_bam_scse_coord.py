"""Each block against its paper: the output equals the paper's equations re-computed here with plain
torch ops from the block's own weights (eval mode, random weights and BN statistics), the parameter
count equals the closed form of the block's docstring, the structural properties the papers state
hold, and impossible options fail with messages that name the block and the option.

The reference computations deliberately avoid the blocks' helpers (and ``nn`` modules): matrices are
multiplied with ``einsum``, BN/LN/h-swish/softmax are written out, and GSoP's covariance uses the
official code's centring-matrix formula in float64 rather than the block's mean subtraction.
"""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from helpers.reference import bn_eval, close, mat, randn64, randomized, sigmoid
from torch.utils._python_dispatch import TorchDispatchMode

import visattn

# --------------------------------------------------------------------------------------- helpers


def _input(n: int, c: int, h: int, w: int) -> torch.Tensor:
    """float64 input bounded away from zero, so output/input ratios are well defined."""
    x = randn64(n, c, h, w)
    return x.sign() * (0.5 + x.abs())


def _b(module: torch.nn.Module) -> torch.Tensor:
    return module.bias.detach()


def _relu(t: torch.Tensor) -> torch.Tensor:
    return t.clamp_min(0)


def _fc(z: torch.Tensor, conv: torch.nn.Module, bias: bool = True) -> torch.Tensor:
    """A 1x1 conv on a (N, C) vector."""
    out = torch.einsum("oc,nc->no", mat(conv), z)
    return out + _b(conv) if bias else out


def _conv2d_loops(x: torch.Tensor, weight: torch.Tensor, dilation: int = 1) -> torch.Tensor:
    """'Same' zero-padded k x k convolution written as a sum over kernel taps (no F.conv2d)."""
    k = weight.shape[-1]
    pad = dilation * (k // 2)
    xp = F.pad(x, (pad, pad, pad, pad))
    h, w = x.shape[2:]
    out = x.new_zeros(x.shape[0], weight.shape[0], h, w)
    for i in range(k):
        for j in range(k):
            patch = xp[:, :, i * dilation : i * dilation + h, j * dilation : j * dilation + w]
            out = out + torch.einsum("oc,nchw->nohw", weight[:, :, i, j].detach(), patch)
    return out


# ----------------------------------------------------- (1) outputs equal the papers' equations


def test_se_matches_eqs_2_to_4() -> None:
    blk = randomized("se", 32)
    x = _input(2, 32, 5, 7)
    z = x.mean((2, 3))  # Eq. (2)
    s = sigmoid(_fc(_relu(_fc(z, blk.fc1)), blk.fc2))  # Eq. (3)
    close(blk(x), x * s[:, :, None, None])  # Eq. (4)


@pytest.mark.parametrize("channels, k", [(16, 3), (64, 3), (256, 5), (2048, 7)])
def test_eca_matches_eq_10_with_adaptive_kernel(channels: int, k: int) -> None:
    blk = randomized("eca", channels)
    weight = blk.conv.weight.detach().flatten()
    assert weight.numel() == k  # Eq. (12), values of the paper's ResNet-50 stages (2048 -> 7)
    x = _input(2, channels, 4, 3)
    y = x.mean((2, 3))
    y_pad = F.pad(y, (k // 2, k // 2))  # zero padding at both ends of the channel axis
    conv = sum(weight[j] * y_pad[:, j : j + channels] for j in range(k))
    close(blk(x), x * sigmoid(conv)[:, :, None, None])


def test_eca_explicit_kernel_size() -> None:
    assert visattn.create_block("eca", 256, kernel_size=9).conv.weight.numel() == 9


def _gsop_reference(blk: torch.nn.Module, x: torch.Tensor) -> torch.Tensor:
    z = torch.einsum("oc,nchw->nohw", mat(blk.reduce), x)
    z = _relu(bn_eval(z, blk.bn))
    n, c_red, h, w = z.shape
    m = h * w
    zf = z.reshape(n, c_red, m)
    # The official code's centring: Sigma = Z I_hat Z^T, I_hat = (1/M)(I - (1/M) 1 1^T)
    i_hat = torch.eye(m, dtype=x.dtype) / m - torch.full((m, m), 1.0 / m**2, dtype=x.dtype)
    cov = zf @ i_hat @ zf.transpose(1, 2)  # (N, C', C')
    cov = bn_eval(cov, blk.row_norm, dim=1)  # row-wise normalisation: row i uses BN channel i
    wr = blk.row_conv.weight.detach().view(c_red, 4, c_red)  # row i -> outputs 4i .. 4i+3
    rc = torch.einsum("ikj,nij->nik", wr, cov).reshape(n, 4 * c_red) + _b(blk.row_conv)
    s = sigmoid(_fc(rc, blk.fc))
    return x * s[:, :, None, None]


@pytest.mark.parametrize("channels, rd_channels", [(24, 128), (40, 16)])
def test_gsop_matches_sigma_w_rc_cov_conv(channels: int, rd_channels: int) -> None:
    blk = randomized("gsop", channels, rd_channels=rd_channels)
    assert blk.rd_channels == min(rd_channels, channels)
    x = _input(2, channels, 5, 6)
    close(blk(x), _gsop_reference(blk, x))


def test_gc_matches_eq_4() -> None:
    blk = randomized("gc", 48)
    x = _input(2, 48, 5, 6)
    n, c, h, w = x.shape
    logits = torch.einsum("c,nchw->nhw", mat(blk.conv_attn)[0], x).reshape(n, h * w)
    logits = logits + _b(blk.conv_attn)
    a = torch.exp(logits - logits.max(1, keepdim=True).values)
    a = a / a.sum(1, keepdim=True)  # softmax over the HW positions
    context = torch.einsum("ncp,np->nc", x.reshape(n, c, h * w), a)
    t = _fc(context, blk.fc1)
    mu, var = t.mean(1, keepdim=True), t.var(1, unbiased=False, keepdim=True)
    t = (t - mu) / torch.sqrt(var + blk.norm.eps) * blk.norm.weight.detach().flatten()
    t = t + blk.norm.bias.detach().flatten()  # LayerNorm over [C/r, 1, 1]
    t = _fc(_relu(t), blk.fc2)
    close(blk(x), x + t[:, :, None, None])


def _spatial_map(x: torch.Tensor, conv: torch.nn.Module, bn=None) -> torch.Tensor:
    pooled = torch.stack([x.mean(1), x.max(1).values], dim=1)  # [AvgPool; MaxPool] over channels
    s = _conv2d_loops(pooled, conv.weight)
    s = s + _b(conv).view(1, -1, 1, 1) if bn is None else bn_eval(s, bn)
    return sigmoid(s)


@pytest.mark.parametrize("kernel_size", [7, 3])
@pytest.mark.parametrize("use_bn", [False, True])
def test_spatial_matches_cbam_eq_3(kernel_size: int, use_bn: bool) -> None:
    blk = randomized("spatial", 16, kernel_size=kernel_size, use_bn=use_bn)
    assert (blk.spatial.conv.bias is None) == use_bn
    x = _input(2, 16, 9, 8)
    ms = _spatial_map(x, blk.spatial.conv, blk.spatial.bn if use_bn else None)
    close(blk(x), x * ms)


def _cbam_channel_map(x: torch.Tensor, blk: torch.nn.Module, pools) -> torch.Tensor:
    g = blk.channel

    def mlp(v: torch.Tensor) -> torch.Tensor:  # ONE shared MLP W1 ReLU(W0 v)
        return _fc(_relu(_fc(v, g.fc1)), g.fc2)

    pooled = {"avg": x.mean((2, 3)), "max": x.amax((2, 3))}
    return sigmoid(sum(mlp(pooled[p]) for p in pools))[:, :, None, None]


@pytest.mark.parametrize("order", ["channel_first", "spatial_first", "parallel"])
@pytest.mark.parametrize("pool_types", [("avg", "max"), ("max",)])
def test_cbam_matches_eqs_1_to_3(order: str, pool_types: tuple[str, ...]) -> None:
    blk = randomized("cbam", 32, order=order, pool_types=pool_types)
    x = _input(2, 32, 7, 6)
    conv = blk.spatial.conv
    if order == "channel_first":
        f1 = _cbam_channel_map(x, blk, pool_types) * x
        expected = _spatial_map(f1, conv) * f1
    elif order == "spatial_first":
        f1 = _spatial_map(x, conv) * x
        expected = _cbam_channel_map(f1, blk, pool_types) * f1
    else:
        expected = _cbam_channel_map(x, blk, pool_types) * _spatial_map(x, conv) * x
    close(blk(x), expected)


def _bam_branches(blk: torch.nn.Module, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    ch, sp = blk.channel, blk.spatial
    hidden = _relu(_fc(x.mean((2, 3)), ch[0]))
    mc = bn_eval(_fc(hidden, ch[2], bias=False), ch[3])[:, :, None, None]  # Eq. (3)
    t = _relu(bn_eval(torch.einsum("oc,nchw->nohw", mat(sp[0]), x), sp[1]))  # 1x1 reduction
    t = _relu(bn_eval(_conv2d_loops(t, sp[3].weight, dilation=4), sp[4]))  # 3x3, dilation 4
    t = _relu(bn_eval(_conv2d_loops(t, sp[6].weight, dilation=4), sp[7]))
    ms = bn_eval(torch.einsum("oc,nchw->nohw", mat(sp[9]), t), sp[10])  # 1x1 -> 1, BN: Eq. (4)
    return mc, ms


@pytest.mark.parametrize("combine", ["sum", "product"])
def test_bam_matches_eqs_1_to_4(combine: str) -> None:
    blk = randomized("bam", 32, combine=combine)
    x = _input(2, 32, 11, 10)
    mc, ms = _bam_branches(blk, x)
    # sum: the paper's sigmoid(Mc + Ms); product: the official code's sigmoid(Mc * Ms)
    m = sigmoid(mc + ms) if combine == "sum" else sigmoid(mc * ms)
    close(blk(x), x + x * m)  # Eq. (1)


@pytest.mark.parametrize("combine", ["add", "max"])
def test_scse_matches_cse_sse_combination(combine: str) -> None:
    blk = randomized("scse", 16, combine=combine)
    x = _input(2, 16, 6, 5)
    s = sigmoid(_fc(_relu(_fc(x.mean((2, 3)), blk.fc1)), blk.fc2))[:, :, None, None]  # cSE
    q = sigmoid(torch.einsum("c,nchw->nhw", mat(blk.conv_sq)[0], x) + _b(blk.conv_sq))  # sSE
    u_cse, u_sse = x * s, x * q[:, None]
    expected = u_cse + u_sse if combine == "add" else torch.maximum(u_cse, u_sse)
    close(blk(x), expected)


def test_coord_matches_eqs_4_to_9() -> None:
    blk = randomized("coord", 64)
    x = _input(2, 64, 5, 7)
    h = x.shape[2]
    z = torch.cat([x.mean(3), x.mean(2)], dim=2)  # Eqs. (4)-(5): (N, C, H + W)
    f = bn_eval(torch.einsum("mc,ncl->nml", mat(blk.conv1), z), blk.bn1)
    f = f * (f + 3).clamp(0, 6) / 6  # h-swish, Eq. (6)
    f_h, f_w = f[:, :, :h], f[:, :, h:]
    g_h = sigmoid(torch.einsum("cm,nml->ncl", mat(blk.conv_h), f_h) + _b(blk.conv_h)[:, None])
    g_w = sigmoid(torch.einsum("cm,nml->ncl", mat(blk.conv_w), f_w) + _b(blk.conv_w)[:, None])
    close(blk(x), x * g_h[:, :, :, None] * g_w[:, :, None, :])  # Eq. (9)


# ------------------------------------------ the recorded maps are the weights the blocks apply


@pytest.mark.parametrize(
    "name, options",
    [
        ("cbam", {"order": "channel_first"}),
        ("cbam", {"order": "spatial_first"}),
        ("cbam", {"order": "parallel"}),
        ("scse", {"combine": "add"}),
        ("scse", {"combine": "max"}),
        ("coord", {}),
        ("spatial", {}),
        ("eca", {}),
        ("gsop", {}),
    ],
)
def test_recorded_map_is_the_effective_multiplier(name: str, options: dict) -> None:
    blk = randomized(name, 32, **options)
    x = _input(2, 32, 6, 5)
    with visattn.capture_attention(blk) as maps:
        y = blk(x)
        m = maps[""]
    close(y, x * m)
    assert m.shape[1] in (1, 32) and m.dim() == 4


def test_bam_map_is_m_and_gc_map_is_softmax_weights() -> None:
    x = _input(2, 32, 6, 5)
    bam = randomized("bam", 32)
    with visattn.capture_attention(bam) as maps:
        y = bam(x)
        close(y, x * (1 + maps[""]))
        assert maps[""].shape == x.shape
    gc = randomized("gc", 32)
    with visattn.capture_attention(gc) as maps:
        gc(x)
        a = maps[""]
    assert a.shape == (2, 1, 6, 5)
    close(a.sum((1, 2, 3)), torch.ones(2, dtype=a.dtype))


# ---------------------------------------------------- (2) parameters equal the closed forms


def _eca_k(c: int) -> int:
    t = int(abs(math.log2(c) / 2 + 0.5))
    return t if t % 2 else t + 1


CLOSED_FORMS = {
    "se": lambda c: 2 * c * (c // 16) + c // 16 + c,
    "eca": _eca_k,
    "gsop": lambda c: 5 * c * min(128, c) + 4 * min(128, c) ** 2 + 8 * min(128, c) + c,
    "gc": lambda c: 2 * c * (c // 16) + 3 * (c // 16) + 2 * c + 1,
    "spatial": lambda c: 2 * 7**2 + 1,
    "cbam": lambda c: 2 * c * (c // 16) + c // 16 + c + 2 * 7**2 + 1,
    "bam": lambda c: 3 * c * (c // 16) + 18 * (c // 16) ** 2 + 8 * (c // 16) + 2 * c + 2,
    "scse": lambda c: 2 * c * (c // 2) + c // 2 + 2 * c + 1,
    "coord": lambda c: 3 * c * max(8, c // 32) + 2 * max(8, c // 32) + 2 * c,
}


@pytest.mark.parametrize("name", sorted(CLOSED_FORMS))
@pytest.mark.parametrize("channels", [40, 256, 520])
def test_param_count_matches_docstring_closed_form(name: str, channels: int) -> None:
    blk = visattn.create_block(name, channels)
    assert sum(p.numel() for p in blk.parameters()) == CLOSED_FORMS[name](channels)


# ------------------------------------------------------ (3) structural properties of the papers


def _assert_constant(t: torch.Tensor, dims: tuple[int, ...]) -> None:
    ref = t.amax(dims, keepdim=True)
    close(t, ref.expand_as(t))
    close(t.amin(dims, keepdim=True), ref)


@pytest.mark.parametrize("name", ["se", "eca", "gsop"])
def test_channel_blocks_ratio_constant_over_positions(name: str) -> None:
    blk = randomized(name, 32)
    x = _input(2, 32, 7, 9)
    _assert_constant(blk(x) / x, (2, 3))


@pytest.mark.parametrize("kernel_size", [7, 3])
def test_spatial_gate_ratio_constant_over_channels(kernel_size: int) -> None:
    blk = randomized("spatial", 24, kernel_size=kernel_size)
    x = _input(2, 24, 9, 9)
    _assert_constant(blk(x) / x, (1,))


@pytest.mark.parametrize("combine", ["sum", "product"])
def test_bam_ratio_in_open_interval_1_2(combine: str) -> None:
    blk = randomized("bam", 32, combine=combine)
    x = _input(4, 32, 9, 9)
    ratio = blk(x) / x
    assert ratio.min() > 1 and ratio.max() < 2
    assert ratio.max() - ratio.min() > 0.05  # not a degenerate constant


def test_gc_adds_the_same_vector_at_every_position() -> None:
    blk = randomized("gc", 32)
    x = _input(2, 32, 7, 5)
    _assert_constant(blk(x) - x, (2, 3))


def test_gc_starts_as_identity() -> None:
    blk = visattn.create_block("gc", 32)
    x = torch.randn(2, 32, 5, 5)
    assert torch.equal(blk(x), x)


@pytest.mark.parametrize("name", ["coord", "cbam"])
def test_factorised_blocks_ratio_is_rank_one(name: str) -> None:
    """coord: ratio(c, i, j) = g_h(c, i) g_w(c, j); cbam (parallel): ratio = M_c(c) M_s(i, j)."""
    opts = {"order": "parallel"} if name == "cbam" else {}
    blk = randomized(name, 16, **opts)
    x = _input(2, 16, 5, 6)
    r = blk(x) / x
    if name == "coord":  # r[i, j] r[0, 0] == r[i, 0] r[0, j] for every channel
        close(r * r[:, :, :1, :1], r[:, :, :, :1] * r[:, :, :1, :])
    else:  # r[c, p] r[0, 0] == r[c, 0] r[0, p] with p the flattened position
        r = r.flatten(2)
        close(r * r[:, :1, :1], r[:, :, :1] * r[:, :1, :])


# ------------------------------------------------------------------ (4) GSoP's covariance


def test_gsop_covariance_is_float32_under_bf16_autocast() -> None:
    blk = visattn.create_block("gsop", 32, rd_channels=16).eval()
    seen: dict[str, torch.Tensor] = {}
    blk.act.register_forward_hook(lambda m, i, o: seen.__setitem__("z", o))
    blk.row_norm.register_forward_hook(lambda m, i, o: seen.__setitem__("cov", i[0]))
    x = torch.randn(2, 32, 8, 8)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        y = blk(x)
    z, cov = seen["z"], seen["cov"]
    assert z.dtype == torch.bfloat16  # autocast is really on around the block
    assert cov.dtype == torch.float32 and y.dtype == torch.float32
    # the values are a float32 computation from the bf16 features, not a bf16 one
    zd = z.double().flatten(2)
    zd = zd - zd.mean(2, keepdim=True)
    expected = zd @ zd.transpose(1, 2) / zd.shape[2]
    torch.testing.assert_close(cov.squeeze(-1).double(), expected, rtol=1e-5, atol=1e-6)


class _ShapeRecorder(TorchDispatchMode):
    """Records the shape of every tensor an aten op produces (forward and backward)."""

    def __init__(self) -> None:
        super().__init__()
        self.shapes: list[tuple[str, tuple[int, ...]]] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        for t in out if isinstance(out, (tuple, list)) else (out,):
            if isinstance(t, torch.Tensor):
                self.shapes.append((str(func), tuple(t.shape)))
        return out


def _largest(rec: _ShapeRecorder) -> tuple[int, str]:
    return max((math.prod(s), f"{f} -> {s}") for f, s in rec.shapes)


def test_gsop_never_builds_an_hw_by_hw_tensor() -> None:
    n, c, h, w = 2, 16, 24, 24  # HW = 576: an (HW)^2 tensor would hold 331,776 values
    blk = visattn.create_block("gsop", c, rd_channels=8)
    x = torch.randn(n, c, h, w, requires_grad=True)
    with _ShapeRecorder() as rec:
        blk(x).sum().backward()
    size, where = _largest(rec)
    assert size <= n * c * h * w, where  # O(N C HW + N C'^2): nothing larger than the input
    assert not any(s.count(h * w) >= 2 for _, s in rec.shapes)

    # the detector does see the official code's centring matrix I_hat (M x M)
    with _ShapeRecorder() as rec:
        m = h * w
        z = torch.randn(n, 8, m)
        i_hat = torch.eye(m) / m - torch.full((m, m), 1.0 / m**2)
        z @ i_hat @ z.transpose(1, 2)
    assert _largest(rec)[0] >= m * m


# ----------------------------------------------------------------- (5) impossible options


@pytest.mark.parametrize(
    "name, channels, options, message",
    [
        ("eca", 64, {"kernel_size": 4}, "block 'eca': option 'kernel_size' must be odd"),
        ("eca", 64, {"kernel_size": -3}, "block 'eca': option 'kernel_size' must be a positive"),
        ("eca", 64, {"gamma": 0}, "block 'eca': option 'gamma' must be a positive number"),
        ("gsop", 64, {"rd_channels": 0}, "block 'gsop': option 'rd_channels' must be a positive"),
        ("gc", 8, {"reduction": 16}, "block 'gc': option 'reduction'=16 leaves 0 channels"),
        ("spatial", 8, {"kernel_size": 6}, "block 'spatial': option 'kernel_size' must be odd"),
        ("spatial", 8, {"kernel_size": -7}, "block 'spatial': option 'kernel_size' must be a pos"),
        ("spatial", 8, {"kernel_size": 0}, "block 'spatial': option 'kernel_size' must be a pos"),
        ("cbam", 64, {"order": "sideways"}, "block 'cbam': option 'order' must be one of"),
        ("cbam", 64, {"pool_types": ()}, "block 'cbam': option 'pool_types' must not be empty"),
        ("cbam", 64, {"pool_types": ("avg", "lse")}, "block 'cbam': option 'pool_types' must be"),
        ("cbam", 64, {"pool_types": "avg"}, "block 'cbam': option 'pool_types' must be a non-emp"),
        ("cbam", 64, {"pool_types": ["max", "max"]}, "block 'cbam': option 'pool_types' lists"),
        ("cbam", 64, {"kernel_size": 2}, "block 'cbam': option 'kernel_size' must be odd"),
        ("cbam", 8, {"reduction": 16}, "block 'cbam': option 'reduction'=16 leaves 0 channels"),
        ("bam", 64, {"combine": "mean"}, "block 'bam': option 'combine' must be one of"),
        ("bam", 8, {"reduction": 16}, "block 'bam': option 'reduction'=16 leaves 0 channels"),
        ("bam", 64, {"dilation": 0}, "block 'bam': option 'dilation' must be a positive int"),
        ("scse", 64, {"combine": "mul"}, "block 'scse': option 'combine' must be one of"),
        ("scse", 1, {}, "block 'scse': option 'reduction'=2 leaves 0 channels"),
        ("coord", 64, {"reduction": 0}, "block 'coord': option 'reduction' must be a positive"),
        ("coord", 16, {"min_channels": 0}, "block 'coord': option 'reduction'=32 leaves 0 chan"),
    ],
)
def test_impossible_options_name_block_and_option(
    name: str, channels: int, options: dict, message: str
) -> None:
    with pytest.raises(ValueError, match="^" + message.replace("(", r"\(")):
        visattn.create_block(name, channels, **options)


@pytest.mark.parametrize("name", ["eca", "gsop", "gc", "spatial", "cbam", "bam", "scse", "coord"])
def test_unknown_option_is_a_type_error_naming_the_block(name: str) -> None:
    with pytest.raises(TypeError, match=f"block '{name}': unknown option 'redution'"):
        visattn.create_block(name, 64, redution=4)


def test_cbam_accepts_pool_types_as_list() -> None:  # YAML configs give lists
    assert visattn.create_block("cbam", 64, pool_types=["max", "avg"]).channel.pool_types == (
        "max",
        "avg",
    )
