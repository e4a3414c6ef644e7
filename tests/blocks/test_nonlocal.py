"""The non-local block against independent re-computations of its equations (Wang et al.,
CVPR 2018, Eqs. 1-3 and 6; Vaswani et al., NeurIPS 2017, Eq. 1; Bahdanau et al., ICLR 2015)."""

from __future__ import annotations

import functools
import math

import pytest
import timm
import torch
import torch.nn as nn
import torch.nn.functional as F
from helpers.weights import randomize

import visattn

C, H, W = 8, 5, 6


def make(**options) -> nn.Module:
    return visattn.create_block("nonlocal", C, **options)


def conv1x1(conv: nn.Conv2d, x: torch.Tensor) -> torch.Tensor:
    out = torch.einsum("oc,nchw->nohw", conv.weight[:, :, 0, 0], x)
    return out if conv.bias is None else out + conv.bias[:, None, None]


def max_pool(t: torch.Tensor, s: int) -> torch.Tensor:
    """Max over s x s cells, the last cell cut short at odd borders (ceil mode)."""
    n, c, h, w = t.shape
    hk, wk = -(-h // s), -(-w // s)
    out = t.new_empty(n, c, hk, wk)
    for a in range(hk):
        for b in range(wk):
            out[:, :, a, b] = t[:, :, a * s : (a + 1) * s, b * s : (b + 1) * s].amax(dim=(2, 3))
    return out


def score(kind: str, q: torch.Tensor, keys: torch.Tensor, w: torch.Tensor | None) -> torch.Tensor:
    """Score of one query ``q`` (d,) against ``keys`` (m, d)."""
    if kind in ("dot", "gaussian"):
        return keys @ q
    if kind == "scaled_dot":
        return keys @ q / math.sqrt(q.numel())
    if kind == "cosine":
        return (keys @ q) / (keys.norm(dim=1) * q.norm())
    if kind == "additive":
        return torch.stack([w @ torch.tanh(q + kj) for kj in keys])
    raise AssertionError(kind)


def reference(blk: nn.Module, x: torch.Tensor, **opt) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-query loop over the paper's equations; returns ``z`` and the weights (N,h,HW,HWk)."""
    kind = opt.get("score", "scaled_dot")
    heads, s = opt.get("heads", 1), opt.get("subsample", 1)
    window, k = opt.get("window"), opt.get("k")
    tau = opt.get("temperature") or (0.1 if kind == "cosine" else 1.0)
    n, _, h, w = x.shape
    if opt.get("subsample_order") == "before":  # official code: pool x, then phi and g
        xp = max_pool(x, s)
        v = conv1x1(blk.g, xp)
        kk = xp if kind == "gaussian" else conv1x1(blk.phi, xp)
    else:  # the paper: pool phi(x) and g(x)
        v = max_pool(conv1x1(blk.g, x), s)
        kk = max_pool(x, s) if kind == "gaussian" else max_pool(conv1x1(blk.phi, x), s)
    q = x if kind == "gaussian" else conv1x1(blk.theta, x)
    hk, wk = v.shape[-2:]
    dq, dv = q.shape[1] // heads, v.shape[1] // heads
    y = torch.zeros(n, v.shape[1], h, w, dtype=x.dtype)
    weights = torch.zeros(n, heads, h * w, hk * wk, dtype=x.dtype)
    for b in range(n):
        for hd in range(heads):
            qs, ks = slice(hd * dq, (hd + 1) * dq), slice(hd * dv, (hd + 1) * dv)
            vec = None if blk.score_vector is None else blk.score_vector[hd]
            for i in range(h):
                for j in range(w):
                    keys = [
                        (a, c)
                        for a in range(hk)
                        for c in range(wk)
                        if window is None
                        or (abs(a - i // s) <= window // 2 and abs(c - j // s) <= window // 2)
                    ]
                    kmat = torch.stack([kk[b, qs, a, c] for a, c in keys])
                    sc = score(kind, q[b, qs, i, j], kmat, vec) / tau
                    if opt.get("selection") == "topk":
                        keep = sc.argsort(descending=True)[: min(k, len(keys))]
                        att = torch.zeros_like(sc)
                        att[keep] = torch.softmax(sc[keep], 0)
                    else:
                        att = torch.softmax(sc, 0)
                    for (a, c), wt in zip(keys, att):
                        y[b, ks, i, j] += wt * v[b, ks, a, c]
                        weights[b, hd, i * w + j, a * wk + c] = wt
    z = conv1x1(blk.w_z, y)
    if isinstance(blk.norm, nn.BatchNorm2d):
        bn = blk.norm
        z = (z - bn.running_mean[:, None, None]) / torch.sqrt(bn.running_var + bn.eps)[
            :, None, None
        ] * bn.weight[:, None, None] + bn.bias[:, None, None]
    return x + z, weights


CONFIGS = [
    {},
    {"score": "dot"},
    {"score": "cosine"},
    {"score": "cosine", "temperature": 0.5},
    {"score": "additive"},
    {"score": "gaussian"},
    {"heads": 2},
    {"heads": 4, "score": "additive"},
    {"heads": 2, "score": "gaussian"},
    {"selection": "topk", "k": 1},
    {"selection": "topk", "k": 3, "heads": 2},
    {"selection": "topk", "k": 1000},
    {"window": 3},
    {"window": 5, "score": "dot", "temperature": 2.0},
    {"subsample": 2},
    {"subsample": 2, "window": 3},
    {"subsample": 2, "subsample_order": "before"},
    {"subsample": 2, "subsample_order": "before", "window": 3, "heads": 2},
    {"selection": "topk", "k": 4, "window": 3},
    {"norm": False},
    {"inner_channels": 6, "heads": 3},
]


def config_id(opt: dict) -> str:
    return "-".join(f"{k}={v}" for k, v in opt.items()) or "default"


@pytest.mark.parametrize("opt", CONFIGS, ids=config_id)
def test_output_equals_per_query_recomputation(opt: dict) -> None:
    blk = randomize(make(**opt)).double().eval()
    x = torch.randn(2, C, H, W, dtype=torch.float64)
    want, weights = reference(blk, x, **opt)
    with torch.no_grad():
        torch.testing.assert_close(blk(x), want)
    # the recorded full weights are the ones the equations use
    full = visattn.create_block("nonlocal", C, record="full", **opt).double()
    full.load_state_dict(blk.state_dict())
    with visattn.capture_attention(full.eval()) as maps, torch.no_grad():
        full(x)
        torch.testing.assert_close(maps[""], weights)


def test_default_equals_scaled_dot_product_attention_in_matrix_form() -> None:
    """``z = x + BN(W_z softmax(Q K^T / sqrt(d)) V)``, checked against torch's SDPA."""
    blk = randomize(visattn.create_block("nonlocal", 16)).eval()
    x = torch.randn(3, 16, 7, 9)
    q = F.conv2d(x, blk.theta.weight, blk.theta.bias).flatten(2).transpose(1, 2)
    k = F.conv2d(x, blk.phi.weight, blk.phi.bias).flatten(2).transpose(1, 2)
    v = F.conv2d(x, blk.g.weight, blk.g.bias).flatten(2).transpose(1, 2)
    y = F.scaled_dot_product_attention(q, k, v).transpose(1, 2).reshape(3, 8, 7, 9)
    want = x + blk.norm(F.conv2d(y, blk.w_z.weight))
    with torch.no_grad():
        torch.testing.assert_close(blk(x), want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize(
    "opt", [{}, {"norm": False}, {"score": "additive", "window": 3, "subsample": 2}], ids=config_id
)
def test_block_starts_as_identity(opt: dict) -> None:
    blk = make(**opt)
    x = torch.randn(2, C, H, W)
    torch.testing.assert_close(blk.train()(x), x, rtol=0, atol=0)
    torch.testing.assert_close(blk.eval()(x), x, rtol=0, atol=0)


@pytest.mark.parametrize("norm", [True, False])
def test_block_stays_identity_after_timm_resnet_weight_init(norm: bool) -> None:
    cls = visattn.block_info("nonlocal").cls
    model = timm.create_model(
        "resnet18", num_classes=3, block_args=dict(attn_layer=functools.partial(cls, norm=norm))
    )
    blocks = [m for m in model.modules() if isinstance(m, cls)]
    assert len(blocks) == 8
    for blk in blocks:
        x = torch.randn(1, blk.w_z.out_channels, 3, 3)
        torch.testing.assert_close(blk(x), x, rtol=0, atol=0)


def test_topk_one_attends_to_the_argmax_key_only() -> None:
    blk = randomize(make(selection="topk", k=1, record="full", norm=False)).eval()
    x = torch.randn(2, C, H, W)
    with visattn.capture_attention(blk) as maps, torch.no_grad():
        z = blk(x)
        a = maps[""][:, 0]  # (N, HW, HWk)
    q = conv1x1(blk.theta, x).flatten(2).transpose(1, 2)
    k = conv1x1(blk.phi, x).flatten(2)
    best = (q @ k).argmax(-1)  # (N, HW)
    torch.testing.assert_close(a, F.one_hot(best, H * W).float())
    v = conv1x1(blk.g, x).flatten(2)  # (N, d, HW)
    y = torch.stack([v[b][:, best[b]] for b in range(2)]).reshape(2, -1, H, W)
    torch.testing.assert_close(z, x + conv1x1(blk.w_z, y), rtol=1e-5, atol=1e-5)


def test_topk_gradients_reach_queries_and_keys() -> None:
    blk = randomize(make(selection="topk", k=2, norm=False)).train()
    x = torch.randn(2, C, H, W)
    blk(x).pow(2).sum().backward()
    for p in (blk.theta.weight, blk.phi.weight, blk.g.weight):
        assert torch.isfinite(p.grad).all() and p.grad.abs().sum() > 0


@pytest.mark.parametrize("subsample", [1, 2])
def test_window_output_depends_only_on_the_neighbourhood(subsample: int) -> None:
    """Each output position is a function of the inputs in its window only (1x1 projections)."""
    window, h, w = 3, 7, 8
    blk = randomize(make(window=window, subsample=subsample)).eval()
    x = torch.randn(1, C, h, w, requires_grad=True)
    z = blk(x)
    for i, j in [(0, 0), (3, 4), (6, 7), (2, 7)]:
        (grad,) = torch.autograd.grad(z[0, :, i, j].sum(), x, retain_graph=True)
        reach = grad.abs().sum(dim=(0, 1)) > 0  # (h, w)
        r = window // 2
        rows = torch.arange(h) // subsample
        cols = torch.arange(w) // subsample
        allowed = ((rows - i // subsample).abs() <= r)[:, None] & (
            (cols - j // subsample).abs() <= r
        )[None, :]
        assert not (reach & ~allowed).any(), f"query {(i, j)} reads outside its window"
        assert reach[i, j]


def test_received_map_is_mean_weight_per_key_and_sums_to_one() -> None:
    blk = randomize(make(heads=2, subsample=2)).eval()
    full = make(heads=2, subsample=2, record="full")
    full.load_state_dict(blk.state_dict())
    x = torch.randn(2, C, 7, 9)
    with visattn.capture_attention(nn.ModuleList([blk, full.eval()])) as maps:
        blk(x)
        full(x)
        received, weights = maps["0"], maps["1"]
    assert received.shape == (2, 1, 7, 9) and weights.shape == (2, 2, 63, 4 * 5)
    per_key = weights.mean(dim=(1, 2)).reshape(2, 4, 5)
    torch.testing.assert_close(per_key.sum(dim=(1, 2)), torch.ones(2))
    for i in range(7):
        for j in range(9):
            torch.testing.assert_close(received[:, 0, i, j], per_key[:, i // 2, j // 2])


@pytest.mark.parametrize("size", [(1, 1), (2, 3), (7, 7), (15, 15), (4, 11)])
@pytest.mark.parametrize(
    "opt",
    [{"subsample": 2, "window": 3}, {"selection": "topk", "k": 5, "heads": 2}, {"window": 7}],
    ids=config_id,
)
def test_any_map_size_works(opt: dict, size) -> None:
    blk = randomize(make(**opt)).eval()
    x = torch.randn(2, C, *size)
    with visattn.capture_attention(blk) as maps:
        z = blk(x)
        assert maps[""].shape == (2, 1, *size)
    assert z.shape == x.shape and torch.isfinite(z).all()


def test_options_export_and_compile_without_graph_breaks() -> None:
    opt = {"selection": "topk", "k": 3, "window": 3, "subsample": 2, "heads": 2}
    blk = randomize(make(**opt)).eval()
    x = torch.randn(2, C, 7, 9)
    with torch.no_grad():
        want = blk(x)
        torch.testing.assert_close(torch.export.export(blk, (x,)).module()(x), want)
        torch._dynamo.reset()
        compiled = torch.compile(blk, fullgraph=True, backend="aot_eager")
        torch.testing.assert_close(compiled(x), want)


@pytest.mark.parametrize("channels", [16, 32, 72, 256])
def test_parameter_count_matches_closed_form(channels: int) -> None:
    def count(**opt) -> int:
        blk = visattn.create_block("nonlocal", channels, **opt)
        return sum(p.numel() for p in blk.parameters())

    c, d = channels, channels // 2
    assert count() == 4 * c * d + 3 * d + 2 * c
    assert count(norm=False) == 4 * c * d + 3 * d + c
    assert count(score="gaussian") == 2 * c * d + d + 2 * c
    assert count(score="additive") == 4 * c * d + 3 * d + 2 * c + d
    assert count(heads=2, window=3, selection="topk", k=2) == count()
    assert count(reduction=4) == 4 * c * (c // 4) + 3 * (c // 4) + 2 * c


@pytest.mark.parametrize(
    ("options", "option"),
    [
        ({"heads": 3}, "heads"),
        ({"score": "gaussian", "heads": 3, "inner_channels": 3}, "heads"),
        ({"score": "bilinear"}, "score"),
        ({"selection": "hard"}, "selection"),
        ({"selection": "topk"}, "'k'"),
        ({"selection": "topk", "k": 0}, "'k'"),
        ({"k": 2}, "'k'"),
        ({"window": 4}, "window"),
        ({"window": 0}, "window"),
        ({"subsample": 0}, "subsample"),
        ({"temperature": 0.0}, "temperature"),
        ({"inner_channels": 4, "reduction": 4}, "inner_channels"),
        ({"reduction": 16}, "reduction"),
        ({"record": "all"}, "record"),
    ],
)
def test_impossible_options_raise_value_error_naming_block_and_option(
    options: dict, option: str
) -> None:
    with pytest.raises(ValueError, match=rf"block 'nonlocal'.*{option}"):
        make(**options)


def test_subsample_order_before_pools_the_input_and_differs_from_after() -> None:
    """The official code max-pools ``x`` before ``phi`` and ``g``; the paper pools after them.
    Same weights, different functions (max-pooling does not commute with a 1x1 conv)."""
    torch.manual_seed(0)
    after = randomize(make(subsample=2)).eval()
    before = randomize(make(subsample=2, subsample_order="before")).eval()
    before.load_state_dict(after.state_dict())
    x = torch.randn(2, C, 8, 8)
    with torch.no_grad():
        assert not torch.allclose(after(x), before(x), atol=1e-4)
    assert make(subsample=2).subsample_order == "after"  # the paper is the default
    with pytest.raises(ValueError, match="subsample_order"):
        make(subsample=2, subsample_order="middle")
