"""Area attention (YOLOv12), agent attention (Han et al., ECCV 2024) and bi-level routing
attention (BiFormer, CVPR 2023) against their papers and the authors' released code.

The ``_official_*`` references below are written from reading the authors' modules (YOLOv12's
``AAttn``, Agent-Attention's PVT ``AgentAttention``, BiFormer's ``ops/bra_legacy.py``) in their
own token layouts (``(B, N, C)`` / NHWC, linear layers, ``torch.gather``, ``F.interpolate``,
``nn.AdaptiveAvgPool2d``); the ``_eq_*`` references recompute the papers' equations with explicit
loops. Both run on the block's weights, copied."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from helpers.reference import bn_eval, close, n_params, randn64, randomized, recorded

import visattn
from visattn.blocks._attention import softmax_attention
from visattn.blocks.agent_attn import adaptive_pool_matrix, bilinear_matrix

BLOCKS = ("area_attn", "agent_attn", "bra")


def _conv_bn(x: torch.Tensor, seq: torch.nn.Module) -> torch.Tensor:
    """Ultralytics' Conv(act=False) in eval mode: conv then BN, written out."""
    conv, bn = seq[0], seq[1]
    y = F.conv2d(x, conv.weight, None, padding=conv.padding, groups=conv.groups)
    return bn_eval(y, bn)


def _linear(t: torch.Tensor, conv: torch.nn.Module) -> torch.Tensor:
    """A 1x1 conv's weights used as ``nn.Linear`` on channels-last tokens ``(..., C)``."""
    out = t @ conv.weight.detach().flatten(1).t()
    return out if conv.bias is None else out + conv.bias.detach()


def _check_output_and_map(blk, x: torch.Tensor, reference) -> None:
    """The block's output and recorded map equal ``reference(blk, x)``'s; the map sums to 1."""
    y, got = recorded(blk, x)
    ref, received = reference(blk, x)
    close(y, ref)
    close(got, received)
    close(got.sum((1, 2, 3)), torch.ones(x.shape[0], dtype=torch.float64))


# --------------------------------------------------------------------------- area attention


def _official_aattn(blk, x: torch.Tensor) -> torch.Tensor:
    """YOLOv12 ``AAttn.forward`` (non-flash path): row-major tokens reshaped into ``area``
    equal runs, heads of the channel dim, softmax with the max subtracted, ``proj(x + pe(v))``."""
    b, c, h, w = x.shape
    n, area, heads = h * w, blk.area, blk.heads
    hd = c // heads
    qk = _conv_bn(x, blk.qk).flatten(2).transpose(1, 2)  # (B, N, 2C)
    v = _conv_bn(x, blk.v)
    pp = _conv_bn(v, blk.pe)
    v = v.flatten(2).transpose(1, 2)
    qk = qk.reshape(b * area, n // area, 2 * c)
    v = v.reshape(b * area, n // area, c)
    q, k = qk[..., :c], qk[..., c:]
    bb, nn_ = q.shape[0], q.shape[1]
    q = q.transpose(1, 2).reshape(bb, heads, hd, nn_)
    k = k.transpose(1, 2).reshape(bb, heads, hd, nn_)
    v = v.transpose(1, 2).reshape(bb, heads, hd, nn_)
    logits = (q.transpose(-2, -1) @ k) * hd**-0.5
    e = torch.exp(logits - logits.max(-1, keepdim=True).values)
    attn = e / e.sum(-1, keepdim=True)
    o = (v @ attn.transpose(-2, -1)).permute(0, 3, 1, 2)  # (B*area, N/area, heads, hd)
    o = o.reshape(b, n, c).reshape(b, h, w, c).permute(0, 3, 1, 2)
    return _conv_bn(o + pp, blk.proj)


def _eq_area(blk, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Sec. 3.2 with explicit strips: rows (or columns) cut into areas of ceil(L / l) lines,
    softmax attention per head within each strip; also the received map (N, 1, H, W)."""
    b, c, h, w = x.shape
    heads, d = blk.heads, blk.dim_head
    q, k = _conv_bn(x, blk.qk).split([c, c], 1)
    v = _conv_bn(x, blk.v)
    vertical = blk.direction == "vertical"
    length = w if vertical else h
    per = -(-length // blk.area)
    o = torch.zeros_like(v)
    received = torch.zeros(b, 1, h, w, dtype=x.dtype)
    for start in range(0, length, per):
        lines = slice(start, start + per)
        sl = (
            (slice(None), slice(None), slice(None), lines)
            if vertical
            else (..., lines, slice(None))
        )
        for hh in range(heads):
            ch = slice(hh * d, (hh + 1) * d)
            qs, ks, vs = q[sl][:, ch], k[sl][:, ch], v[sl][:, ch]
            sh = qs.shape[2:]
            qs, ks, vs = qs.flatten(2), ks.flatten(2), vs.flatten(2)  # (B, d, T)
            a = torch.softmax(torch.einsum("bdi,bdj->bij", qs, ks) / d**0.5, -1)
            o[sl][:, ch] = torch.einsum("bij,bdj->bdi", a, vs).reshape(b, d, *sh)
            received[sl] += a.sum(1).reshape(b, 1, *sh)
    y = x + _conv_bn(o + _conv_bn(v, blk.pe), blk.proj)
    return y, received / (heads * h * w)


@pytest.mark.parametrize("channels, heads, area, size", [(64, None, 4, (8, 6)), (48, 3, 2, (6, 5))])
def test_area_attn_matches_yolov12_aattn(channels: int, heads, area: int, size) -> None:
    blk = randomized("area_attn", channels, heads=heads, area=area)
    x = randn64(2, channels, *size)
    with torch.no_grad():
        close(blk(x), x + _official_aattn(blk, x))


@pytest.mark.parametrize(
    "direction, size, area",
    [("horizontal", (8, 5), 4), ("horizontal", (7, 5), 4), ("horizontal", (5, 3), 4),
     ("vertical", (5, 8), 4), ("vertical", (4, 7), 3), ("horizontal", (6, 6), 1)],
)  # fmt: skip
def test_area_attn_matches_strips_equation_and_records_received(direction, size, area) -> None:
    blk = randomized("area_attn", 32, heads=2, area=area, direction=direction)
    _check_output_and_map(blk, randn64(2, 32, *size), _eq_area)


def test_area_attn_areas_do_not_see_each_other() -> None:
    """Changing the bottom strip leaves the attention output of the top strip unchanged (only the
    5x5 positional conv reaches across the border)."""
    blk = randomized("area_attn", 32, heads=1, area=2, pe_kernel=1)
    x = randn64(1, 32, 8, 6)
    x2 = x.clone()
    x2[:, :, 4:] += randn64(1, 32, 4, 6)
    with torch.no_grad():
        close(blk(x)[:, :, :4], blk(x2)[:, :, :4])
        assert (blk(x)[:, :, 4:] - blk(x2)[:, :, 4:]).abs().max() > 1e-3


@pytest.mark.parametrize("channels, kernel", [(32, 5), (64, 3)])
def test_area_attn_parameter_count(channels: int, kernel: int) -> None:
    blk = visattn.create_block("area_attn", channels, pe_kernel=kernel)
    assert n_params(blk) == 4 * channels**2 + (10 + kernel**2) * channels


def test_area_attn_default_heads_follow_yolov12_and_errors_name_the_option() -> None:
    assert visattn.create_block("area_attn", 256).heads == 8  # C // 32
    assert visattn.create_block("area_attn", 16).heads == 1
    # 100 // 32 = 3 does not divide 100: lowered to 2; 240 // 32 = 7 to 6 (EfficientNet's width)
    assert visattn.create_block("area_attn", 100).heads == 2
    assert visattn.create_block("area_attn", 240).heads == 6
    with pytest.raises(ValueError, match=r"block 'area_attn'.*'heads'=3 must divide"):
        visattn.create_block("area_attn", 100, heads=3)
    with pytest.raises(ValueError, match=r"'direction'"):
        visattn.create_block("area_attn", 32, direction="diagonal")
    with pytest.raises(ValueError, match=r"'area'"):
        visattn.create_block("area_attn", 32, area=0)


# --------------------------------------------------------------------------- agent attention


def _official_agent(blk, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Agent-Attention's PVT ``AgentAttention.forward`` (sr_ratio 1) on tokens ``(B, N, C)``,
    with the agent pool ``nn.AdaptiveAvgPool2d`` and the 7x7 biases ``F.interpolate``; the row and
    column biases are used as made (``feat_size`` maps) or linearly resized to other maps.
    Returns ``x + out`` and the received map."""
    b, c, h, w = x.shape
    n, heads, m, p = h * w, blk.heads, blk.agent_num, blk.pool_size
    hd = c // heads
    scale = hd**-0.5
    t = x.flatten(2).transpose(1, 2)
    q = _linear(t, blk.q)
    kv = _linear(t, blk.kv).reshape(b, n, 2, c).permute(2, 0, 1, 3)
    k, v = kv[0], kv[1]
    pool = torch.nn.AdaptiveAvgPool2d((p, p))
    agent = pool(q.reshape(b, h, w, c).permute(0, 3, 1, 2)).reshape(b, c, -1).permute(0, 2, 1)
    q = q.reshape(b, n, heads, hd).permute(0, 2, 1, 3)
    k = k.reshape(b, n, heads, hd).permute(0, 2, 1, 3)
    v = v.reshape(b, n, heads, hd).permute(0, 2, 1, 3)
    agent = agent.reshape(b, m, heads, hd).permute(0, 2, 1, 3)
    biases = [
        torch.zeros(1, heads, m, n, dtype=x.dtype),
        torch.zeros(1, heads, n, m, dtype=x.dtype),
    ]
    if blk.agent_bias:

        def line(
            bias: torch.Tensor, size: int
        ) -> torch.Tensor:  # (heads, m, L) -> (heads, m, size)
            return F.interpolate(bias.detach(), size=size, mode="linear", align_corners=False)

        ah = line(blk.ah_bias, h)[None, :, :, :, None]  # official shape (1, heads, m, H, 1)
        aw = line(blk.aw_bias, w)[None, :, :, None, :]
        ha = line(blk.ha_bias.transpose(1, 2), h).transpose(1, 2)[None, :, :, None, :]
        wa = line(blk.wa_bias.transpose(1, 2), w).transpose(1, 2)[None, :, None, :, :]
        an = F.interpolate(blk.an_bias.detach(), size=(h, w), mode="bilinear")
        na = F.interpolate(blk.na_bias.detach(), size=(h, w), mode="bilinear")
        biases[0] = an.reshape(1, heads, m, -1) + (ah + aw).reshape(1, heads, m, -1)
        biases[1] = na.reshape(1, heads, m, -1).permute(0, 1, 3, 2) + (ha + wa).reshape(
            1, heads, -1, m
        )
    agent_attn = torch.softmax((agent * scale) @ k.transpose(-2, -1) + biases[0], -1)
    agent_v = agent_attn @ v
    q_attn = torch.softmax((q * scale) @ agent.transpose(-2, -1) + biases[1], -1)
    out = (q_attn @ agent_v).transpose(1, 2).reshape(b, n, c)
    vmap = v.transpose(1, 2).reshape(b, h, w, c).permute(0, 3, 1, 2)
    dwc = blk.dwc
    local = F.conv2d(vmap, dwc.weight, dwc.bias, padding=dwc.padding, groups=c)
    out = _linear(out + local.permute(0, 2, 3, 1).reshape(b, n, c), blk.proj)
    # received: sum over agents of (mean over queries of q_attn) x agent_attn, mean over heads
    received = (q_attn.mean(2, keepdim=True) @ agent_attn).mean(1).reshape(b, 1, h, w)
    return x + out.transpose(1, 2).reshape(b, c, h, w), received


@pytest.mark.parametrize(
    "options, size",
    [({"feat_size": 7}, (7, 7)), ({"feat_size": (6, 5), "heads": 2, "agent_num": 9}, (6, 5)),
     ({"feat_size": 7, "agent_num": 16}, (9, 11)), ({"feat_size": 4, "agent_num": 4}, (13, 3)),
     ({"agent_bias": False, "qkv_bias": False, "agent_num": 4}, (5, 6))],
)  # fmt: skip
def test_agent_attn_matches_authors_module_and_records_received(options: dict, size) -> None:
    _check_output_and_map(
        randomized("agent_attn", 32, **options), randn64(2, 32, *size), _official_agent
    )


def test_agent_attn_pool_and_resize_matrices_equal_torch_layers() -> None:
    for size in range(1, 20):
        for out in (1, 2, 3, 7):
            t = torch.randn(2, 3, size, dtype=torch.float64)
            pool = torch.nn.AdaptiveAvgPool1d(out)(t)
            close(t @ adaptive_pool_matrix(out, size, dtype=torch.float64).t(), pool)
            resized = F.interpolate(t, size=out * 2 + 1, mode="linear", align_corners=False)
            m = bilinear_matrix(out * 2 + 1, size, dtype=torch.float64)
            close(t @ m.t(), resized)


def test_agent_attn_is_linear_in_the_positions() -> None:
    """Eq. (4): the agents gather from every position; with n agents the cost of both softmaxes
    is n x HW, so a map with 4x the positions costs 4x the multiply-adds of the attention."""
    from torch.utils.flop_counter import FlopCounterMode

    blk = visattn.create_block("agent_attn", 32, agent_bias=False).eval()

    def flops(s: int) -> int:
        with FlopCounterMode(display=False) as fc, torch.no_grad():
            blk(torch.randn(1, 32, s, s))
        return fc.get_total_flops()

    assert flops(28) == pytest.approx(4 * flops(14), rel=0.02)


@pytest.mark.parametrize("heads, agents, fs, qkv_bias", [(1, 49, 14, True), (2, 9, (6, 5), False)])
def test_agent_attn_parameter_count(heads: int, agents: int, fs, qkv_bias: bool) -> None:
    c = 64
    blk = visattn.create_block(
        "agent_attn", c, heads=heads, agent_num=agents, feat_size=fs, qkv_bias=qkv_bias
    )
    fh, fw = (fs, fs) if isinstance(fs, int) else fs
    expected = 4 * c**2 + 11 * c + (3 * c if qkv_bias else 0) + 2 * heads * agents * (49 + fh + fw)
    assert n_params(blk) == expected
    no_bias = visattn.create_block("agent_attn", c, heads=heads, agent_num=agents, agent_bias=False)
    assert n_params(no_bias) == 4 * c**2 + 14 * c


def test_agent_attn_refuses_a_non_square_agent_count() -> None:
    with pytest.raises(ValueError, match=r"block 'agent_attn'.*'agent_num'.*square"):
        visattn.create_block("agent_attn", 32, agent_num=10)


# --------------------------------------------------------------------------- routing attention


def _official_bra(blk, x: torch.Tensor) -> torch.Tensor:
    """BiFormer ``ops/bra_legacy.py`` with ``auto_pad`` (NHWC, zero padding before the
    projections, regions by reshapes, routing on detached region means, ``torch.gather`` of the
    top-k regions' key/values, per-head softmax with scale ``C^-1/2``, LCE on v, ``wo``)."""
    n, c, h_in, w_in = x.shape
    s, heads, k = blk.n_win, blk.heads, blk.topk
    t = x.permute(0, 2, 3, 1)
    t = F.pad(t, (0, 0, 0, (s - w_in % s) % s, 0, (s - h_in % s) % s))
    h, w = t.shape[1], t.shape[2]
    rh, rw = h // s, w // s
    regions = t.reshape(n, s, rh, s, rw, c).permute(0, 1, 3, 2, 4, 5).reshape(n, s * s, rh, rw, c)
    qkv = _linear(regions, blk.qkv)
    q, kv = qkv[..., :c], qkv[..., c:]
    q_pix = q.reshape(n, s * s, rh * rw, c)
    kv_pix = kv.reshape(n, s * s, rh * rw, 2 * c)
    q_win, k_win = q.mean([2, 3]), kv[..., :c].mean([2, 3])
    logit = (q_win * c**-0.5) @ k_win.transpose(-2, -1)
    idx = torch.topk(logit, k=k, dim=-1).indices  # (n, S^2, k)
    p2, l2 = s * s, rh * rw
    sel = torch.gather(
        kv_pix.view(n, 1, p2, l2, 2 * c).expand(-1, p2, -1, -1, -1),
        dim=2,
        index=idx.view(n, p2, k, 1, 1).expand(-1, -1, -1, l2, 2 * c),
    )
    ksel, vsel = sel[..., :c], sel[..., c:]
    hd = c // heads
    ksel = ksel.reshape(n * p2, k * l2, heads, hd).permute(0, 2, 3, 1)  # (B, m, hd, k*L)
    vsel = vsel.reshape(n * p2, k * l2, heads, hd).permute(0, 2, 1, 3)  # (B, m, k*L, hd)
    qh = q_pix.reshape(n * p2, l2, heads, hd).permute(0, 2, 1, 3)
    attn = torch.softmax((qh * c**-0.5) @ ksel, -1)
    out = (attn @ vsel).reshape(n, s, s, heads, rh, rw, hd).permute(0, 1, 4, 2, 5, 3, 6)
    out = out.reshape(n, h, w, c)
    vmap = kv[..., c:].reshape(n, s, s, rh, rw, c).permute(0, 5, 1, 3, 2, 4).reshape(n, c, h, w)
    lepe = blk.lepe
    lepe = F.conv2d(vmap, lepe.weight, lepe.bias, padding=lepe.padding, groups=c)
    out = _linear(out + lepe.permute(0, 2, 3, 1), blk.proj)[:, :h_in, :w_in]
    return x + out.permute(0, 3, 1, 2)


@pytest.mark.parametrize(
    "options, size",
    [({}, (14, 14)), ({"n_win": 3, "topk": 2, "heads": 2}, (9, 12)),
     ({"n_win": 4, "topk": 3, "heads": 4}, (9, 11)), ({"n_win": 2, "topk": 1}, (1, 3))],
)  # fmt: skip
def test_bra_matches_biformer_reference(options: dict, size) -> None:
    blk = randomized("bra", 32, **options)
    x = randn64(2, 32, *size)
    with torch.no_grad():
        close(blk(x), _official_bra(blk, x))


def _eq_global(blk, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Eq. (5) when every region is routed to every region: multi-head attention over all tokens
    (temperature C^-1/2) plus LCE, projected; and its received map."""
    n, c, h, w = x.shape
    heads = blk.heads
    d = c // heads
    qkv = F.conv2d(x, blk.qkv.weight, blk.qkv.bias)
    q, k, v = (t.reshape(n, heads, d, h * w) for t in qkv.split([c, c, c], 1))
    a = torch.softmax(torch.einsum("nmdi,nmdj->nmij", q, k) * c**-0.5, -1)
    o = torch.einsum("nmij,nmdj->nmdi", a, v).reshape(n, c, h, w)
    vmap = v.reshape(n, c, h, w)
    o = o + F.conv2d(vmap, blk.lepe.weight, blk.lepe.bias, padding=blk.lepe.padding, groups=c)
    y = x + F.conv2d(o, blk.proj.weight, blk.proj.bias)
    return y, a.sum((1, 2)).reshape(n, 1, h, w) / (heads * h * w)


def test_bra_routed_to_every_region_is_global_attention() -> None:
    _check_output_and_map(
        randomized("bra", 32, n_win=3, topk=9, heads=4), randn64(2, 32, 6, 9), _eq_global
    )


def test_bra_routing_sends_each_region_to_its_top_k_regions_only() -> None:
    """A key region outside a query region's top k gets no weight from it: the received map of
    one query region is zero outside the regions its affinity ranks highest."""
    blk = randomized("bra", 32, n_win=4, topk=2)
    x = randn64(1, 32, 8, 8)
    _, got = recorded(blk, x)
    nonzero_regions = (got.reshape(4, 2, 4, 2).permute(0, 2, 1, 3).reshape(16, 4) > 0).any(1)
    assert 2 <= int(nonzero_regions.sum()) <= 16  # each of the 16 query regions picks 2
    # and gradients reach W_q and W_k through the token attention although routing is detached
    blk.train()
    blk.double()
    xx = randn64(1, 32, 8, 8).requires_grad_()
    blk(xx).sum().backward()
    assert blk.qkv.weight.grad[:64].abs().sum() > 0


@pytest.mark.parametrize("channels, kernel", [(32, 5), (64, 3)])
def test_bra_parameter_count(channels: int, kernel: int) -> None:
    blk = visattn.create_block("bra", channels, lepe_kernel=kernel)
    assert n_params(blk) == 4 * channels**2 + (kernel**2 + 5) * channels


def test_bra_top_k_routing_exports_to_onnx_as_topk_and_gather(tmp_path) -> None:
    """The routing is an ONNX ``TopK`` and the gather of the routed regions a ``Gather``; the
    graph, with a symbolic map size, equals PyTorch at a second size (padded there)."""
    pytest.importorskip("onnxruntime")
    onnx = pytest.importorskip("onnx")
    pytest.importorskip("onnxscript")
    net = torch.nn.Sequential(torch.nn.Conv2d(3, 32, 3, padding=1), randomized("bra", 32).float())
    report = visattn.export_onnx(
        net.eval(), tmp_path / "bra.onnx", input_size=(3, 8, 8), dynamic_size=True
    )
    ops = {node.op_type for node in onnx.load(str(report.path)).graph.node}
    assert {"TopK", "Gather"} <= ops
    assert report.max_abs_diff < 1e-4 and report.checked[-1][2:] != (8, 8)


def test_bra_refuses_more_regions_than_exist() -> None:
    with pytest.raises(ValueError, match=r"block 'bra'.*'topk'=10 exceeds the 9 regions"):
        visattn.create_block("bra", 32, n_win=3, topk=10)


# --------------------------------------------------------------------------- all three


@pytest.mark.parametrize("name", BLOCKS)
def test_block_keeps_shape_and_every_parameter_learns(name: str) -> None:
    blk = visattn.create_block(name, 64).train()
    x = torch.randn(2, 64, 10, 13, requires_grad=True)
    y = blk(x)
    assert y.shape == x.shape
    (y * torch.randn_like(y)).sum().backward()
    for pname, p in blk.named_parameters():
        assert p.grad is not None and p.grad.abs().sum() > 0, pname


@pytest.mark.parametrize("name", BLOCKS)
def test_identity_init_is_exact_and_the_output_layer_learns(name: str) -> None:
    blk = visattn.create_block(name, 64, init="identity")
    assert type(blk).__name__ != "IdentityAtInit"  # native identity form
    x = torch.randn(2, 64, 9, 10)
    torch.testing.assert_close(blk(x), x, rtol=0, atol=0)
    (blk(x) * torch.randn_like(x)).sum().backward()
    out = blk.proj[1].weight if name == "area_attn" else blk.proj.weight
    assert out.grad.abs().sum() > 0


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=["fp16", "bf16"])
@pytest.mark.parametrize("name", BLOCKS)
def test_output_stays_finite_under_autocast(name: str, dtype: torch.dtype) -> None:
    """At activation scale 100 the logits (|q.k| ~ 1e4 C) overflow fp16; computed in float32
    the output stays finite. (At that scale the softmax is nearly hard, so the low-precision
    projections may pick other keys: only finiteness is asked there; at scale 1 the output is
    close to the float32 block.)"""
    blk = visattn.create_block(name, 32).eval()
    for scale in (1.0, 100.0):
        x = scale * torch.randn(2, 32, 9, 11)
        with torch.no_grad(), torch.autocast("cpu", dtype=dtype):
            y = blk(x)
        assert torch.isfinite(y).all()
        if scale == 1.0:
            with torch.no_grad():
                ref = blk(x)
            assert (y.float() - ref).abs().max() <= 0.05 * ref.abs().max()


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=["fp16", "bf16"])
def test_softmax_attention_computes_logits_in_float32_under_autocast(dtype: torch.dtype) -> None:
    """Logits of 300 x 300 x 32 = 2.9e6 overflow fp16 (max 65504): the helper casts up, so the
        weights are the float64 ones to float32 precision. The shared primitive's math path (taken
    when the weights are asked for) is the one the routing, agent and area blocks capture with."""
    q = (300 * torch.rand(2, 5, 32)).to(dtype)
    k = (300 * torch.rand(2, 7, 32)).to(dtype)
    v = torch.randn(2, 7, 4).to(dtype)
    bias = torch.randn(5, 7)
    with torch.autocast("cpu", dtype=dtype):
        o, a = softmax_attention(q, k, v, 0.5, bias=bias, need_weights=True)
    ref = torch.softmax(q.double() @ k.double().transpose(1, 2) * 0.5 + bias.double(), -1)
    assert a.dtype == torch.float32 and o.dtype == dtype
    torch.testing.assert_close(a.double(), ref, rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(o.double(), ref @ v.double(), rtol=1e-2, atol=1e-2)


def test_block_info_names_each_paper() -> None:
    """YOLO's "PSA"/"A2C2f" area attention is not ``psa`` (Polarized Self-Attention)."""
    assert visattn.block_info("area_attn").paper == "Tian et al., arXiv 2025 (YOLOv12)"
    assert visattn.block_info("agent_attn").paper == "Han et al., ECCV 2024 (Agent Attention)"
    assert visattn.block_info("bra").paper == "Zhu et al., CVPR 2023 (BiFormer)"
    assert visattn.block_info("psa").cls.__name__ == "PolarizedSelfAttention"
    assert visattn.block_info("area_attn").cls.__name__ == "AreaAttention"
