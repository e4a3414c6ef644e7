"""The softmax-attention primitive and the blocks that go through it compute what they computed
before it existed.

``_old_*`` below are frozen copies of the blocks' maths before the primitive (the full logits,
``torch.softmax``, the products), kept here as the reference. Every block, with its fused and its
math path, is compared with them over its options: float64 within 1e-10, float32 within the
tolerance of the registry-wide tests. The primitive itself is checked against a written-out
``softmax(q k^T s + bias) v``, its gradients included, and under fp16 autocast where the logits
overflow float16.
"""

from __future__ import annotations

import warnings

import pytest
import torch
import torch.nn.functional as F
from helpers.reference import randomized

import visattn
from visattn.blocks._attention import softmax_attention
from visattn.blocks.scsa import window_pool

# ------------------------------------------------------------------------ the frozen old maths


def _old_index(nq: int, nk: int, table: int, step: int = 1) -> torch.Tensor:
    i = torch.arange(nq)[:, None] * step
    return (torch.arange(nk)[None, :] - i).clamp(-(table - 1), table - 1) + (table - 1)


def _old_relative_logits(q, rel_h, rel_w, idx_h, idx_w) -> torch.Tensor:
    b, hq, wq = q.shape[0], q.shape[1], q.shape[2]
    hk, wk = idx_h.shape[1], idx_w.shape[1]
    lw = torch.gather(q @ rel_w.t(), -1, idx_w.expand(b, hq, wq, wk))
    lh = torch.gather(q @ rel_h.t(), -1, idx_h[:, None, :].expand(b, hq, wq, hk))
    return (lh.unsqueeze(-1) + lw.unsqueeze(-2)).reshape(b, hq * wq, hk * wk)


def _old_mhsa(b, x):
    n, h, w = x.shape[0], x.shape[2], x.shape[3]
    heads, d, dv = b.heads, b.dim_head, b.out_channels // b.heads
    q, k, v = torch.split(b.qkv(x), [heads * d, heads * d, b.out_channels], dim=1)
    q = q.reshape(n * heads, d, h * w).transpose(1, 2)
    k = k.reshape(n * heads, d, h * w).transpose(1, 2)
    v = v.reshape(n * heads, dv, h * w).transpose(1, 2)
    idx_h, idx_w = _old_index(h, h, b.feat_size[0]), _old_index(w, w, b.feat_size[1])
    qs = q * b.scale
    rel = _old_relative_logits(
        (qs if b.scale_pos else q).reshape(-1, h, w, d), b.rel_h, b.rel_w, idx_h, idx_w
    )
    a = torch.softmax(torch.baddbmm(rel, qs, k.transpose(1, 2)), dim=-1)
    y = (a @ v).transpose(1, 2).reshape(n, b.out_channels, h, w)
    if b.stride > 1:
        y = F.avg_pool2d(y, 2, 2, ceil_mode=True)
    return y, a.view(n, heads * h * w, h, w).mean(1, keepdim=True)


def _old_halo(b, x):
    n, h, w = x.shape[0], x.shape[2], x.shape[3]
    heads, d, dv = b.heads, b.dim_head, b.out_channels // b.heads
    bs, halo, win, s = b.block_size, b.halo_size, b.win_size, b.query_stride
    bq = bs // s
    nh, nw = -(-h // bs), -(-w // bs)
    q = b.q(x)
    hq, wq = q.shape[2], q.shape[3]
    q = F.pad(q, [0, nw * bq - wq, 0, nh * bq - hq])
    q = q.reshape(n * heads, d, nh, bq, nw, bq).permute(0, 2, 4, 3, 5, 1)
    q = q.reshape(n * heads * nh * nw, bq, bq, d)
    kv = F.pad(b.kv(x), [halo, halo + nw * bs - w, halo, halo + nh * bs - h])
    kv = kv.unfold(2, win, bs).unfold(3, win, bs)
    kv = kv.reshape(n * heads, d + dv, nh * nw, win * win).permute(0, 2, 3, 1)
    k, v = kv.reshape(-1, win * win, d + dv).split([d, dv], dim=-1)
    idx = _old_index(bq, win, win, step=s if b.rel_pos == "image" else 1)
    qs = q * b.scale
    rel = _old_relative_logits(qs if b.scale_pos else q, b.rel_h, b.rel_w, idx, idx)
    a = torch.softmax(torch.baddbmm(rel, qs.reshape(-1, bq * bq, d), k.transpose(1, 2)), -1)
    y = (a @ v).reshape(n, heads, nh, nw, bq, bq, dv).permute(0, 1, 6, 2, 4, 3, 5)
    y = y.reshape(n, b.out_channels, nh * bq, nw * bq)[..., :hq, :wq]
    if b.pool_stride > 1:
        y = F.avg_pool2d(y, b.pool_stride, b.pool_stride, ceil_mode=True)
    return y, b._received(a, n, h, w, hq, wq)


def _old_danet(b, x):
    n, c, h, w = x.shape
    q, k, v = b.query(x).flatten(2), b.key(x).flatten(2), b.value(x).flatten(2)
    s = torch.softmax(q.transpose(1, 2) @ k, dim=-1)
    p = v @ s.transpose(1, 2)
    a = x.flatten(2)
    energy = a @ a.transpose(1, 2)
    if b.cam_logits == "negated":
        energy = energy.amax(dim=-1, keepdim=True) - energy
    g = torch.softmax(energy, dim=-1)
    t = (b.alpha * p + b.beta * (g @ a)).reshape(n, c, h, w)
    y = x + 0.5 * t if b.fusion == "mean" else 2.0 * x + t
    if b.record == "position":
        return y, s.mean(dim=1).reshape(n, 1, h, w)
    return y, g.mean(dim=1).reshape(n, c, 1, 1)


def _old_nonlocal(b, x):
    """The block's explicit soft path before the primitive (the fused one equalled it)."""
    n, h, w = x.shape[0], x.shape[2], x.shape[3]
    pool = (
        (lambda t: t)
        if b.subsample == 1
        else (lambda t: F.max_pool2d(t, b.subsample, b.subsample, ceil_mode=True))
    )
    if b.subsample_order == "before":
        xp = pool(x)
        v, k = b.g(xp), (xp if b.theta is None else b.phi(xp))
    else:
        v, k = pool(b.g(x)), (pool(x) if b.theta is None else pool(b.phi(x)))
    q = x if b.theta is None else b.theta(x)
    hk, wk = v.shape[2], v.shape[3]

    def split(t):
        return t.reshape(n, b.heads, t.shape[1] // b.heads, -1).transpose(-1, -2)

    q, k, v = split(q), split(k), split(v)
    if b.score == "cosine":
        s = F.normalize(q, dim=-1) @ F.normalize(k, dim=-1).transpose(-1, -2)
    else:
        s = q @ k.transpose(-1, -2)
        if b.score == "scaled_dot":
            s = s * q.shape[-1] ** -0.5
    s = s / b.temperature
    if b.window is not None:
        half = b.window // 2
        rows = ((torch.arange(h) // b.subsample)[:, None] - torch.arange(hk)).abs() <= half
        cols = ((torch.arange(w) // b.subsample)[:, None] - torch.arange(wk)).abs() <= half
        allowed = (rows[:, None, :, None] & cols[None, :, None, :]).reshape(h * w, hk * wk)
        s = s.masked_fill(~allowed, float("-inf"))
    a = torch.softmax(s, dim=-1)
    y = (a @ v).transpose(-1, -2).reshape(n, b.inner_channels, h, w)
    return x + b.norm(b.w_z(y)), a


def _old_cc(b, x):
    for _ in range(b.recurrence):
        q, k, v = b.query(x), b.key(x), b.value(x)
        e_col = torch.einsum("nchw,ncgw->nhwg", q, k)
        e_row = torch.einsum("nchw,nchv->nhwv", q, k)
        hh = e_col.shape[-1]
        own = torch.eye(hh, dtype=torch.bool).unsqueeze(1)
        a = torch.softmax(torch.cat([e_col.masked_fill(own, float("-inf")), e_row], -1), -1)
        out = torch.einsum("nhwg,ncgw->nchw", a[..., :hh], v)
        out = out + torch.einsum("nhwv,nchv->nchw", a[..., hh:], v)
        x = x + (b.gamma * out if b.gamma is not None else out)
    return x


def _old_external(b, x):
    n, _, h, w = x.shape
    over = torch.softmax(b.mk(b.query(x)).flatten(2), dim=-1)
    attn = over / (b.eps + over.sum(dim=1, keepdim=True))
    y = b.out(b.mv(attn.reshape(n, b.memory_units, h, w)))
    return torch.relu(x + y) if b.form == "official" else x + y


def _old_lambda(b, x):
    n, _, h, w = x.shape
    m, heads, dk, dv = h * w, b.heads, b.dim_k, b.dim_v
    q, k, v = torch.split(b.qkv(x), [dk * heads, dk, dv], dim=1)
    q = b.norm_q(q).reshape(n, heads, dk, m)
    v = b.norm_v(v)
    k = k.reshape(n, dk, m).softmax(dim=-1)
    y = torch.einsum("nhkm,nkv->nhvm", q, torch.einsum("nkm,nvm->nkv", k, v.reshape(n, dv, m)))
    r = b.r
    position = F.conv3d(
        v.unsqueeze(1).permute(0, 1, 3, 4, 2),
        b.pos_conv.weight.unsqueeze(-1),
        b.pos_conv.bias,
        padding=(r // 2, r // 2, 0),
    )
    y = y + torch.einsum("nhkm,nkmv->nhvm", q, position.reshape(n, dk, m, dv))
    y = y.reshape(n, b.out_channels, h, w)
    if b.stride > 1:
        y = F.avg_pool2d(y, b.stride, b.stride, ceil_mode=True)
    return y


def _old_scsa(b, x):
    n, c, h, w = x.shape
    a_h = b.sa_gate(b.norm_h(b._multi_scale(x.mean(dim=3)))).view(n, c, h, 1)
    a_w = b.sa_gate(b.norm_w(b._multi_scale(x.mean(dim=2)))).view(n, c, 1, w)
    xs = x * a_h * a_w
    y = b.norm(window_pool(xs, b.window))
    d, tokens = c // b.heads, y.shape[2] * y.shape[3]
    q = b.q(y).reshape(n, b.heads, d, tokens)
    k = b.k(y).reshape(n, b.heads, d, tokens)
    v = b.v(y).reshape(n, b.heads, d, tokens)
    attn = torch.softmax(q @ k.transpose(-2, -1) * d**-0.5, dim=-1)
    return xs * b.ca_gate((attn @ v).mean(-1).reshape(n, c, 1, 1))


# ---------------------------------------------------------------------------------- the cases

MAPPED = {"mhsa": _old_mhsa, "halo": _old_halo, "danet": _old_danet}
PLAIN = {"cc": _old_cc, "external": _old_external, "lambda": _old_lambda, "scsa": _old_scsa}
CASES = [
    ("mhsa", {}, (9, 11)),
    ("mhsa", {"scale_pos": False, "feat_size": 5}, (9, 11)),
    ("mhsa", {"stride": 2, "dim_head": 6, "out_channels": 24, "qkv_bias": True}, (7, 8)),
    ("mhsa", {"heads": 1, "feat_size": (16, 16)}, (6, 5)),
    ("halo", {"block_size": 4, "halo_size": 2}, (9, 11)),
    ("halo", {"block_size": 4, "halo_size": 1, "scale_pos": False, "qkv_bias": True}, (8, 8)),
    ("halo", {"block_size": 4, "halo_size": 1, "stride": 2}, (9, 10)),
    ("halo", {"block_size": 4, "halo_size": 1, "stride": 2, "rel_pos": "query_grid"}, (8, 8)),
    ("halo", {"block_size": 4, "halo_size": 0, "stride": 2, "avg_down": True}, (7, 9)),
    ("halo", {"block_size": 6, "halo_size": 1, "stride": 4, "heads": 2}, (12, 7)),
    ("danet", {}, (9, 11)),
    ("danet", {"fusion": "sum", "cam_logits": "negated"}, (6, 7)),
    ("danet", {"record": "channel", "reduction": 4}, (5, 9)),
    ("cc", {}, (7, 9)),
    ("cc", {"recurrence": 1, "gamma": True}, (5, 6)),
    ("external", {}, (7, 9)),
    ("external", {"form": "official", "memory_units": 8}, (5, 6)),
    ("lambda", {"r": 5}, (7, 9)),
    ("lambda", {"r": 3, "stride": 2, "pos_bias": True, "heads": 2, "dim_k": 8}, (6, 7)),
    ("scsa", {}, (15, 16)),
    ("scsa", {"heads": 2, "window": 3}, (9, 11)),
    ("scsa", {"heads": 4, "window": 0}, (7, 5)),
]
NONLOCAL = [
    {},
    {"score": "dot", "heads": 2},
    {"score": "cosine", "window": 3},
    {"score": "gaussian", "temperature": 4.0, "subsample": 2},
    {"subsample": 2, "subsample_order": "before", "window": 5, "heads": 4},
    {"record": "full", "heads": 2},
]
IMPLS = {"mhsa", "halo", "danet", "bra", "agent_attn", "area_attn"}  # with an attn_impl option


def _ids(case) -> str:
    name, options, _ = case
    return name + "".join(f"-{k}={v}" for k, v in options.items())


def _impls(name: str) -> list[dict]:
    return [{"attn_impl": "fused"}, {"attn_impl": "math"}] if name in IMPLS else [{}]


def _capture(blk, x):
    with visattn.capture_attention(blk) as maps:
        y = blk(x)
    return y, maps[""]


@pytest.mark.parametrize("case", CASES, ids=_ids)
def test_float64_output_and_map_equal_the_old_maths(case) -> None:
    name, options, size = case
    x = torch.randn(2, 24, *size, dtype=torch.float64)
    for impl in _impls(name):
        torch.manual_seed(1)
        blk = randomized(name, 24, **options, **impl)
        with torch.no_grad():
            y = blk(x)
            if name in MAPPED:
                ref, ref_map = MAPPED[name](blk, x)
                y_cap, got_map = _capture(blk, x)
                torch.testing.assert_close(got_map, ref_map, rtol=0, atol=1e-10)
                torch.testing.assert_close(y_cap, ref, rtol=0, atol=1e-10)
            else:
                ref = PLAIN[name](blk, x)
        torch.testing.assert_close(y, ref, rtol=0, atol=1e-10, msg=f"{name} {impl}")


@pytest.mark.parametrize("case", CASES, ids=_ids)
def test_float32_output_and_gradients_equal_the_old_maths(case) -> None:
    name, options, size = case
    for impl in _impls(name):
        torch.manual_seed(1)
        blk = visattn.create_block(name, 24, **options, **impl).train()
        ref_blk = visattn.create_block(name, 24, **options).train()
        ref_blk.load_state_dict(blk.state_dict())
        x = torch.randn(2, 24, *size)
        xr = x.clone().requires_grad_()
        x.requires_grad_()
        gy = torch.randn_like(blk(x))
        blk(x).backward(gy)
        old = {**MAPPED, **PLAIN}[name](ref_blk, xr)
        (old[0] if isinstance(old, tuple) else old).backward(gy)
        torch.testing.assert_close(
            blk(x), old[0] if isinstance(old, tuple) else old, rtol=1e-5, atol=1e-5
        )
        torch.testing.assert_close(x.grad, xr.grad, rtol=1e-4, atol=1e-5)
        for (pname, p), pr in zip(blk.named_parameters(), ref_blk.parameters()):
            torch.testing.assert_close(p.grad, pr.grad, rtol=1e-4, atol=1e-5, msg=pname)


@pytest.mark.parametrize(
    "options", NONLOCAL, ids=lambda o: ",".join(map(str, o.items())) or "default"
)
def test_nonlocal_soft_attention_equals_the_old_explicit_softmax(options) -> None:
    torch.manual_seed(1)
    blk = randomized("nonlocal", 24, norm=False, **options)
    x = torch.randn(2, 24, 7, 9, dtype=torch.float64)
    with torch.no_grad():
        ref, a = _old_nonlocal(blk, x)
        torch.testing.assert_close(blk(x), ref, rtol=0, atol=1e-10)
        y, got = _capture(blk, x)
    torch.testing.assert_close(y, ref, rtol=0, atol=1e-10)
    if options.get("record") == "full":
        torch.testing.assert_close(got, a, rtol=0, atol=1e-10)


@pytest.mark.parametrize(
    "name, size", [("bra", (14, 14)), ("agent_attn", (9, 11)), ("area_attn", (8, 12))]
)
def test_fused_and_math_paths_are_one_function(name: str, size: tuple[int, int]) -> None:
    """bra, agent_attn and area_attn (compared with their authors' code in
    test_routing_agent_area.py): ``attn_impl="math"`` writes out what the fused path computes."""
    torch.manual_seed(1)
    fused = randomized(name, 32)
    math = visattn.create_block(name, 32, attn_impl="math").double().eval()
    math.load_state_dict(fused.state_dict())
    x = torch.randn(2, 32, *size, dtype=torch.float64)
    with torch.no_grad():
        ref = math(x)
        torch.testing.assert_close(fused(x), ref, rtol=0, atol=1e-10)
        torch.testing.assert_close(_capture(fused, x)[0], ref, rtol=0, atol=1e-10)


# ------------------------------------------------------------------------------- the primitive


def _written_out(q, k, v, scale, bias=None, q_bias=None, k_bias=None):
    logits = torch.einsum("...qe,...ke->...qk", q, k) * scale
    if q_bias is not None:
        logits = logits + torch.einsum("...qr,kr->...qk", q_bias, k_bias)
    if bias is not None:
        logits = (
            logits.masked_fill(~bias, float("-inf")) if bias.dtype == torch.bool else logits + bias
        )
    e = torch.exp(logits - logits.amax(-1, keepdim=True))
    a = e / e.sum(-1, keepdim=True)
    return torch.einsum("...qk,...kv->...qv", a, v), a


@pytest.mark.parametrize("fused", [True, False])
@pytest.mark.parametrize("ev", [5, 16])
def test_primitive_equals_the_written_out_softmax_with_each_bias_form(fused: bool, ev: int) -> None:
    g = torch.Generator().manual_seed(0)
    q, k = (torch.randn(3, 2, 10, 6, generator=g, dtype=torch.float64) for _ in range(2))
    k = k[..., :7, :]
    v = torch.randn(3, 2, 7, ev, generator=g, dtype=torch.float64)
    dense = torch.randn(10, 7, generator=g, dtype=torch.float64)
    mask = torch.rand(10, 7, generator=g) > 0.5
    mask[:, 0] = True  # every query sees a key
    qb = torch.randn(3, 2, 10, 4, generator=g, dtype=torch.float64)
    kb = torch.randn(7, 4, generator=g, dtype=torch.float64)
    for kw in ({}, {"bias": dense}, {"bias": mask}, {"q_bias": qb, "k_bias": kb}):
        ref, ref_w = _written_out(q, k, v, 0.3, **kw)
        out, w = softmax_attention(q, k, v, 0.3, fused=fused, **kw)
        assert w is None
        torch.testing.assert_close(out, ref, rtol=0, atol=1e-12)
        out, w = softmax_attention(q, k, v, 0.3, need_weights=True, fused=fused, **kw)
        torch.testing.assert_close(out, ref, rtol=0, atol=1e-12)
        torch.testing.assert_close(w, ref_w, rtol=0, atol=1e-12)


def test_primitive_gradients_through_factored_bias_equal_the_math_path() -> None:
    g = torch.Generator().manual_seed(0)
    leaves = [
        torch.randn(s, generator=g, dtype=torch.float64).requires_grad_()
        for s in ((4, 12, 8), (4, 12, 8), (4, 12, 3), (4, 12, 5))
    ]
    kb = torch.randn(12, 5, generator=g, dtype=torch.float64)
    grads = []
    for fused in (True, False):
        out, _ = softmax_attention(*leaves[:3], 0.5, q_bias=leaves[3], k_bias=kb, fused=fused)
        grads.append(torch.autograd.grad(out.square().sum(), leaves))
    for a, b in zip(*grads):
        torch.testing.assert_close(a, b, rtol=0, atol=1e-10)


@pytest.mark.parametrize("grid", [(2, 3), (16, 17)])  # 6 keys: added to the logits; 272: factors
@pytest.mark.parametrize("fused", [True, False])
def test_primitive_grid_bias_is_rows_plus_cols_on_both_paths(grid, fused: bool) -> None:
    """``grid_bias=(rows, cols)`` adds ``rows[i, y] + cols[i, x]`` to key ``(y, x)``: below
    ``DENSE_GRID_KEYS`` keys it is added to the logits, above it enters the fused kernel as
    factors; both against the written-out softmax with the dense bias built here, values and
    gradients."""
    from visattn.blocks._attention import DENSE_GRID_KEYS

    hk, wk = grid
    assert (hk * wk <= DENSE_GRID_KEYS) == (grid == (2, 3))
    g = torch.Generator().manual_seed(0)
    shapes = ((2, 3, 5, 8), (2, 3, hk * wk, 8), (2, 3, hk * wk, 4), (2, 3, 5, hk), (2, 3, 5, wk))
    leaves = [torch.randn(s, generator=g, dtype=torch.float64).requires_grad_() for s in shapes]
    q, k, v, rows, cols = leaves
    dense = (rows[..., :, None] + cols[..., None, :]).reshape(2, 3, 5, hk * wk)
    ref, ref_w = _written_out(q, k, v, 0.7, bias=dense)
    out, _ = softmax_attention(q, k, v, 0.7, grid_bias=(rows, cols), fused=fused)
    torch.testing.assert_close(out, ref, rtol=0, atol=1e-12)
    for a, b in zip(torch.autograd.grad(out.sum(), leaves), torch.autograd.grad(ref.sum(), leaves)):
        torch.testing.assert_close(a, b, rtol=0, atol=1e-10)
    out, w = softmax_attention(q, k, v, 0.7, grid_bias=(rows, cols), need_weights=True)
    torch.testing.assert_close(w, ref_w, rtol=0, atol=1e-12)
    with pytest.raises(ValueError, match="grid_bias or q_bias"):
        softmax_attention(q, k, v, 0.7, q_bias=rows, k_bias=rows[0, 0], grid_bias=(rows, cols))


def test_primitive_asks_for_both_bias_factors() -> None:
    t = torch.randn(1, 3, 2)
    with pytest.raises(ValueError, match="both q_bias and k_bias"):
        softmax_attention(t, t, t, 1.0, q_bias=t)


@pytest.mark.parametrize("fused", [True, False])
def test_primitive_stays_finite_under_fp16_autocast_where_the_logits_overflow_fp16(fused) -> None:
    q = torch.full((1, 4, 8), 100.0)  # q . k = 8e4 > 65504, the float16 maximum
    v = torch.randn(1, 4, 8)
    with torch.autocast("cpu", dtype=torch.float16):
        out, w = softmax_attention(q, q, v, 1.0, need_weights=not fused, fused=fused)
    assert torch.isfinite(out).all()
    torch.testing.assert_close(
        out.float(), v.mean(1, keepdim=True).expand(1, 4, 8), rtol=2e-3, atol=2e-3
    )
    if w is not None:
        assert w.dtype == torch.float32


# ------------------------------------------------------------------ TorchScript, fx, capture


SCRIPTED = [
    (n, impl)
    for n in ("mhsa", "halo", "bra", "danet", "nonlocal", "cc", "external", "lambda", "scsa")
    for impl in _impls(n)
]


@pytest.mark.parametrize("name, impl", SCRIPTED, ids=lambda v: str(v))
def test_torchscript_and_fx_equal_eager_on_each_path(name: str, impl: dict) -> None:
    blk = visattn.create_block(name, 16, **impl).eval()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # torch.jit.script is deprecated
        scripted = torch.jit.script(blk)
    traced = torch.fx.symbolic_trace(blk)
    for size in ((5, 7), (8, 8)):
        x = torch.randn(2, 16, *size)
        with torch.no_grad():
            ref = blk(x)
            torch.testing.assert_close(scripted(x), ref, rtol=1e-5, atol=1e-5)
            torch.testing.assert_close(traced(x), ref, rtol=1e-5, atol=1e-5)


def test_attn_impl_is_checked_by_name() -> None:
    for name in sorted(IMPLS):
        with pytest.raises(ValueError, match=f"block '{name}': option 'attn_impl' must be one of"):
            visattn.create_block(name, 16, attn_impl="flash")
