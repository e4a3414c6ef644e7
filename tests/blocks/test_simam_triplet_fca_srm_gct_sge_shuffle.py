"""SimAM, triplet attention, FcaNet, SRM, GCT, SGE and shuffle attention against their papers.

For each block: the output equals the paper's equations re-computed here with plain torch ops
(loops over positions, groups or channels; batch norm, group norm and the DCT basis written out)
from the block's own weights in float64 with random weights and BN statistics; the parameter count
equals the docstring's closed form; the attention map has the documented shape and is the weight
applied; the official code's behaviour is reached through its option; bad options fail naming the
block and the option. Nothing here calls the blocks' helpers.
"""

from __future__ import annotations

import math
import warnings

import pytest
import torch
import torch.nn.functional as F
from helpers.reference import close, n_params, randn64, randomized, recorded, sigmoid

import visattn

NEW = ("simam", "triplet", "fca", "srm", "gct", "sge", "shuffle")

# --------------------------------------------------------------------------------------- helpers


def _biased_var(t: torch.Tensor, dims) -> torch.Tensor:
    mu = t.mean(dims, keepdim=True)
    return ((t - mu) ** 2).mean(dims, keepdim=True)


# ----------------------------------------------------------------------------------------- SimAM


@pytest.mark.parametrize("variance", ["biased", "unbiased"])
@pytest.mark.parametrize("e_lambda", [1e-4, 0.1])
def test_simam_matches_minimal_energy_eq_5_and_6(variance: str, e_lambda: float) -> None:
    blk = visattn.create_block("simam", 6, e_lambda=e_lambda, variance=variance)
    x = randn64(2, 6, 5, 7)
    m = 5 * 7
    mu = x.mean((2, 3), keepdim=True)
    dev2 = ((x - mu) ** 2).sum((2, 3), keepdim=True)
    sigma2 = dev2 / (m if variance == "biased" else m - 1)  # paper: 1/M; official: n = M - 1
    energy = 4 * (sigma2 + e_lambda) / ((x - mu) ** 2 + 2 * sigma2 + 2 * e_lambda)  # Eq. (5)
    y, a = recorded(blk, x)
    close(a, sigmoid(1.0 / energy))  # Eq. (6): the weight applied is sigmoid(1 / E)
    close(y, x * a)
    assert n_params(blk) == 0


def test_simam_weights_distinctive_neurons_more_and_handles_a_single_position() -> None:
    x = torch.zeros(1, 1, 3, 3, dtype=torch.float64)
    x[0, 0, 1, 1] = 5.0  # one neuron stands out from its channel
    _, a = recorded(visattn.create_block("simam", 1), x)
    assert a[0, 0, 1, 1] > a[0, 0, 0, 0] > 0.5
    for variance in ("biased", "unbiased"):  # 1x1: sigma^2 = 0, weights sigmoid(1/2)
        y = visattn.create_block("simam", 3, variance=variance)(torch.ones(2, 3, 1, 1))
        torch.testing.assert_close(y, torch.full_like(y, 1 / (1 + math.exp(-0.5))))


def test_simam_rejects_bad_options() -> None:
    with pytest.raises(ValueError, match="block 'simam': option 'e_lambda'"):
        visattn.create_block("simam", 8, e_lambda=0)
    with pytest.raises(ValueError, match="block 'simam': option 'variance'"):
        visattn.create_block("simam", 8, variance="sample")


# -------------------------------------------------------------------------------------- triplet


def _conv_loops(z: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    """'Same' zero-padded k x k convolution of (N, 2, A, B) with (1, 2, k, k), as a tap sum."""
    k = weight.shape[-1]
    zp = F.pad(z, (k // 2,) * 4)
    a, b = z.shape[2:]
    out = z.new_zeros(z.shape[0], a, b)
    for i in range(k):
        for j in range(k):
            out = out + torch.einsum(
                "c,ncab->nab", weight[0, :, i, j], zp[:, :, i : i + a, j : j + b]
            )
    return out


def _branch(x_perm: torch.Tensor, branch: torch.nn.Module) -> torch.Tensor:
    """The official branch on an already permuted tensor: Z-pool over dim 1, conv, BN, sigmoid,
    and the gated tensor x_perm * gate."""
    z = torch.stack([x_perm.max(1).values, x_perm.mean(1)], dim=1)  # Z-pool: [max; mean]
    s = _conv_loops(z, branch.conv.weight.detach())
    bn = branch.bn
    s = (s - bn.running_mean) / torch.sqrt(bn.running_var + bn.eps) * bn.weight + bn.bias
    return x_perm * sigmoid(s.detach())[:, None]


@pytest.mark.parametrize("kernel_size", [7, 3])
@pytest.mark.parametrize("no_spatial", [False, True])
def test_triplet_matches_the_three_rotated_branches(kernel_size: int, no_spatial: bool) -> None:
    blk = randomized("triplet", 12, kernel_size=kernel_size, no_spatial=no_spatial)
    x = randn64(2, 12, 6, 9)
    # (C, W) branch: H to the front; (H, C) branch: W to the front (the official permutes)
    out_cw = _branch(x.permute(0, 2, 1, 3), blk.cw).permute(0, 2, 1, 3)
    out_hc = _branch(x.permute(0, 3, 2, 1), blk.hc).permute(0, 3, 2, 1)
    if no_spatial:
        ref = (out_cw + out_hc) / 2
    else:
        ref = (_branch(x, blk.hw) + out_cw + out_hc) / 3  # the average of the three
    y, a = recorded(blk, x)
    close(y, ref)
    assert a.shape == x.shape
    close(y, a * x)
    branches = 2 if no_spatial else 3
    assert n_params(blk) == branches * (2 * kernel_size**2 + 2)


def test_triplet_parameter_count_at_default_is_300_and_rejects_even_kernel() -> None:
    assert n_params(visattn.create_block("triplet", 256)) == 300
    with pytest.raises(ValueError, match="block 'triplet': option 'kernel_size'"):
        visattn.create_block("triplet", 32, kernel_size=4)


# ---------------------------------------------------------------------------------------- FcaNet


def _official_dct_weight(c: int, h: int, w: int, freqs, ortho: bool) -> torch.Tensor:
    """(C, H, W) filters as the paper defines them (Eq. (1)), one frequency per channel part,
    with the official index scaling u * (S // 7) (so only for S a multiple of 7, or 7 itself)."""

    def basis(pos: int, freq: int, size: int) -> float:
        v = math.cos(math.pi * freq * (pos + 0.5) / size)
        if ortho:
            v = v / math.sqrt(size) * (math.sqrt(2) if freq else 1.0)
        return v

    filt = torch.zeros(c, h, w, dtype=torch.float64)
    part = c // len(freqs)
    for k, (u, v) in enumerate(freqs):
        u, v = u * (h // 7), v * (w // 7)
        for i in range(h):
            for j in range(w):
                filt[k * part : (k + 1) * part, i, j] = basis(i, u, h) * basis(j, v, w)
    return filt


def _fca_reference(blk, x: torch.Tensor, filt: torch.Tensor) -> torch.Tensor:
    freq = (x * filt).sum((2, 3))  # Eq. (6)-(7): one DCT component per channel
    hidden = (freq @ blk.fc1.weight.detach().T).clamp_min(0)
    att = sigmoid(hidden @ blk.fc2.weight.detach().T)  # Eq. (8), bias-free FCs
    return x * att[:, :, None, None]


TOP16 = [(0, 0), (0, 1), (6, 0), (0, 5), (0, 2), (1, 0), (1, 2), (4, 0)]  # the paper's first 8


@pytest.mark.parametrize("dct_norm", ["none", "ortho"])
@pytest.mark.parametrize("size", [7, 14])
def test_fca_matches_eqs_6_to_8_with_the_papers_top16(dct_norm: str, size: int) -> None:
    freqs = visattn.blocks.fca.frequency_indices("top16")
    assert freqs[:8] == TOP16 and len(freqs) == 16
    blk = randomized("fca", 32, dct_norm=dct_norm)
    x = randn64(2, 32, size, size)
    filt = _official_dct_weight(32, size, size, freqs, dct_norm == "ortho")
    y, a = recorded(blk, x)
    close(y, _fca_reference(blk, x, filt))
    assert a.shape == (2, 32, 1, 1)
    close(y, a * x)
    assert n_params(blk) == 2 * 32 * (32 // 16)


def test_fca_official_fixed_dct_size_pools_other_sizes_first() -> None:
    freqs = visattn.blocks.fca.frequency_indices("low4")
    blk = randomized("fca", 16, freq_sel="low4", dct_size=7, dct_norm="ortho", reduction=4)
    filt = _official_dct_weight(16, 7, 7, freqs, ortho=True)
    for h, w in [(8, 13), (1, 1), (7, 7), (30, 20)]:
        x = randn64(2, 16, h, w)
        pooled = F.adaptive_avg_pool2d(x, 7)
        att = _fca_reference(blk, pooled, filt)[:, :, :1, :1] / pooled[:, :, :1, :1]
        close(blk(x), x * att)


def test_fca_gap_special_case_and_uneven_channel_split() -> None:
    # top1 is (0, 0): Freq = H W * GAP (Sec. 3.2), SE's squeeze up to scale
    blk = randomized("fca", 8, freq_sel="top1", reduction=4, dct_norm="none")
    x = randn64(2, 8, 5, 6)
    hidden = (30 * x.mean((2, 3)) @ blk.fc1.weight.detach().T).clamp_min(0)
    close(blk(x), x * sigmoid(hidden @ blk.fc2.weight.detach().T)[:, :, None, None])
    # C = 72 with 16 frequencies: channel c takes frequency floor(16 c / 72); at 7x7 the mapped
    # index floor(u 7 / 7) = u
    blk = randomized("fca", 72, freq_sel="top16", dct_norm="none")
    freqs = visattn.blocks.fca.frequency_indices("top16")
    x = randn64(2, 72, 7, 7)
    filt = torch.stack(
        [_official_dct_weight(1, 7, 7, [freqs[16 * c // 72]], False)[0] for c in range(72)]
    )
    close(blk(x), _fca_reference(blk, x, filt))


def test_fca_maps_frequencies_to_any_size() -> None:
    # at 8x13 the index u on the 7-grid becomes floor(u * S / 7) on each axis
    blk = randomized("fca", 16, freq_sel="bot16", reduction=4, dct_norm="none")
    freqs = visattn.blocks.fca.frequency_indices("bot16")
    assert freqs[0] == (6, 6)
    x = randn64(2, 16, 8, 13)
    filt = torch.zeros(16, 8, 13, dtype=torch.float64)
    for c, (u, v) in enumerate(freqs):
        u8, v13 = u * 8 // 7, v * 13 // 7
        for i in range(8):
            for j in range(13):
                filt[c, i, j] = math.cos(math.pi * u8 * (i + 0.5) / 8) * math.cos(
                    math.pi * v13 * (j + 0.5) / 13
                )
    close(blk(x), _fca_reference(blk, x, filt))


@pytest.mark.parametrize(
    "options, match",
    [
        ({"freq_sel": "top3"}, "option 'freq_sel'"),
        ({"freq_sel": "mid16"}, "option 'freq_sel'"),
        ({"freq_sel": "top32"}, "option 'freq_sel'='top32' selects 32 frequencies"),
        ({"dct_norm": "l2"}, "option 'dct_norm'"),
        ({"dct_size": (7, 0)}, "option 'dct_size'"),
    ],
)
def test_fca_rejects_bad_options(options: dict, match: str) -> None:
    with pytest.raises(ValueError, match=f"block 'fca': {match}"):
        visattn.create_block("fca", 16, **options)


# ------------------------------------------------------------------------------------------- SRM


@pytest.mark.parametrize("std", ["biased", "unbiased"])
def test_srm_matches_style_pooling_and_integration(std: str) -> None:
    blk = randomized("srm", 10, std=std)
    x = randn64(3, 10, 4, 5)
    mu = x.mean((2, 3))  # style pooling
    if std == "biased":  # the paper's 1/(HW)
        sigma = torch.sqrt(((x - mu[:, :, None, None]) ** 2).sum((2, 3)) / 20)
    else:  # the official code: torch.std
        sigma = x.flatten(2).std(dim=2)
    w = blk.cfc.detach()
    z = w[:, 0] * mu + w[:, 1] * sigma  # style integration: channel-wise fully connected
    bn = blk.bn
    z = (z - bn.running_mean) / torch.sqrt(bn.running_var + bn.eps) * bn.weight + bn.bias
    g = sigmoid(z.detach())  # BN, then the gate
    y, a = recorded(blk, x)
    close(a, g[:, :, None, None])
    close(y, x * a)


def test_srm_parameter_count_initial_gate_and_bad_option() -> None:
    blk = visattn.create_block("srm", 256)
    assert n_params(blk) == 4 * 256
    x = torch.randn(4, 256, 3, 3)
    torch.testing.assert_close(blk.train()(x), 0.5 * x)  # w = 0: the gate starts at 1/2
    with pytest.raises(ValueError, match="block 'srm': option 'std'"):
        visattn.create_block("srm", 8, std="sample")


# ------------------------------------------------------------------------------------------- GCT


@pytest.mark.parametrize("mode", ["l2", "l1"])
def test_gct_matches_eqs_1_to_3(mode: str) -> None:
    blk = randomized("gct", 12, mode=mode)
    x = randn64(2, 12, 5, 4)
    alpha, gamma, beta = (p.detach().flatten() for p in (blk.alpha, blk.gamma, blk.beta))
    eps = blk.eps
    if mode == "l2":
        s = alpha * torch.sqrt((x**2).sum((2, 3)) + eps)  # Eq. (1)
        s_hat = math.sqrt(12) * s / torch.sqrt((s**2).sum(1, keepdim=True) + eps)  # Eq. (2)
    else:
        s = alpha * x.abs().sum((2, 3))
        s_hat = 12 * s / (s.abs().sum(1, keepdim=True) + eps)
    gate = 1 + torch.tanh(gamma * s_hat + beta)  # Eq. (3)
    y, a = recorded(blk, x)
    close(a, gate[:, :, None, None])
    close(y, x * a)


@pytest.mark.parametrize("mode", ["l2", "l1"])
def test_gct_official_norm_adds_eps_to_the_channel_mean(mode: str) -> None:
    """The official code's normalisation (z-x-yang/GCT, PyTorch/GCT.py), written out; a large
    eps makes it differ visibly from the paper's form."""
    eps = 0.5
    blk = randomized("gct", 12, mode=mode, eps=eps, norm="official")
    paper = randomized("gct", 12, mode=mode, eps=eps)
    paper.load_state_dict(blk.state_dict())
    x = randn64(2, 12, 5, 4) * 0.1
    alpha, gamma, beta = (p.detach().flatten() for p in (blk.alpha, blk.gamma, blk.beta))
    if mode == "l2":
        s = alpha * torch.sqrt((x**2).sum((2, 3)) + eps)
        s_hat = s / torch.sqrt((s**2).mean(1, keepdim=True) + eps)
    else:
        s = alpha * x.abs().sum((2, 3))
        s_hat = s / (s.abs().mean(1, keepdim=True) + eps)
    gate = 1 + torch.tanh(gamma * s_hat + beta)
    close(blk(x), x * gate[:, :, None, None])
    assert (paper(x) - blk(x)).abs().max() > 1e-4
    with pytest.raises(ValueError, match="block 'gct': option 'norm'"):
        visattn.create_block("gct", 8, norm="mean")


def test_gct_starts_as_the_identity_and_counts_3c_parameters() -> None:
    blk = visattn.create_block("gct", 64)
    assert n_params(blk) == 3 * 64
    x = torch.randn(2, 64, 6, 6)
    torch.testing.assert_close(blk(x), x, rtol=0, atol=0)  # gamma = beta = 0 (paper's init)
    with torch.no_grad():
        blk.gamma.fill_(1.0)
    assert (blk(x) - x).abs().max() > 1e-2
    with pytest.raises(ValueError, match="block 'gct': option 'mode'"):
        visattn.create_block("gct", 8, mode="linf")
    with pytest.raises(ValueError, match="block 'gct': option 'eps'"):
        visattn.create_block("gct", 8, eps=-1.0)


# ------------------------------------------------------------------------------------------- SGE


@pytest.mark.parametrize("std", ["biased", "unbiased"])
def test_sge_matches_sec_3(std: str) -> None:
    groups = 4
    blk = randomized("sge", 12, groups=groups, std=std)
    x = randn64(2, 12, 5, 6)
    m = 12 // groups
    out = torch.empty_like(x)
    gates = torch.empty_like(x)
    for k in range(groups):
        xk = x[:, k * m : (k + 1) * m]  # (N, m, H, W)
        g = xk.mean((2, 3))  # global feature
        c = torch.einsum("nm,nmhw->nhw", g, xk).flatten(1)  # importance g . x_i
        mu = c.mean(1, keepdim=True)
        if std == "biased":
            sigma = torch.sqrt(((c - mu) ** 2).mean(1, keepdim=True))  # paper: 1/(HW)
        else:
            sigma = c.std(1, keepdim=True)  # the official code
        c_hat = (c - mu) / (sigma + blk.eps)
        a = blk.weight.detach()[0, k, 0, 0] * c_hat + blk.bias.detach()[0, k, 0, 0]
        gate = sigmoid(a).view(2, 1, 5, 6)
        out[:, k * m : (k + 1) * m] = xk * gate
        gates[:, k * m : (k + 1) * m] = gate
    y, amap = recorded(blk, x)
    close(y, out)
    close(amap, gates)
    assert n_params(blk) == 2 * groups


@pytest.mark.parametrize("channels, groups", [(256, 64), (32, 32), (72, 36), (7, 7), (67, 1)])
def test_sge_default_groups_rule(channels: int, groups: int) -> None:
    blk = visattn.create_block("sge", channels)
    assert blk.groups == groups and n_params(blk) == 2 * groups


def test_sge_rejects_groups_that_do_not_divide() -> None:
    with pytest.raises(ValueError, match="block 'sge': option 'groups'=5"):
        visattn.create_block("sge", 32, groups=5)
    with pytest.raises(ValueError, match="block 'sge': option 'std'"):
        visattn.create_block("sge", 32, std="sample")


# --------------------------------------------------------------------------------------- shuffle


def test_shuffle_matches_eqs_1_to_3_and_the_channel_shuffle() -> None:
    groups, c, h, w = 3, 12, 5, 4
    blk = randomized("shuffle", c, groups=groups)
    x = randn64(2, c, h, w)
    half = c // (2 * groups)
    cw, cb, sw, sb = (
        p.detach().flatten() for p in (blk.cweight, blk.cbias, blk.sweight, blk.sbias)
    )
    gn_w, gn_b = blk.gn.weight.detach(), blk.gn.bias.detach()
    pre = torch.empty_like(x)  # [X'_k1, X'_k2] for every group k, in order
    gates = torch.empty_like(x)
    for k in range(groups):
        for j in range(half):
            ch = k * 2 * half + j  # channel branch, Eqs. (1)-(2)
            s = x[:, ch].mean((1, 2), keepdim=True)
            gates[:, ch] = sigmoid(cw[j] * s + cb[j]).expand(2, h, w)
            ch = k * 2 * half + half + j  # spatial branch, Eq. (3): GN over the channel's map
            xs = x[:, ch]
            mu, var = xs.mean((1, 2), keepdim=True), _biased_var(xs, (1, 2))
            gn = (xs - mu) / torch.sqrt(var + blk.gn.eps) * gn_w[j] + gn_b[j]
            gates[:, ch] = sigmoid(sw[j] * gn + sb[j])
    pre = x * gates
    ref = torch.empty_like(x)
    for i in range(2):  # channel shuffle with 2 groups: channel j of half i goes to 2 j + i
        for j in range(c // 2):
            ref[:, 2 * j + i] = pre[:, i * (c // 2) + j]
    y, amap = recorded(blk, x)
    close(y, ref)
    close(amap, gates)
    assert n_params(blk) == 3 * c // groups


@pytest.mark.parametrize("channels, groups", [(256, 64), (2048, 64), (32, 16), (72, 36), (2, 1)])
def test_shuffle_default_groups_rule(channels: int, groups: int) -> None:
    blk = visattn.create_block("shuffle", channels)
    assert blk.groups == groups and n_params(blk) == 3 * channels // groups


def test_shuffle_rejects_channel_counts_it_cannot_split() -> None:
    with pytest.raises(ValueError, match="block 'shuffle': option 'groups'=3"):
        visattn.create_block("shuffle", 32, groups=3)
    with pytest.raises(ValueError, match="block 'shuffle': option 'groups'"):
        visattn.create_block("shuffle", 33)


# ------------------------------------------------------------------------------- all seven blocks


@pytest.mark.parametrize("name", NEW)
def test_torchscript_and_fx_trace_match_eager_at_other_sizes(name: str) -> None:
    """Scripted and fx-traced blocks (traced once, at 8x13) compute the eager output at 8x13, 1x1
    and 14x14: no size is baked into the graph."""
    blk = randomized(name, 32).float()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)  # torch.jit.script is deprecated
        scripted = torch.jit.script(blk)
    traced = torch.fx.symbolic_trace(blk)
    for size in ((8, 13), (1, 1), (14, 14)):
        x = torch.randn(2, 32, *size)
        with torch.no_grad():
            ref = blk(x)
            torch.testing.assert_close(scripted(x), ref, rtol=1e-5, atol=1e-6)
            torch.testing.assert_close(traced(x), ref, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("name", NEW)
def test_docstring_closed_form_is_registered_in_block_info(name: str) -> None:
    info = visattn.block_info(name)
    assert info.cls.__doc__ and "Parameters" in info.cls.__doc__
    assert info.family in {"channel", "spatial", "hybrid"}
