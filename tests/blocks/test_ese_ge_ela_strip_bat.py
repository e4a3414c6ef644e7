"""ese, ge, ela, strip and bat against their papers: the output equals the paper's equations
re-computed here with plain torch ops from the block's own weights (float64, eval mode, random
weights and BN statistics), the parameter count equals the docstring's closed form, and the map
each block records has the documented shape and meaning.

The references avoid the blocks' code paths: pooling windows, depthwise convolutions, GroupNorm
and BN are written out, and BAT's transform builds the paper's Kronecker matrices explicitly.
"""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from helpers.reference import bn_eval, conv1x1, n_params, randn64, randomized, recorded

import visattn


def _strip_conv(z: torch.Tensor, weight: torch.Tensor, groups: int) -> torch.Tensor:
    """1-D conv along the last axis of ``z`` (N, C, L), zero padding k // 2, ``groups`` groups;
    ``weight`` holds (C_out, C_in / groups, k) numbers in any (k, 1)/(1, k) layout."""
    n, c, length = z.shape
    k = weight.numel() // (c * (c // groups))
    w = weight.reshape(c, c // groups, k)
    zp = torch.cat([z.new_zeros(n, c, k // 2), z, z.new_zeros(n, c, k // 2)], dim=2)
    cg = c // groups
    out = z.new_zeros(n, c, length)
    for o in range(c):
        g = o // cg
        for j in range(cg):
            for t in range(k):
                out[:, o] += w[o, j, t] * zp[:, g * cg + j, t : t + length]
    return out


def _group_norm(z: torch.Tensor, groups: int, gn: torch.nn.Module) -> torch.Tensor:
    """GroupNorm of (N, C, L) written out: statistics over each group's C/G x L values."""
    n, c, length = z.shape
    zg = z.reshape(n, groups, -1)
    mean = zg.mean(-1, keepdim=True)
    var = zg.var(-1, unbiased=False, keepdim=True)
    zn = ((zg - mean) / torch.sqrt(var + gn.eps)).reshape(n, c, length)
    return zn * gn.weight.view(1, c, 1) + gn.bias.view(1, c, 1)


# --------------------------------------------------------------------------------------------- ese


def test_ese_matches_pool_fc_gate() -> None:
    blk = randomized("ese", 24)
    x = randn64(2, 24, 7, 9)
    a = torch.sigmoid(conv1x1(x.mean((2, 3), keepdim=True), blk.fc))
    y, m = recorded(blk, x)
    torch.testing.assert_close(y, x * a)
    assert m.shape == (2, 24, 1, 1)
    torch.testing.assert_close(m, a)


def test_ese_hard_sigmoid_gate_is_relu6_form() -> None:
    blk = randomized("ese", 16, gate_layer="hard_sigmoid")
    x = randn64(2, 16, 5, 5)
    z = conv1x1(x.mean((2, 3), keepdim=True), blk.fc)
    with torch.no_grad():
        torch.testing.assert_close(blk(x), x * (z + 3).clamp(0, 6) / 6)


@pytest.mark.parametrize("channels", [16, 72, 256])
def test_ese_param_count(channels: int) -> None:
    assert n_params(visattn.create_block("ese", channels)) == channels**2 + channels


# ---------------------------------------------------------------------------------------------- ge


def _avg_window(x: torch.Tensor, e: int) -> torch.Tensor:
    """Average over windows 2e-1 wide with stride e and padding e-1, padded cells not counted."""
    n, c, h, w = x.shape
    ho, wo = (h - 1) // e + 1, (w - 1) // e + 1
    out = x.new_zeros(n, c, ho, wo)
    for i in range(ho):
        r0, r1 = max(i * e - (e - 1), 0), min(i * e + e, h)
        for j in range(wo):
            c0, c1 = max(j * e - (e - 1), 0), min(j * e + e, w)
            out[:, :, i, j] = x[:, :, r0:r1, c0:c1].mean((2, 3))
    return out


def _nearest(g: torch.Tensor, h: int, w: int) -> torch.Tensor:
    rows = [math.floor(r * g.shape[2] / h) for r in range(h)]
    cols = [math.floor(c * g.shape[3] / w) for c in range(w)]
    return g[:, :, rows][:, :, :, cols]


def _dw3x3_s2(x: torch.Tensor, conv: torch.nn.Module) -> torch.Tensor:
    """Depthwise 3x3 conv, stride 2, zero padding 1, written out."""
    n, c, h, w = x.shape
    xp = F.pad(x, (1, 1, 1, 1))
    ho, wo = (h - 1) // 2 + 1, (w - 1) // 2 + 1
    k = conv.weight.detach().view(c, 3, 3)
    out = x.new_zeros(n, c, ho, wo)
    for a in range(3):
        for b in range(3):
            out += k[:, a, b].view(1, c, 1, 1) * xp[:, :, a : a + 2 * ho : 2, b : b + 2 * wo : 2]
    return out


def _mlp(g: torch.Tensor, mlp: torch.nn.Module) -> torch.Tensor:
    return conv1x1(torch.relu(conv1x1(g, mlp[0])), mlp[2])


@pytest.mark.parametrize("extent", ["global", 2, 4, 8])
def test_ge_theta_minus_is_parameter_free_pooling_interpolation_sigmoid(extent) -> None:
    blk = visattn.create_block("ge", 8, variant="minus", extent=extent).double().eval()
    assert n_params(blk) == 0
    x = randn64(2, 8, 15, 13)
    if extent == "global":
        g = x.mean((2, 3), keepdim=True)
    else:
        g = _nearest(_avg_window(x, extent), 15, 13)
    y, m = recorded(blk, x)
    torch.testing.assert_close(y, x * torch.sigmoid(g))
    assert m.shape == ((2, 8, 1, 1) if extent == "global" else (2, 8, 15, 13))
    torch.testing.assert_close(x * m, y)


@pytest.mark.parametrize("extent", [2, 4])
@pytest.mark.parametrize("variant", ["theta", "plus"])
def test_ge_theta_and_theta_plus_match_strided_depthwise_gather(variant: str, extent: int) -> None:
    blk = randomized("ge", 32, variant=variant, extent=extent)
    x = randn64(2, 32, 11, 9)
    convs = [m for m in blk.gather if isinstance(m, torch.nn.Conv2d)]
    bns = [m for m in blk.gather if isinstance(m, torch.nn.BatchNorm2d)]
    assert len(convs) == len(bns) == int(math.log2(extent))
    g = x
    for i, (conv, bn) in enumerate(zip(convs, bns)):
        g = bn_eval(_dw3x3_s2(g, conv), bn)
        if i < len(convs) - 1:
            g = torch.relu(g)
    if variant == "plus":
        g = _mlp(g, blk.mlp)
    with torch.no_grad():
        torch.testing.assert_close(blk(x), x * torch.sigmoid(_nearest(g, 11, 9)))


def test_ge_global_parametric_gather_covers_the_whole_map() -> None:
    blk = randomized("ge", 16, variant="plus", extent="global", feat_size=(7, 9))
    x = randn64(2, 16, 7, 9)
    k = blk.gather[0].weight.detach().view(16, 7, 9)
    g = bn_eval(torch.einsum("chw,nchw->nc", k, x).view(2, 16, 1, 1), blk.gather[1])
    with torch.no_grad():
        torch.testing.assert_close(blk(x), x * torch.sigmoid(_mlp(g, blk.mlp)))
    with pytest.raises(ValueError, match=r"block 'ge'.*7x9"):
        blk(randn64(2, 16, 8, 9))


@pytest.mark.parametrize(
    ("options", "closed_form"),
    [
        ({}, lambda c, cr: 33 * c + 2 * c * cr + cr + c),
        ({"variant": "theta", "extent": 4}, lambda c, cr: 22 * c),
        ({"variant": "minus", "extent": 8}, lambda c, cr: 0),
        ({"variant": "minus", "mlp": True}, lambda c, cr: 2 * c * cr + cr + c),
        ({"variant": "theta", "extent": "global", "feat_size": (7, 5)}, lambda c, cr: 37 * c),
    ],
)
@pytest.mark.parametrize("channels", [32, 256])
def test_ge_param_count(options: dict, closed_form, channels: int) -> None:
    blk = visattn.create_block("ge", channels, **options)
    assert n_params(blk) == closed_form(channels, channels // 16)


@pytest.mark.parametrize(
    ("options", "match"),
    [
        ({"variant": "theta", "extent": 6}, "option 'extent'=6.*power of 2"),
        ({"extent": 1}, "option 'extent'"),
        ({"variant": "plus", "extent": "global"}, "option 'feat_size'"),
        ({"variant": "minus", "feat_size": (7, 7)}, "option 'feat_size'"),
        ({"variant": "plus", "mlp": False}, "option 'mlp'"),
        ({"variant": "theta+"}, "option 'variant'"),
    ],
)
def test_ge_impossible_options_name_block_and_option(options: dict, match: str) -> None:
    with pytest.raises(ValueError, match="block 'ge': " + match):
        visattn.create_block("ge", 32, **options)


# --------------------------------------------------------------------------------------------- ela


def _ela_ref(blk, x: torch.Tensor, groups: int, conv_groups: int, act=lambda t: t):
    z_h, z_w = x.mean(3), x.mean(2)  # (N, C, H), (N, C, W)
    conv_w = blk.conv_h if blk.conv_w is None else blk.conv_w
    norm_w = blk.norm_h if blk.norm_w is None else blk.norm_w
    w_h, w_w = blk.conv_h.weight.detach(), conv_w.weight.detach()
    y_h = torch.sigmoid(act(_group_norm(_strip_conv(z_h, w_h, conv_groups), groups, blk.norm_h)))
    y_w = torch.sigmoid(act(_group_norm(_strip_conv(z_w, w_w, conv_groups), groups, norm_w)))
    return y_h.unsqueeze(3) * y_w.unsqueeze(2)


@pytest.mark.parametrize(
    ("channels", "options", "groups", "conv_groups"),
    [
        (32, {}, 16, 32),  # ELA-B, shared conv and GN (authors' code)
        (72, {}, 8, 72),  # gcd(16, 72) = 8 GroupNorm groups
        (32, {"kernel_size": 5, "num_groups": 32}, 32, 32),  # ELA-T
        (32, {"conv_groups": 4}, 16, 4),  # ELA-S/L: conv groups C // 8
        (32, {"shared": False}, 16, 32),
    ],
)
def test_ela_matches_strip_conv_groupnorm_gates(
    channels: int, options: dict, groups: int, conv_groups: int
):
    blk = randomized("ela", channels, **options)
    x = randn64(2, channels, 9, 6)
    a = _ela_ref(blk, x, groups, conv_groups)
    y, m = recorded(blk, x)
    torch.testing.assert_close(y, x * a)
    assert m.shape == (2, channels, 9, 6)
    torch.testing.assert_close(m, a)


def test_ela_timm_options_put_silu_between_norm_and_gate() -> None:
    blk = randomized("ela", 16, shared=False, num_groups=1, act_layer="silu")
    x = randn64(2, 16, 6, 7)
    with torch.no_grad():
        torch.testing.assert_close(blk(x), x * _ela_ref(blk, x, 1, 16, F.silu))


@pytest.mark.parametrize(
    ("options", "closed_form"),
    [
        ({}, lambda c: 7 * c + 2 * c),
        ({"shared": False}, lambda c: 2 * 7 * c + 4 * c),
        ({"kernel_size": 5, "conv_groups": 8}, lambda c: 5 * c * c // 8 + 2 * c),
    ],
)
@pytest.mark.parametrize("channels", [32, 64, 256])
def test_ela_param_count(options: dict, closed_form, channels: int) -> None:
    assert n_params(visattn.create_block("ela", channels, **options)) == closed_form(channels)


def test_ela_rejects_conv_groups_that_do_not_divide_channels() -> None:
    with pytest.raises(ValueError, match="block 'ela': option 'conv_groups'"):
        visattn.create_block("ela", 32, conv_groups=5)


# ------------------------------------------------------------------------------------------- strip


@pytest.mark.parametrize("options", [{}, {"kernel_size": 5, "bias": True}, {"use_conv": False}])
def test_strip_is_gated_sum_of_refined_strip_pools(options: dict) -> None:
    blk = randomized("strip", 12, **options)
    x = randn64(2, 12, 8, 5)
    z_h, z_w = x.mean(3), x.mean(2)
    if options.get("use_conv", True):
        b_h = 0 if blk.conv_h.bias is None else blk.conv_h.bias.detach().view(1, -1, 1)
        b_w = 0 if blk.conv_w.bias is None else blk.conv_w.bias.detach().view(1, -1, 1)
        z_h = _strip_conv(z_h, blk.conv_h.weight.detach(), 12) + b_h
        z_w = _strip_conv(z_w, blk.conv_w.weight.detach(), 12) + b_w
    a = torch.sigmoid(z_h.unsqueeze(3) + z_w.unsqueeze(2))
    y, m = recorded(blk, x)
    torch.testing.assert_close(y, x * a)
    torch.testing.assert_close(m, a)


@pytest.mark.parametrize("channels", [32, 256])
def test_strip_param_count(channels: int) -> None:
    c = channels
    assert n_params(visattn.create_block("strip", c)) == 2 * 3 * c
    assert n_params(visattn.create_block("strip", c, kernel_size=5, bias=True)) == 10 * c + 2 * c
    assert n_params(visattn.create_block("strip", c, use_conv=False)) == 0


# --------------------------------------------------------------------------------------------- bat


def _cbr(t: torch.Tensor, seq: torch.nn.Module) -> torch.Tensor:
    return torch.relu(bn_eval(conv1x1(t, seq[0]), seq[1]))


def _adaptive_max(a: torch.Tensor, s: int, axis: int) -> torch.Tensor:
    """Adaptive max pooling of axis 2 (rows) or 3 (columns) to s bins, the other axis to 1."""
    size = a.shape[axis]
    bins = []
    for i in range(s):
        lo, hi = (i * size) // s, -((-(i + 1) * size) // s)
        bins.append(a.narrow(axis, lo, hi - lo).amax(dim=(2, 3)))
    return torch.stack(bins, dim=2)  # (N, G, s)


def _kron_identity(m: torch.Tensor, t: int) -> torch.Tensor:
    """(N, G, s, s) -> (N, G, s t, s t): each matrix Kronecker-multiplied by I_t."""
    eye = torch.eye(t, dtype=m.dtype)
    return torch.einsum("ngij,ab->ngiajb", m, eye).reshape(*m.shape[:2], m.shape[2] * t, -1)


def _bat_ref(blk, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """z = x + phi_2(conv2(P' X Q')) with P', Q' the paper's Kronecker-expanded transforms;
    sizes that are not multiples of s are zero-padded for the transform and cropped."""
    ba, s, g = blk.ba, blk.ba.block_size, blk.ba.groups
    xl = _cbr(x, blk.conv1)
    n, c, h, w = xl.shape
    a = _cbr(xl, ba.conv1)  # (N, G, H, W)
    rp, cp = _adaptive_max(a, s, 2), _adaptive_max(a, s, 3)  # (N, G, s)
    # conv_p: kernel (s, 1) over the s row bins, G -> s*s*G outputs
    p = torch.einsum("ogs,ngs->no", ba.conv_p.weight.detach().view(-1, g, s), rp)
    q = torch.einsum("ogs,ngs->no", ba.conv_q.weight.detach().view(-1, g, s), cp)
    p = torch.sigmoid(p + ba.conv_p.bias).view(n, g, s, s)
    q = torch.sigmoid(q + ba.conv_q.bias).view(n, g, s, s)
    p, q = p / p.sum(3, keepdim=True), q / q.sum(2, keepdim=True)
    hp, wp = -(-h // s) * s, -(-w // s) * s
    xp = F.pad(xl, (0, wp - w, 0, hp - h)).view(n, g, c // g, hp, wp)
    big_p, big_q = _kron_identity(p, hp // s), _kron_identity(q, wp // s)
    y = torch.einsum("ngij,ngcjk,ngkl->ngcil", big_p, xp, big_q).reshape(n, c, hp, wp)
    y = _cbr(y[:, :, :h, :w], ba.conv2)
    return x + _cbr(y, blk.conv2), p, q


@pytest.mark.parametrize("size", [(14, 14), (7, 21), (15, 9), (3, 4)])
def test_bat_matches_bilinear_transform_with_kronecker_matrices(size) -> None:
    blk = randomized("bat", 32)
    x = randn64(2, 32, *size)
    ref, _, _ = _bat_ref(blk, x)
    with torch.no_grad():
        torch.testing.assert_close(blk(x), ref)


def test_bat_transforms_are_normalised_and_map_is_received_attention() -> None:
    blk = randomized("bat", 32, groups=4, block_size=4)
    x = randn64(2, 32, 8, 12)
    _, p, q = _bat_ref(blk, x)
    torch.testing.assert_close(p.sum(3), torch.ones_like(p.sum(3)))
    torch.testing.assert_close(q.sum(2), torch.ones_like(q.sum(2)))
    _, m = recorded(blk, x)
    assert m.shape == (2, 1, 8, 12)
    torch.testing.assert_close(m.sum((2, 3)), torch.ones(2, 1, dtype=m.dtype))
    # received weight of (a, b): column sum of P kron I_2 at a times row sum of Q kron I_3 at b
    rows = p.sum(2).repeat_interleave(2, dim=2)
    cols = q.sum(3).repeat_interleave(3, dim=2)
    r = (rows.unsqueeze(3) * cols.unsqueeze(2)).mean(1, keepdim=True)
    torch.testing.assert_close(m, r / r.sum((2, 3), keepdim=True))


def test_bat_transforms_stay_finite_where_every_sigmoid_of_a_row_underflows() -> None:
    """Logits of -1000 make sigmoid 0 (in float64 as in float32): the paper's P / P.sum() is
    0/0 there (an untrained ResNet-56 in eval mode gave NaN); the same normalised sigmoid,
    computed as a softmax of log sigmoid, is the uniform row, and equals P / P.sum() where
    that is finite."""
    blk = randomized("bat", 32, groups=4, block_size=4).eval()
    x = randn64(2, 32, 8, 12)
    with torch.no_grad():
        xl = blk.conv1(x)
        p, _ = blk.ba.transforms(xl)
        z = blk.ba.conv_p(F.adaptive_max_pool2d(blk.ba.conv1(xl), (4, 1)))
        direct = z.view(2, 4, 4, 4).sigmoid()
        torch.testing.assert_close(p, direct / direct.sum(3, keepdim=True))
        blk.ba.conv_p.bias.fill_(-1000.0)
        blk.ba.conv_p.weight.zero_()
        zero = torch.zeros(1, 4, 4, 1, dtype=x.dtype)
        assert (blk.ba.conv_p(zero).sigmoid() == 0).all()  # it underflows
        p, _ = blk.ba.transforms(xl)
        torch.testing.assert_close(p, torch.full_like(p, 0.25))
        assert torch.isfinite(blk(x)).all()


@pytest.mark.parametrize(
    ("channels", "options"), [(32, {}), (256, {}), (72, {"groups": 3, "block_size": 4})]
)
def test_bat_param_count(channels: int, options: dict) -> None:
    c, cr = channels, channels // 2  # the authors' r = 2 and 4 groups
    g, s = options.get("groups", 4), options.get("block_size", 7)
    closed = 2 * c * cr + cr**2 + cr * g + 4 * cr + 2 * g + 2 * s**3 * g**2 + 2 * s**2 * g + 2 * c
    assert n_params(visattn.create_block("bat", c, **options)) == closed


def test_bat_dropout_only_in_training_and_rejects_bad_options() -> None:
    blk = visattn.create_block("bat", 32, drop_rate=0.5).eval()
    x = randn64(2, 32, 7, 7).float()
    with torch.no_grad():
        torch.testing.assert_close(blk(x), blk(x))
    with pytest.raises(ValueError, match="block 'bat': option 'groups'"):
        visattn.create_block("bat", 32, groups=3)
    with pytest.raises(ValueError, match="block 'bat': option 'drop_rate'"):
        visattn.create_block("bat", 32, drop_rate=1.0)


# ------------------------------------------------------------ identity forms of non-default options


@pytest.mark.parametrize(
    ("name", "options"),
    [
        ("ge", {"variant": "minus", "extent": 4}),
        ("ge", {"variant": "theta", "extent": 2}),
        ("ge", {"variant": "minus", "mlp": True}),
        ("ela", {"shared": False, "act_layer": "silu"}),
        ("strip", {"use_conv": False}),
        ("ese", {"gate_layer": "hard_sigmoid"}),
        ("bat", {"drop_rate": 0.2}),
        ("eca", {"mlp": True, "padding": "circular"}),
        ("gc", {"fusion": "scale"}),
        ("gc", {"fusion": "both", "pool": "avg"}),
        ("cbam", {"light": True, "use_bn": True}),
        ("spatial", {"use_bn": True}),
        ("coord", {"simple": True}),
        ("scse", {"combine": "max"}),
        ("bam", {"combine": "product"}),
    ],
)
def test_identity_form_holds_for_non_default_options(name: str, options: dict) -> None:
    blk = visattn.create_block(name, 32, init="identity", **options)
    assert type(blk) is visattn.block_info(name).cls  # a native form, not the generic wrapper
    x = torch.randn(2, 32, 9, 11)
    for mode in (True, False):
        with torch.no_grad():
            torch.testing.assert_close(blk.train(mode)(x), x, rtol=0, atol=1e-6)
    blk.train()
    (blk(x) * torch.randn_like(x)).sum().backward()
    assert any(p.grad is not None and p.grad.abs().sum() > 0 for p in blk.parameters())
    plain = visattn.create_block(name, 32, **options).eval()
    with torch.no_grad():
        assert (plain(x) - x).abs().max() > 1e-3  # the default init is not the identity


def test_gc_average_pooling_records_uniform_weights() -> None:
    blk = visattn.create_block("gc", 16, pool="avg", fusion="scale").eval()
    x = torch.randn(2, 16, 5, 6)
    _, m = recorded(blk, x)
    assert m.shape == (2, 1, 5, 6)
    torch.testing.assert_close(m, torch.full_like(m, 1 / 30))
