"""The conv-replacing blocks (sk, splat, lambda, mhsa, halo) against timm and their papers.

* timm twins: the visattn block and timm's module (``SelectiveKernel``, ``SplitAttn``,
  ``LambdaLayer``, ``BottleneckAttn``, ``HaloAttn``) with matching options get the same weights
  and must give the same outputs and input gradients in train and eval mode (float32, tight
  tolerance), including stride 2 and ``out_channels != channels``.
* papers: each block's output equals the paper's equation re-computed here from the block's weights
  with plain loops and einsums (float64), without the blocks' helpers.
* the closed-form parameter counts of the docstrings, the recorded attention maps, output sizes
  of odd maps under stride (those of a padded strided conv) and option errors.
"""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F
from helpers.weights import randomize
from timm.layers.bottleneck_attn import BottleneckAttn
from timm.layers.halo_attn import HaloAttn
from timm.layers.lambda_layer import LambdaLayer
from timm.layers.selective_kernel import SelectiveKernel
from timm.layers.split_attn import SplitAttn
from twins import TWINS, check_twin

import visattn

CONV_BLOCKS = ("sk", "splat", "lambda", "mhsa", "halo")

# --------------------------------------------------------------------------------------- helpers


@torch.no_grad()
def _copy_by_order(src: nn.Module, dst: nn.Module) -> None:
    a = [v for v in src.state_dict().values() if v.is_floating_point()]
    b = [v for v in dst.state_dict().values() if v.is_floating_point()]
    assert [t.numel() for t in a] == [t.numel() for t in b], (
        [tuple(t.shape) for t in a],
        [tuple(t.shape) for t in b],
    )
    for s, d in zip(a, b):
        d.copy_(s.reshape(d.shape))


@torch.no_grad()
def _copy_attention(src: nn.Module, dst: nn.Module) -> None:
    """mhsa/halo -> BottleneckAttn/HaloAttn: projections and the relative tables by name."""
    for name in ("qkv", "q", "kv"):
        if hasattr(src, name):
            getattr(dst, name).weight.copy_(getattr(src, name).weight)
    dst.pos_embed.height_rel.copy_(src.rel_h)
    dst.pos_embed.width_rel.copy_(src.rel_w)


def _assert_twins(block: nn.Module, twin: nn.Module, x: torch.Tensor) -> None:
    """Same outputs and input gradients in train mode (BN batch statistics), then in eval."""
    gy = None
    for train in (True, False):
        block.train(train)
        twin.train(train)
        xa, xb = x.clone().requires_grad_(), x.clone().requires_grad_()
        ya, yb = block(xa), twin(xb)
        assert ya.shape == yb.shape
        torch.testing.assert_close(ya, yb, rtol=1e-5, atol=1e-5)
        gy = torch.randn_like(ya) if gy is None or gy.shape != ya.shape else gy
        ya.backward(gy)
        yb.backward(gy)
        torch.testing.assert_close(xa.grad, xb.grad, rtol=1e-5, atol=1e-5)


def _bn(t: torch.Tensor, bn: nn.Module) -> torch.Tensor:
    """Eval-mode BN over axis 1 written out."""
    shape = (1, -1) + (1,) * (t.dim() - 2)

    def v(a: torch.Tensor) -> torch.Tensor:
        return a.detach().view(shape)

    return (t - v(bn.running_mean)) / torch.sqrt(v(bn.running_var) + bn.eps) * v(bn.weight) + v(
        bn.bias
    )


def _softmax(t: torch.Tensor, dim: int) -> torch.Tensor:
    e = torch.exp(t - t.amax(dim, keepdim=True))
    return e / e.sum(dim, keepdim=True)


def _mat(conv: nn.Module) -> torch.Tensor:
    return conv.weight.detach().flatten(1)


def _x(n: int, c: int, h: int, w: int, seed: int = 1) -> torch.Tensor:
    return torch.randn(n, c, h, w, generator=torch.Generator().manual_seed(seed))


def _ref_block(name: str, channels: int, **options) -> nn.Module:
    return randomize(visattn.create_block(name, channels, **options).double(), 0).eval()


# ------------------------------------------------------------------------------- timm: sk


@pytest.mark.parametrize("stride", (1, 2))
@pytest.mark.parametrize("out", (32, 48))
@pytest.mark.parametrize("split_input", (True, False))
def test_sk_equals_timm_selective_kernel(stride: int, out: int, split_input: bool) -> None:
    block = randomize(
        visattn.create_block(
            "sk", 32, out_channels=out, stride=stride, split_input=split_input, rd_channels=16
        ),
        0,
    )
    twin = SelectiveKernel(32, out, stride=stride, rd_channels=16, split_input=split_input)
    _copy_by_order(block, twin)
    _assert_twins(block, twin, _x(4, 32, 10, 9))


def test_sk_paper_width_differs_from_timms_rounding() -> None:
    """d = max(C'/r, L): 32 for C'=256, r=16, L=32; timm's make_divisible(256/16, 8) gives 16."""
    blk = visattn.create_block("sk", 256)
    assert blk.rd_channels == 32
    assert SelectiveKernel(256, 256).attn.fc_reduce.out_channels == 16


# ------------------------------------------------------------------------------ timm: splat


@pytest.mark.parametrize("stride", (1, 2))
@pytest.mark.parametrize(("radix", "groups", "out"), [(2, 1, 32), (1, 1, 48), (4, 2, 64)])
def test_splat_equals_timm_split_attn(stride: int, radix: int, groups: int, out: int) -> None:
    block = randomize(
        visattn.create_block(
            "splat", 32, out_channels=out, stride=stride, radix=radix, groups=groups
        ),
        0,
    )
    # timm multiplies rd_channels by the radix
    twin = SplitAttn(
        32,
        out,
        stride=stride,
        radix=radix,
        groups=groups,
        rd_channels=block.rd_channels // radix,
        norm_layer=nn.BatchNorm2d,
    )
    _copy_by_order(block, twin)
    _assert_twins(block, twin, _x(4, 32, 9, 10))


# ----------------------------------------------------------------------------- timm: lambda


@pytest.mark.parametrize("stride", (1, 2))
@pytest.mark.parametrize("r", (3, 9))
def test_lambda_equals_timm_lambda_layer(stride: int, r: int) -> None:
    """timm's conv3d has a bias (``pos_bias=True``). timm reshapes its output to the *input*
    channels, so it only works for ``out_channels == channels``; visattn's other widths are
    checked against the paper below."""
    block = randomize(visattn.create_block("lambda", 32, stride=stride, r=r, pos_bias=True), 0)
    twin = LambdaLayer(32, stride=stride, r=r)
    _copy_by_order(block, twin)
    _assert_twins(block, twin, _x(4, 32, 8, 10))


# ------------------------------------------------------------------------------- timm: mhsa


@pytest.mark.parametrize("stride", (1, 2))
@pytest.mark.parametrize("out", (32, 64))
@pytest.mark.parametrize("scale_pos", (True, False))
def test_mhsa_equals_timm_bottleneck_attn(stride: int, out: int, scale_pos: bool) -> None:
    block = randomize(
        visattn.create_block(
            "mhsa", 32, out_channels=out, stride=stride, feat_size=(8, 6), scale_pos=scale_pos
        ),
        0,
    )
    twin = BottleneckAttn(32, out, feat_size=(8, 6), stride=stride, scale_pos_embed=scale_pos)
    _copy_attention(block, twin)
    _assert_twins(block, twin, _x(4, 32, 8, 6))


# ------------------------------------------------------------------------------- timm: halo


@pytest.mark.parametrize(
    ("stride", "avg_down"), [(1, False), (2, False), (2, True)], ids=["s1", "s2_query", "s2_avg"]
)
@pytest.mark.parametrize("out", (32, 64))
@pytest.mark.parametrize("scale_pos", (True, False))
def test_halo_equals_timm_halo_attn(stride: int, avg_down: bool, out: int, scale_pos: bool) -> None:
    opts = dict(block_size=4, halo_size=1, scale_pos=scale_pos, avg_down=avg_down)
    block = randomize(
        visattn.create_block(
            "halo", 32, out_channels=out, stride=stride, heads=4, rel_pos="query_grid", **opts
        ),
        0,
    )
    twin = HaloAttn(
        32,
        out,
        stride=stride,
        num_heads=4,
        block_size=4,
        halo_size=1,
        scale_pos_embed=scale_pos,
        avg_down=avg_down,
    )
    _copy_attention(block, twin)
    _assert_twins(block, twin, _x(3, 32, 8, 12))


def test_halo_default_block_equals_timm_on_multiples_of_the_block() -> None:
    block = randomize(visattn.create_block("halo", 64, scale_pos=False), 0)
    twin = HaloAttn(64, 64)  # 8 heads, block 8, halo 3
    _copy_attention(block, twin)
    _assert_twins(block, twin, _x(2, 64, 16, 8))


@pytest.mark.parametrize("name", CONV_BLOCKS)
@pytest.mark.parametrize("size", ((8, 8), (14, 14)), ids=("8x8", "14x14"))
def test_table_twins_compute_the_same_function_at_the_benchmark_sizes(name: str, size) -> None:
    """The package's twins (:data:`visattn.blocks.twins.TWINS`, which the benchmark times),
    with the options sized to each map."""
    twin = TWINS[name]
    block = visattn.create_block(name, 32, **twin.block_options((2, 32, *size)))
    check = check_twin(block, twin.build(block, 32), twin, 32, size)
    assert check.startswith("same"), check


# ------------------------------------------------------------------------- papers: equations


def test_sk_follows_split_fuse_select_equations() -> None:
    """Eq. (1)-(4): U = sum_m U_m, s = GAP(U), z = ReLU(BN(W s)), a = softmax_m(A_m z),
    V = sum_m a_m U_m, with the 5x5 path as a 3x3 conv of dilation 2."""
    blk = _ref_block("sk", 16, out_channels=24, stride=2, rd_channels=8)
    x = _x(2, 16, 9, 8).double()
    paths = []
    for path, dil in zip(blk.paths, (1, 2)):
        conv, bn = path[0], path[1]
        u = F.conv2d(x, conv.weight.detach(), stride=2, padding=dil, dilation=dil)
        paths.append(_bn(u, bn).clamp_min(0))
    s = (paths[0] + paths[1]).mean((2, 3))  # (N, C')
    z = _bn(torch.einsum("dc,nc->nd", _mat(blk.fc_reduce), s), blk.bn).clamp_min(0)
    logits = torch.einsum("oc,nc->no", _mat(blk.fc_select), z).view(2, 2, 24)  # (N, M, C')
    a = _softmax(logits, 1)
    ref = a[:, 0, :, None, None] * paths[0] + a[:, 1, :, None, None] * paths[1]
    with torch.no_grad():
        torch.testing.assert_close(blk(x), ref, rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize(("radix", "groups"), [(2, 1), (2, 2), (3, 2), (1, 2)])
def test_splat_follows_cardinal_group_equations(radix: int, groups: int) -> None:
    """Eq. (1)-(3) per cardinal group k and split i, written with loops over k and i: the conv
    group of (k, i) is i*G + k (radix-major layout), a_i^k = softmax_i G_i^c(s^k) (sigmoid for
    R = 1), V^k = sum_i a_i^k U_i^k, V = concat_k V^k."""
    c, out = 12, 12
    blk = _ref_block("splat", c, out_channels=out, radix=radix, groups=groups, rd_channels=8)
    x = _x(2, c, 7, 6).double()
    w = blk.conv.weight.detach()
    cin, cout, d = c // (groups * radix), out // groups, 8 // groups
    bn0 = blk.bn0
    u = {}
    for k in range(groups):
        for i in range(radix):
            g = i * groups + k
            rows = slice(g * cout, (g + 1) * cout)
            z = F.conv2d(x[:, g * cin : (g + 1) * cin], w[rows], padding=1)
            mean, var = bn0.running_mean[rows], bn0.running_var[rows]
            z = (z - mean.view(1, -1, 1, 1)) / torch.sqrt(var.view(1, -1, 1, 1) + bn0.eps)
            z = z * bn0.weight[rows].view(1, -1, 1, 1) + bn0.bias[rows].view(1, -1, 1, 1)
            u[k, i] = z.detach().clamp_min(0)
    fc1, fc2, bn1 = _mat(blk.fc1), _mat(blk.fc2), blk.bn1
    out_groups = []
    for k in range(groups):
        s = sum(u[k, i] for i in range(radix)).mean((2, 3))  # (N, C'/G)
        hid = (
            torch.einsum("dc,nc->nd", fc1[k * d : (k + 1) * d], s)
            + blk.fc1.bias[k * d : (k + 1) * d].detach()
        )
        rows = slice(k * d, (k + 1) * d)
        hid = (hid - bn1.running_mean[rows]) / torch.sqrt(bn1.running_var[rows] + bn1.eps)
        hid = (hid * bn1.weight[rows] + bn1.bias[rows]).detach().clamp_min(0)
        base = k * radix * cout
        logits = torch.stack(
            [
                torch.einsum("cd,nd->nc", fc2[base + i * cout : base + (i + 1) * cout], hid)
                + blk.fc2.bias[base + i * cout : base + (i + 1) * cout].detach()
                for i in range(radix)
            ],
            dim=1,
        )  # (N, R, C'/G)
        a = _softmax(logits, 1) if radix > 1 else 1 / (1 + torch.exp(-logits))
        out_groups.append(sum(a[:, i, :, None, None] * u[k, i] for i in range(radix)))
    with torch.no_grad():
        torch.testing.assert_close(blk(x), torch.cat(out_groups, 1), rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize(("out", "stride", "pos_bias"), [(24, 1, False), (16, 2, True)])
def test_lambda_follows_content_and_position_lambdas(out: int, stride: int, pos_bias: bool) -> None:
    """y_n^h = (lambda_c + lambda_p_n)^T q_n^h with lambda_c = softmax_m(K) V^T and
    lambda_p_n = sum_m E_(n-m) v_m over the r x r scope (positions outside the map absent)."""
    heads, dk, r = 2, 4, 3
    blk = _ref_block(
        "lambda", 12, out_channels=out, stride=stride, heads=heads, dim_k=dk, r=r, pos_bias=pos_bias
    )
    dv = out // heads
    n, h, w = 2, 5, 4
    x = _x(n, 12, h, w).double()
    proj = torch.einsum("oc,nchw->nohw", _mat(blk.qkv), x)
    q = _bn(proj[:, : heads * dk], blk.norm_q).view(n, heads, dk, h, w)
    k = proj[:, heads * dk : heads * dk + dk].reshape(n, dk, h * w)
    v = _bn(proj[:, heads * dk + dk :], blk.norm_v)  # (N, |v|, H, W)
    kbar = _softmax(k, -1)
    lam_c = torch.einsum("nkm,nvm->nkv", kbar, v.reshape(n, dv, h * w))
    e = blk.pos_conv.weight.detach()[:, 0]  # (|k|, r, r)
    bias = blk.pos_conv.bias.detach() if pos_bias else torch.zeros(dk, dtype=x.dtype)
    y = torch.zeros(n, heads, dv, h, w, dtype=x.dtype)
    for yy in range(h):
        for xx in range(w):
            lam_p = bias[None, :, None].expand(n, dk, dv).clone()
            for a in range(-(r // 2), r // 2 + 1):
                for b in range(-(r // 2), r // 2 + 1):
                    if 0 <= yy + a < h and 0 <= xx + b < w:
                        ek = e[:, a + r // 2, b + r // 2]  # (|k|,)
                        lam_p += ek[None, :, None] * v[:, None, :, yy + a, xx + b]
            lam = lam_c + lam_p  # (N, |k|, |v|)
            y[..., yy, xx] = torch.einsum("nkv,nhk->nhv", lam, q[..., yy, xx])
    ref = y.reshape(n, out, h, w)
    if stride == 2:
        ref = F.avg_pool2d(ref, 2, 2, ceil_mode=True)
    with torch.no_grad():
        torch.testing.assert_close(blk(x), ref, rtol=1e-10, atol=1e-10)


def _mhsa_reference(blk: nn.Module, x: torch.Tensor) -> torch.Tensor:
    """Fig. 4 of BoTNet with the reference code's scaling, one query at a time; relative offsets
    clipped to the table."""
    n, _, h, w = x.shape
    heads, d, out = blk.heads, blk.dim_head, blk.out_channels
    dv = out // heads
    hf, wf = blk.feat_size
    proj = torch.einsum("oc,nchw->nohw", _mat(blk.qkv), x)
    q = proj[:, : heads * d].reshape(n, heads, d, h, w)
    k = proj[:, heads * d : 2 * heads * d].reshape(n, heads, d, h, w)
    v = proj[:, 2 * heads * d :].reshape(n, heads, dv, h, w)
    rel_h, rel_w = blk.rel_h.detach(), blk.rel_w.detach()
    y = torch.zeros(n, heads, dv, h, w, dtype=x.dtype)
    for yi in range(h):
        for xi in range(w):
            logits = torch.zeros(n, heads, h, w, dtype=x.dtype)
            for yj in range(h):
                for xj in range(w):
                    oy = min(max(yj - yi, -(hf - 1)), hf - 1) + hf - 1
                    ox = min(max(xj - xi, -(wf - 1)), wf - 1) + wf - 1
                    key = k[..., yj, xj] + rel_h[oy] + rel_w[ox]  # (N, heads, d)
                    logits[..., yj, xj] = (q[..., yi, xi] * key).sum(-1) / math.sqrt(d)
            a = _softmax(logits.reshape(n, heads, -1), -1).view(n, heads, 1, h, w)
            y[..., yi, xi] = (a * v).sum((-1, -2))
    y = y.reshape(n, out, h, w)
    return F.avg_pool2d(y, 2, 2, ceil_mode=True) if blk.stride == 2 else y


@pytest.mark.parametrize(
    ("size", "feat"),
    [((4, 5), (4, 5)), ((3, 2), (4, 5)), ((5, 7), (3, 4))],
    ids=["equal", "smaller", "larger"],
)
def test_mhsa_follows_relative_attention_any_size(size, feat) -> None:
    """The input may be the table's size, smaller (central rows) or larger (clipped offsets)."""
    blk = _ref_block("mhsa", 8, out_channels=12, heads=2, dim_head=3, feat_size=feat)
    x = _x(2, 8, *size).double()
    with torch.no_grad():
        torch.testing.assert_close(blk(x), _mhsa_reference(blk, x), rtol=1e-10, atol=1e-10)


def test_mhsa_stride_two_is_attention_then_2x2_average_pool() -> None:
    blk = _ref_block("mhsa", 8, stride=2, heads=2, feat_size=5)
    x = _x(1, 8, 5, 4).double()
    with torch.no_grad():
        torch.testing.assert_close(blk(x), _mhsa_reference(blk, x), rtol=1e-10, atol=1e-10)


def _halo_reference(blk: nn.Module, x: torch.Tensor) -> torch.Tensor:
    """Per query: its b x b block's (b + 2h)^2 window (zero keys/values outside the map),
    offsets on the image grid, BoTNet-style scaling."""
    n, _, h, w = x.shape
    heads, d, out = blk.heads, blk.dim_head, blk.out_channels
    dv = out // heads
    b, halo, win, s = blk.block_size, blk.halo_size, blk.win_size, blk.query_stride
    q = torch.einsum("oc,nchw->nohw", _mat(blk.q), x).reshape(n, heads, d, h, w)
    kv = torch.einsum("oc,nchw->nohw", _mat(blk.kv), x).reshape(n, heads, d + dv, h, w)
    rel_h, rel_w = blk.rel_h.detach(), blk.rel_w.detach()
    ho, wo = -(-h // s), -(-w // s)
    y = torch.zeros(n, heads, dv, ho, wo, dtype=x.dtype)
    for yo in range(ho):
        for xo in range(wo):
            yi, xi = yo * s, xo * s  # the query's pixel
            y0, x0 = (yi // b) * b - halo, (xi // b) * b - halo  # its window's corner
            logits = torch.zeros(n, heads, win * win, dtype=x.dtype)
            vals = torch.zeros(n, heads, win * win, dv, dtype=x.dtype)
            for i in range(win):
                for j in range(win):
                    ky, kx = y0 + i, x0 + j
                    inside = 0 <= ky < h and 0 <= kx < w
                    key = kv[:, :, :d, ky, kx] if inside else torch.zeros(n, heads, d)
                    if inside:
                        vals[:, :, i * win + j] = kv[:, :, d:, ky, kx]
                    # table row: offset on the image + (halo + win - 1)
                    key = key + rel_h[ky - yi + halo + win - 1] + rel_w[kx - xi + halo + win - 1]
                    logits[..., i * win + j] = (q[..., yi, xi] * key).sum(-1) / math.sqrt(d)
            a = _softmax(logits, -1)
            y[..., yo, xo] = torch.einsum("nhk,nhkv->nhv", a, vals)
    y = y.reshape(n, out, ho, wo)
    return (
        F.avg_pool2d(y, blk.pool_stride, blk.pool_stride, ceil_mode=True)
        if (blk.pool_stride > 1)
        else y
    )


@pytest.mark.parametrize(
    ("size", "stride", "avg_down"),
    [((8, 8), 1, False), ((7, 5), 1, False), ((7, 6), 2, False), ((5, 7), 2, True)],
    ids=["multiple", "padded", "strided_queries", "avg_down"],
)
def test_halo_follows_blocked_local_attention(size, stride: int, avg_down: bool) -> None:
    blk = _ref_block(
        "halo",
        8,
        out_channels=12,
        stride=stride,
        heads=2,
        dim_head=3,
        block_size=4,
        halo_size=1,
        avg_down=avg_down,
    )
    x = _x(2, 8, *size).double()
    with torch.no_grad():
        torch.testing.assert_close(blk(x), _halo_reference(blk, x), rtol=1e-10, atol=1e-10)


# ----------------------------------------------------------------------- parameter counts


def _params(name: str, c: int, **options) -> int:
    return sum(p.numel() for p in visattn.create_block(name, c, **options).parameters())


@pytest.mark.parametrize(
    ("c", "o", "options"),
    [
        (64, 64, {}),
        (64, 128, {"split_input": True}),
        (32, 48, {"groups": 4, "reduction": 4}),
        (64, 64, {"groups": (1, 32), "kernel_sizes": (3, 3)}),
    ],
)
def test_sk_parameter_count_closed_form(c: int, o: int, options: dict) -> None:
    m, g = 2, options.get("groups", 1)
    groups = g if isinstance(g, tuple) else (g,) * m
    d = max(o // options.get("reduction", 16), 32)
    cp = c // m if options.get("split_input") else c
    expected = sum(9 * cp * o // g + 2 * o for g in groups) + o * d + 2 * d + d * m * o
    assert _params("sk", c, out_channels=o, **options) == expected


@pytest.mark.parametrize(
    ("c", "o", "r", "g", "norm"),
    [(64, 64, 2, 1, True), (64, 128, 4, 2, True), (32, 32, 1, 1, False)],
)
def test_splat_parameter_count_closed_form(c: int, o: int, r: int, g: int, norm: bool) -> None:
    d = max(c * r // 4, 32)
    expected = c * o * 9 // g + 3 * r * o + 3 * d + (o * d + d * r * o) // g
    if not norm:
        expected -= 2 * r * o + 2 * d
    assert _params("splat", c, out_channels=o, radix=r, groups=g, norm=norm) == expected


@pytest.mark.parametrize(("c", "o", "pos_bias"), [(64, 64, False), (32, 72, True)])
def test_lambda_parameter_count_closed_form(c: int, o: int, pos_bias: bool) -> None:
    h, k, r = 4, 16, 23
    d = k * (h + 1) + o // h
    expected = c * d + 2 * h * k + 2 * o // h + k * r * r + (k if pos_bias else 0)
    assert _params("lambda", c, out_channels=o, pos_bias=pos_bias) == expected


@pytest.mark.parametrize(("c", "o", "feat"), [(64, 64, 14), (32, 72, (7, 9))])
def test_mhsa_parameter_count_closed_form(c: int, o: int, feat) -> None:
    h = 4
    d = o // h
    hf, wf = (feat, feat) if isinstance(feat, int) else feat
    expected = c * (2 * h * d + o) + (2 * hf - 1 + 2 * wf - 1) * d
    assert _params("mhsa", c, out_channels=o, feat_size=feat) == expected


@pytest.mark.parametrize(("c", "o", "b", "halo"), [(64, 64, 8, 3), (32, 72, 4, 2)])
def test_halo_parameter_count_closed_form(c: int, o: int, b: int, halo: int) -> None:
    h = 8
    d, win = o // h, b + 2 * halo
    expected = c * (2 * h * d + o) + 2 * (2 * win - 1) * d
    assert _params("halo", c, out_channels=o, block_size=b, halo_size=halo) == expected


# ------------------------------------------------------------------------ contract details


@pytest.mark.parametrize("name", CONV_BLOCKS)
def test_strided_output_size_matches_a_padded_strided_conv(name: str) -> None:
    """A block at ``conv`` must produce the shortcut's size, ceil(H / 2), on odd maps too."""
    blk = visattn.create_block(name, 16, out_channels=32, stride=2).eval()
    ref = nn.Conv2d(16, 32, 3, stride=2, padding=1)
    for size in ((7, 7), (8, 5), (1, 1)):
        x = _x(1, 16, *size)
        assert blk(x).shape == ref(x).shape, (name, size)


@pytest.mark.parametrize("name", CONV_BLOCKS)
def test_capture_records_the_documented_map(name: str) -> None:
    blk = randomize(visattn.create_block(name, 16, out_channels=24, stride=2), 0).eval()
    x = _x(3, 16, 9, 8)
    with visattn.capture_attention(blk) as maps:
        blk(x)
    m = maps[""]
    if name in ("sk", "splat"):  # weight of the first path / split, per output channel
        assert m.shape == (3, 24, 1, 1)
        assert ((m >= 0) & (m <= 1)).all()
    else:  # where the attention (lambda: the normalised keys) goes, on the input grid
        assert m.shape == (3, 1, 9, 8)
        total = m.sum((1, 2, 3))
        if name == "halo":  # the share given to the zero padding is not shown
            assert (total > 0).all() and (total <= 1 + 1e-6).all()
        else:
            torch.testing.assert_close(total, torch.ones(3))


def test_sk_and_splat_maps_are_the_first_paths_weight() -> None:
    """With two paths (splits) the output is a * U_1 + (1 - a) * U_2 for the recorded a."""
    x = _x(2, 16, 6, 6).double()
    for name in ("sk", "splat"):
        blk = _ref_block(name, 16)
        with torch.no_grad(), visattn.capture_attention(blk) as maps:
            y = blk(x)
            if name == "sk":
                u = [p(x) for p in blk.paths]
            else:
                u = blk.act0(blk.bn0(blk.conv(x))).chunk(2, dim=1)
        a = maps[""]
        assert a.shape == (2, 16, 1, 1) and ((a > 0) & (a < 1)).all()
        torch.testing.assert_close(y, a * u[0] + (1 - a) * u[1], rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize(
    ("name", "options", "match"),
    [
        ("sk", {"kernel_sizes": (3,)}, "kernel_sizes"),
        ("sk", {"kernel_sizes": (3, 4)}, "kernel_sizes"),
        ("sk", {"groups": 5}, "groups"),
        ("sk", {"groups": (1, 2, 4)}, "one per path"),
        ("sk", {"groups": (1, 0)}, "groups"),
        ("sk", {"split_input": True, "kernel_sizes": (3, 5, 7)}, "split_input"),
        ("splat", {"radix": 0}, "radix"),
        ("splat", {"groups": 5}, "groups"),
        ("lambda", {"heads": 5}, "heads"),
        ("lambda", {"r": 4}, "'r'"),
        ("mhsa", {"stride": 3}, "stride"),
        ("mhsa", {"heads": 5}, "heads"),
        ("mhsa", {"feat_size": (4, 5, 6)}, "feat_size"),
        ("halo", {"halo_size": -1}, "halo_size"),
        ("halo", {"rel_pos": "grid"}, "rel_pos"),
        ("halo", {"out_channels": 0}, "out_channels"),
    ],
)
def test_bad_options_name_block_and_option(name: str, options: dict, match: str) -> None:
    with pytest.raises(ValueError, match=rf"block '{name}'.*{match}"):
        visattn.create_block(name, 32, **options)


@pytest.mark.parametrize("name", CONV_BLOCKS)
def test_block_info_says_it_replaces_a_conv(name: str) -> None:
    info = visattn.block_info(name)
    assert info.replaces_conv
    assert {"out_channels", "stride"} <= set(info.defaults)
    with pytest.raises(ValueError, match="init='identity'"):
        visattn.create_block(name, 32, out_channels=64, init="identity")


# ------------------------------------------------------------- named models (specs as data)
# Which residual blocks get which block at position ``conv``: (stage, block index) -> options.
# The placement itself belongs to the model factory; here the convs of a torchvision ResNet are
# swapped by hand, only to check that the specs reach the published parameter counts.


def _swap_convs(model: nn.Module, name: str, spec) -> nn.Module:
    """Replace the middle conv (Bottleneck conv2 / BasicBlock conv1) of the blocks ``spec``
    selects with ``name``, keeping channels and stride; blocks whose output is already
    normalised and activated (sk, splat) take the following BN's place."""
    for stage in (1, 2, 3, 4):
        for i, blk in enumerate(getattr(model, f"layer{stage}")):
            options = spec(stage, i)
            if options is None:
                continue
            attr, bn = ("conv2", "bn2") if hasattr(blk, "conv3") else ("conv1", "bn1")
            conv = getattr(blk, attr)
            new = visattn.create_block(
                name,
                conv.in_channels,
                out_channels=conv.out_channels,
                stride=conv.stride[0],
                **options,
            )
            setattr(blk, attr, new)
            if getattr(new, "includes_norm_act", False):
                setattr(blk, bn, nn.Identity())
    return model


def _count(model: nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())


def _sk_timm(stage: int, i: int) -> dict:
    # timm's skresnet18/34: rd_ratio 1/8, rd_divisor 16, split_input=True
    return {"reduction": 8, "min_rd_channels": 16, "split_input": True}


@pytest.mark.parametrize(
    ("arch", "timm_name"), [("resnet18", "skresnet18"), ("resnet34", "skresnet34")]
)
def test_sk_resnet_spec_matches_timm_parameter_count(arch: str, timm_name: str) -> None:
    import timm
    import torchvision

    model = _swap_convs(getattr(torchvision.models, arch)(), "sk", _sk_timm)
    assert _count(model) == _count(timm.create_model(timm_name))  # 11,958,056 / 22,282,376
    with torch.no_grad():
        assert model.eval()(torch.randn(1, 3, 64, 64)).shape == (1, 1000)


def _bot50(stage: int, i: int) -> dict | None:
    # BoT50: MHSA (4 heads) in the three c5 blocks; at 224x224 the first sees 14x14, then 7x7
    return {"heads": 4, "feat_size": 14 if i == 0 else 7} if stage == 4 else None


def _lambda50(stage: int, i: int) -> dict:
    # LambdaResNet-50 (paper Table 3): every 3x3 conv, |k|=16, |h|=4, |u|=1, scope 23
    return {"heads": 4, "dim_k": 16, "r": 23}


@pytest.mark.parametrize(
    ("name", "spec", "published"),
    [("mhsa", _bot50, 20.8e6), ("lambda", _lambda50, 15.0e6)],
    ids=["botnet50", "lambda_resnet50"],
)
def test_bottleneck_specs_match_the_papers_parameter_counts(name, spec, published) -> None:
    import torchvision

    model = _swap_convs(torchvision.models.resnet50(), name, spec)
    # the papers give three digits: LambdaResNet-50 measures 15.00M (15.0M), BoT50 20.85M
    # (20.8M published: a match if the paper truncates, 0.05M over if it rounds)
    assert abs(_count(model) - published) < 0.06e6, _count(model)
    with torch.no_grad():
        assert model.eval()(torch.randn(1, 3, 64, 64)).shape == (1, 1000)
