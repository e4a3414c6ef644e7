"""danet, cc, a2, psa, ema and external against their papers.

Each block's output equals its paper's equations re-computed here from the block's own weights
(float64, eval mode, every parameter and BN statistic random), written with plain loops and
``einsum`` and hand-written softmax/LayerNorm/GroupNorm/BatchNorm, never with the blocks' helpers.
Also: the closed-form parameter counts of the docstrings, what each block records for
``capture_attention``, the official-code options, TorchScript and ``torch.fx`` equal to eager,
and errors that name the block and the option.
"""

from __future__ import annotations

import warnings

import pytest
import torch
import torch.nn.functional as F
from helpers.reference import close, conv1x1, n_params, randn64, randomized, sigmoid

import visattn

# --------------------------------------------------------------------------------------- helpers


def _softmax(t: torch.Tensor, dim: int) -> torch.Tensor:
    e = torch.exp(t - t.amax(dim, keepdim=True))
    return e / e.sum(dim, keepdim=True)


# ------------------------------------------------------------------------------------- danet


def _danet_reference(blk, x: torch.Tensor, fusion: str, cam_logits: str) -> torch.Tensor:
    n, c, h, w = x.shape
    q = conv1x1(x, blk.query).flatten(2)  # (N, d, P)
    k = conv1x1(x, blk.key).flatten(2)
    v = conv1x1(x, blk.value).flatten(2)
    s = _softmax(torch.einsum("ndj,ndi->nji", q, k), dim=2)  # Eq. (1): s_ji over i
    p = torch.einsum("nji,nci->ncj", s, v)  # Eq. (2) without alpha and residual
    a = x.flatten(2)
    energy = torch.einsum("njp,nip->nji", a, a)  # A_j . A_i
    if cam_logits == "negated":
        energy = energy.amax(2, keepdim=True) - energy
    g = _softmax(energy, dim=2)  # Eq. (3)
    qc = torch.einsum("nji,nip->njp", g, a)  # Eq. (4) without beta and residual
    alpha, beta = blk.alpha.detach(), blk.beta.detach()
    e_pos = (alpha * p + a).reshape(n, c, h, w)
    e_ch = (beta * qc + a).reshape(n, c, h, w)
    return (e_pos + e_ch) / 2 if fusion == "mean" else e_pos + e_ch


@pytest.mark.parametrize("fusion", ["mean", "sum"])
@pytest.mark.parametrize("cam_logits", ["energy", "negated"])
def test_danet_matches_eqs_1_to_4(fusion: str, cam_logits: str) -> None:
    blk = randomized("danet", 32, fusion=fusion, cam_logits=cam_logits)
    x = randn64(2, 32, 5, 6) * 0.3  # CAM's raw energies stay in a non-saturated range
    close(blk(x), _danet_reference(blk, x, fusion, cam_logits))


def test_danet_negated_logits_differ_from_the_paper() -> None:
    x = randn64(2, 16, 4, 4) * 0.3
    paper = randomized("danet", 16)
    official = randomized("danet", 16, cam_logits="negated")
    assert (paper(x) - official(x)).abs().max() > 1e-3


def test_danet_starts_as_identity_and_learns() -> None:
    blk = visattn.create_block("danet", 32)
    assert blk.alpha.item() == 0 and blk.beta.item() == 0
    x = torch.randn(2, 32, 6, 5)
    assert torch.equal(blk(x), x)
    blk(x).square().sum().backward()
    assert blk.alpha.grad.abs() > 0 and blk.beta.grad.abs() > 0
    assert torch.equal(visattn.create_block("danet", 32, fusion="sum")(x), 2 * x)


def test_danet_records_received_position_or_channel_attention() -> None:
    x = randn64(2, 16, 5, 4) * 0.3
    for record, shape in (("position", (2, 1, 5, 4)), ("channel", (2, 16, 1, 1))):
        blk = randomized("danet", 16, record=record)
        with visattn.capture_attention(blk) as maps:
            blk(x)
        m = maps[""]
        assert m.shape == shape
        close(m.sum((1, 2, 3)), torch.ones(2, dtype=m.dtype))
    # the position map is PAM's s averaged over queries
    blk = randomized("danet", 16)
    q = conv1x1(x, blk.query).flatten(2)
    k = conv1x1(x, blk.key).flatten(2)
    s = _softmax(torch.einsum("ndj,ndi->nji", q, k), dim=2)
    with visattn.capture_attention(blk) as maps:
        blk(x)
    close(maps[""], s.mean(1).reshape(2, 1, 5, 4))


# ---------------------------------------------------------------------------------------- cc


def _cc_step_dense(blk, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """One criss-cross step with a loop over positions. Returns the step's output and its dense
    (N, HW, HW) weights (zero off each query's criss-cross path)."""
    n, _, h, w = x.shape
    q, k, v = conv1x1(x, blk.query), conv1x1(x, blk.key), conv1x1(x, blk.value)
    dense = x.new_zeros(n, h * w, h * w)
    out = torch.zeros_like(x)
    for i in range(h):
        for j in range(w):
            # Omega_u: the column without the query itself, then the whole row (H + W - 1 keys)
            keys = [(g, j) for g in range(h) if g != i] + [(i, t) for t in range(w)]
            logits = torch.stack(
                [torch.einsum("nd,nd->n", q[:, :, i, j], k[:, :, a, b]) for a, b in keys], dim=1
            )
            att = _softmax(logits, dim=1)  # (N, H + W - 1)
            for idx, (a, b) in enumerate(keys):
                out[:, :, i, j] += att[:, idx, None] * v[:, :, a, b]
                dense[:, i * w + j, a * w + b] += att[:, idx]
    gamma = blk.gamma.detach() if blk.gamma is not None else 1.0
    return x + gamma * out, dense


@pytest.mark.parametrize("recurrence", [1, 2, 3])
@pytest.mark.parametrize("gamma", [False, True])
def test_cc_matches_eqs_1_2_with_shared_recurrence(recurrence: int, gamma: bool) -> None:
    blk = randomized("cc", 16, recurrence=recurrence, gamma=gamma)
    x = randn64(2, 16, 4, 5)
    ref, denses = x, []
    for _ in range(recurrence):
        ref, dense = _cc_step_dense(blk, ref)
        denses.append(dense)
    with visattn.capture_attention(blk) as maps:
        y = blk(x)
    close(y, ref)
    composed = denses[0]
    for d in denses[1:]:
        composed = d @ composed  # A_R ... A_1
    close(composed.sum(-1), torch.ones_like(composed.sum(-1)))
    close(maps[""], composed.mean(1).reshape(2, 1, 4, 5))


@pytest.mark.parametrize("recurrence, reaches_all", [(1, False), (2, True)])
def test_cc_two_steps_reach_every_position(recurrence: int, reaches_all: bool) -> None:
    """Paper Sec. 3.2: one step links a position to its row and column, two steps to all."""
    blk = randomized("cc", 8, recurrence=recurrence)
    x = randn64(1, 8, 5, 6).requires_grad_()
    blk(x)[0, :, 4, 5].sum().backward()  # output at (4, 5)
    influence = x.grad.abs().sum(1)[0]  # (H, W)
    assert influence[4].min() > 0 and influence[:, 5].min() > 0  # its row and column
    assert (influence[0, 0] > 0) == reaches_all  # off the cross


def test_cc_gamma_option_starts_as_identity() -> None:
    blk = visattn.create_block("cc", 16, gamma=True)
    x = torch.randn(2, 16, 5, 5)
    assert torch.equal(blk(x), x)
    assert n_params(blk) == n_params(visattn.create_block("cc", 16)) + 1


# ---------------------------------------------------------------------------------------- a2


@pytest.mark.parametrize("options", [{}, {"feature_channels": 6, "num_descriptors": 3}])
def test_a2_matches_gather_and_distribute(options: dict) -> None:
    blk = randomized("a2", 24, **options)
    x = randn64(2, 24, 5, 7)
    n, _, h, w = x.shape
    a = conv1x1(x, blk.phi).flatten(2)  # (N, m, P)
    b = _softmax(conv1x1(x, blk.theta).flatten(2), dim=2)  # attention maps, over positions
    v = _softmax(conv1x1(x, blk.rho).flatten(2), dim=1)  # attention vectors, over descriptors
    g = torch.einsum("nmp,nip->nmi", a, b)  # gathered global descriptors
    z = torch.einsum("nmi,nip->nmp", g, v)  # distributed
    expected = x + conv1x1(z.reshape(n, -1, h, w), blk.proj)
    with visattn.capture_attention(blk) as maps:
        close(blk(x), expected)
    pairwise = torch.einsum("niu,nip->nup", v, b)  # W(u, p), rows sum to 1
    close(maps[""], pairwise.mean(1).reshape(n, 1, h, w))
    assert (blk.feature_channels, blk.num_descriptors) == (
        options.get("feature_channels", 6),
        options.get("num_descriptors", 6),
    )


# --------------------------------------------------------------------------------------- psa


def _layer_norm(t: torch.Tensor, ln: torch.nn.Module) -> torch.Tensor:
    """LayerNorm over all but the batch axis, written out."""
    dims = tuple(range(1, t.dim()))
    mu = t.mean(dims, keepdim=True)
    var = t.var(dims, unbiased=False, keepdim=True)
    return (t - mu) / torch.sqrt(var + ln.eps) * ln.weight.detach() + ln.bias.detach()


def _psa_channel(blk, x: torch.Tensor, form: str, layout: str) -> torch.Tensor:
    wq = _softmax(conv1x1(x, blk.ch_q).flatten(2), dim=2)  # (N, 1, P)
    wv = conv1x1(x, blk.ch_v).flatten(2)  # (N, c, P)
    z = torch.einsum("ncp,np->nc", wv, wq[:, 0])[:, :, None, None]
    if form == "paper":
        t = _layer_norm(conv1x1(z, blk.ch_z[0]), blk.ch_z[1])
    elif layout == "parallel":
        t = conv1x1(z, blk.ch_z[0])
    else:  # bottleneck, LN, ReLU, conv
        t = _layer_norm(conv1x1(z, blk.ch_z[0]), blk.ch_z[1]).clamp_min(0)
        t = conv1x1(t, blk.ch_z[3])
    return sigmoid(t)  # (N, C, 1, 1)


def _psa_spatial(blk, x: torch.Tensor, form: str, layout: str) -> torch.Tensor:
    n, _, h, w = x.shape
    q = conv1x1(x, blk.sp_q).mean((2, 3))  # (N, c)
    v = conv1x1(x, blk.sp_v).flatten(2)  # (N, c, P)
    if form == "paper":
        s = torch.einsum("nc,ncp->np", _softmax(q, dim=1), v)
    elif layout == "parallel":
        s = _softmax(torch.einsum("nc,ncp->np", q, v), dim=1)
    else:
        s = torch.einsum("nc,ncp->np", q, _softmax(v, dim=2))
    return sigmoid(s).reshape(n, 1, h, w)


@pytest.mark.parametrize("form", ["paper", "official"])
@pytest.mark.parametrize("layout", ["parallel", "sequential"])
def test_psa_matches_channel_and_spatial_branches(layout: str, form: str) -> None:
    blk = randomized("psa", 32, layout=layout, form=form)
    x = randn64(2, 32, 5, 6)
    a_ch = _psa_channel(blk, x, form, layout)
    if layout == "parallel":
        expected = a_ch * x + _psa_spatial(blk, x, form, layout) * x
    else:
        z = a_ch * x
        expected = _psa_spatial(blk, z, form, layout) * z
    with visattn.capture_attention(blk) as maps:
        y = blk(x)
    close(y, expected)
    assert maps[""].shape == x.shape
    close(y, x * maps[""])


# --------------------------------------------------------------------------------------- ema


def _ema_group(blk, g: torch.Tensor) -> torch.Tensor:
    """EMA on one group ``(N, c, H, W)``: loops over the 3x3 taps, GroupNorm written out."""
    n, c, h, w = g.shape
    z = torch.cat([g.mean(3), g.mean(2)], dim=2)  # (N, c, H + W): pool along W, then along H
    f = torch.einsum("oc,ncl->nol", blk.conv1x1.weight.detach().flatten(1), z)
    f = f + blk.conv1x1.bias.detach()[:, None]
    f_h, f_w = f[:, :, :h], f[:, :, h:]
    t = g * sigmoid(f_h)[:, :, :, None] * sigmoid(f_w)[:, :, None, :]
    mu, var = t.mean((2, 3), keepdim=True), t.var((2, 3), unbiased=False, keepdim=True)
    gn = blk.gn
    x1 = (t - mu) / torch.sqrt(var + gn.eps) * gn.weight.detach().view(1, -1, 1, 1)
    x1 = x1 + gn.bias.detach().view(1, -1, 1, 1)
    gp = F.pad(g, (1, 1, 1, 1))
    x2 = blk.conv3x3.bias.detach().view(1, -1, 1, 1).expand(n, c, h, w).clone()
    for i in range(3):
        for j in range(3):
            tap = blk.conv3x3.weight.detach()[:, :, i, j]
            x2 = x2 + torch.einsum("oc,nchw->nohw", tap, gp[:, :, i : i + h, j : j + w])
    s1 = _softmax(x1.mean((2, 3)), dim=1)
    s2 = _softmax(x2.mean((2, 3)), dim=1)
    weights = torch.einsum("nc,nchw->nhw", s1, x2) + torch.einsum("nc,nchw->nhw", s2, x1)
    return g * sigmoid(weights)[:, None]


@pytest.mark.parametrize("channels, groups", [(32, None), (32, 4), (72, None), (24, 3)])
def test_ema_matches_both_branches_and_cross_spatial_learning(channels: int, groups) -> None:
    blk = randomized("ema", channels, groups=groups)
    expected_groups = groups or max(d for d in range(1, 33) if channels % d == 0)
    assert blk.groups == expected_groups
    c = channels // expected_groups
    x = randn64(2, channels, 5, 7)
    expected = torch.cat(
        [_ema_group(blk, x[:, i * c : (i + 1) * c]) for i in range(expected_groups)], dim=1
    )
    with visattn.capture_attention(blk) as maps:
        y = blk(x)
    close(y, expected)
    close(y, x * maps[""])


def test_ema_default_groups_for_the_test_channels() -> None:
    assert visattn.create_block("ema", 32).groups == 32
    assert visattn.create_block("ema", 72).groups == 24
    assert visattn.create_block("ema", 256).groups == 32  # the official factor


# ---------------------------------------------------------------------------------- external


@pytest.mark.parametrize("form", ["paper", "official"])
def test_external_matches_double_normalisation(form: str) -> None:
    blk = randomized("external", 16, memory_units=8, form=form)
    x = randn64(2, 16, 4, 5)
    n, c, h, w = x.shape
    f = conv1x1(x, blk.query).flatten(2)  # (N, C, P)
    logits = torch.einsum("sc,ncp->nps", blk.mk.weight.detach().flatten(1), f)  # (N, P, S)
    a_hat = _softmax(logits, dim=1)  # over the positions
    a = a_hat / (1e-9 + a_hat.sum(2, keepdim=True))  # l1 over the memory units
    out = torch.einsum("cs,nps->ncp", blk.mv.weight.detach().flatten(1), a).reshape(n, c, h, w)
    if form == "official":
        conv, bn = blk.out[0], blk.out[1]
        t = conv1x1(out, conv)
        shape = (1, -1, 1, 1)
        t = (t - bn.running_mean.view(shape)) / torch.sqrt(bn.running_var.view(shape) + bn.eps)
        t = t * bn.weight.detach().view(shape) + bn.bias.detach().view(shape)
        expected = (x + t).clamp_min(0)
    else:
        expected = x + out
    with visattn.capture_attention(blk) as maps:
        close(blk(x), expected)
    close(maps[""], a_hat.mean(2).reshape(n, 1, h, w))


def test_external_official_value_memory_starts_as_key_memory_transposed() -> None:
    blk = visattn.create_block("external", 16, form="official")
    torch.testing.assert_close(blk.mv.weight.flatten(1), blk.mk.weight.flatten(1).T)
    with pytest.raises(ValueError, match="block 'external': init='identity' needs option 'form'"):
        visattn.create_block("external", 16, form="official", init="identity")


# ------------------------------------------------------------------ parameters (closed forms)


def _ema_form(c: int) -> int:
    cg = c // max(d for d in range(1, 33) if c % d == 0)
    return 10 * cg**2 + 4 * cg


CLOSED_FORMS = {
    ("danet", ()): lambda c: 2 * (c * (c // 8) + c // 8) + c * c + c + 2,
    ("cc", ()): lambda c: 2 * (c * (c // 8) + c // 8) + c * c + c,
    ("a2", ()): lambda c: 4 * c * (c // 4) + 3 * (c // 4) + c,
    ("psa", ()): lambda c: 4 * c * (c // 2) + 3 * c,
    ("psa", (("form", "official"),)): lambda c: 4 * c * (c // 2) + c,
    ("psa", (("form", "official"), ("layout", "sequential"))): lambda c: (
        3 * c * (c // 2) + c + (c // 2) * (c // 8) + 3 * (c // 8) + (c // 8) * c + c
    ),
    ("ema", ()): _ema_form,
    ("external", ()): lambda c: c * c + c + 2 * 64 * c,
    ("external", (("form", "official"),)): lambda c: 2 * c * c + 3 * c + 2 * 64 * c,
}


@pytest.mark.parametrize("key", list(CLOSED_FORMS), ids=lambda k: "-".join([k[0], *map(str, k[1])]))
@pytest.mark.parametrize("channels", [32, 72, 256])
def test_param_count_matches_docstring_closed_form(key, channels: int) -> None:
    name, options = key
    blk = visattn.create_block(name, channels, **dict(options))
    assert n_params(blk) == CLOSED_FORMS[key](channels)


# --------------------------------------------------------------------- capture map shapes


@pytest.mark.parametrize(
    "name, options, shape",
    [
        ("danet", {}, (3, 1, 6, 5)),
        ("danet", {"record": "channel"}, (3, 32, 1, 1)),
        ("cc", {}, (3, 1, 6, 5)),
        ("a2", {}, (3, 1, 6, 5)),
        ("psa", {}, (3, 32, 6, 5)),
        ("psa", {"layout": "sequential"}, (3, 32, 6, 5)),
        ("ema", {}, (3, 32, 6, 5)),
        ("external", {}, (3, 1, 6, 5)),
    ],
)
def test_capture_map_shape(name: str, options: dict, shape: tuple[int, ...]) -> None:
    blk = visattn.create_block(name, 32, **options).eval()
    with visattn.capture_attention(blk) as maps:
        blk(torch.randn(3, 32, 6, 5))
    assert tuple(maps[""].shape) == shape


# ---------------------------------------------------------------- TorchScript and torch.fx


SCRIPT_CASES = [
    ("danet", {}),
    ("danet", {"fusion": "sum", "cam_logits": "negated", "record": "channel"}),
    ("cc", {}),
    ("cc", {"gamma": True, "recurrence": 3}),
    ("a2", {}),
    ("psa", {}),
    ("psa", {"layout": "sequential", "form": "official"}),
    ("ema", {}),
    ("external", {}),
    ("external", {"form": "official"}),
]


@pytest.mark.parametrize("name, options", SCRIPT_CASES)
def test_torchscript_and_fx_match_eager(name: str, options: dict) -> None:
    blk = randomized(name, 16, **options).float()
    x = torch.randn(2, 16, 5, 7)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # torch.jit.script is deprecated in torch 2.x
        scripted = torch.jit.script(blk)
    traced = torch.fx.symbolic_trace(blk)
    with torch.no_grad():
        ref = blk(x)
        torch.testing.assert_close(scripted(x), ref, rtol=1e-5, atol=1e-5)
        torch.testing.assert_close(traced(x), ref, rtol=1e-5, atol=1e-5)
        y1 = torch.randn(2, 16, 1, 1)  # the fx graph holds no sizes: a 1x1 input runs too
        torch.testing.assert_close(traced(y1), blk(y1), rtol=1e-5, atol=1e-5)


# --------------------------------------------------------------------------- invalid options


@pytest.mark.parametrize(
    "name, channels, options, message",
    [
        ("danet", 4, {}, "block 'danet': option 'reduction'=8 leaves 0 channels"),
        ("danet", 32, {"fusion": "max"}, "block 'danet': option 'fusion' must be one of"),
        ("danet", 32, {"cam_logits": "max"}, "block 'danet': option 'cam_logits' must be one of"),
        ("danet", 32, {"record": "full"}, "block 'danet': option 'record' must be one of"),
        ("cc", 4, {}, "block 'cc': option 'reduction'=8 leaves 0 channels"),
        ("cc", 32, {"recurrence": 0}, "block 'cc': option 'recurrence' must be a positive int"),
        ("cc", 32, {"gamma": "yes"}, "block 'cc': option 'gamma' must be a bool"),
        ("a2", 2, {}, "block 'a2': option 'reduction'=4 leaves 0 channels"),
        ("a2", 32, {"feature_channels": 0}, "block 'a2': option 'feature_channels' must be a"),
        ("a2", 32, {"num_descriptors": -2}, "block 'a2': option 'num_descriptors' must be a"),
        ("psa", 32, {"layout": "serial"}, "block 'psa': option 'layout' must be one of"),
        ("psa", 32, {"form": "timm"}, "block 'psa': option 'form' must be one of"),
        ("psa", 1, {}, "block 'psa': channels=1 leaves 0 channels"),
        (
            "psa",
            4,
            {"form": "official", "layout": "sequential"},
            "block 'psa': option 'form'='official' with layout='sequential' needs channels >= 8",
        ),
        ("ema", 32, {"groups": 5}, "block 'ema': option 'groups'=5 must divide channels=32"),
        ("ema", 32, {"groups": 0}, "block 'ema': option 'groups' must be a positive int"),
        ("external", 32, {"memory_units": 0}, "block 'external': option 'memory_units' must be"),
        ("external", 32, {"form": "eanet"}, "block 'external': option 'form' must be one of"),
    ],
)
def test_invalid_options_name_block_and_option(
    name: str, channels: int, options: dict, message: str
) -> None:
    with pytest.raises(ValueError, match="^" + message):
        visattn.create_block(name, channels, **options)


def test_identity_init_refused_where_the_form_cannot_be_the_identity() -> None:
    with pytest.raises(ValueError, match="block 'danet': init='identity' needs option 'fusion'"):
        visattn.create_block("danet", 32, fusion="sum", init="identity")


@pytest.mark.parametrize(
    "name, options",
    [("cc", {}), ("cc", {"gamma": True}), ("a2", {}), ("ema", {}), ("external", {})],
)
def test_native_identity_forms(name: str, options: dict) -> None:
    blk = visattn.create_block(name, 32, init="identity", **options)
    assert type(blk) is visattn.block_info(name).cls  # native, not the generic wrapper
    x = torch.randn(2, 32, 6, 7)
    torch.testing.assert_close(blk(x), x, rtol=0, atol=0)
