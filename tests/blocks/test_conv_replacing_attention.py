"""The conv-replacing attention blocks added with the 2022 papers: CoT (Li et al., TPAMI 2022)
against the authors' ``CotLayer`` (JDAI-CV/CoTNet) and its CUDA aggregation, and ACmix (Pan et
al., CVPR 2022) against the authors' ResNet ``ACmix`` module (LeapLabTHU/ACmix) and the paper's
equations.

The references are written from reading the authors' modules: CoT's gathers the windows with
``F.unfold`` and indexes the shared attention maps with ``c % G`` explicitly, where the block
uses shifted slices and ``repeat``; ACmix's pads with ``nn.ReflectionPad2d`` and gathers with
``nn.Unfold`` as the authors do, where the block uses reflection indices and slices. ACmix's
equation check loops over queries and window offsets in Python, with its own reflection."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from helpers.reference import bn_eval, close, conv1x1, n_params, randn64, randomized, recorded

import visattn
from visattn.blocks import acmix as acmix_module
from visattn.blocks._utils import window_gather, window_slices
from visattn.blocks.cot import local_aggregation


def _official_cot(blk, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``CotLayer.forward`` after CoTNet's ``avd`` pool (eval mode); returns the output and the
    dynamic context's fusion weight."""
    if blk.stride > 1:
        x = F.avg_pool2d(x, 3, blk.stride, padding=1)
    b, _, h, w = x.shape
    k = blk.kernel_size
    ke, em, va, se = blk.key_embed, blk.embed, blk.value, blk.se
    key = F.relu(bn_eval(F.conv2d(x, ke[0].weight, padding=k // 2, groups=4), ke[1]))
    a = F.relu(bn_eval(conv1x1(torch.cat([x, key], 1), em[0]), em[1]))
    a = F.group_norm(conv1x1(a, em[3]), em[4].num_groups, em[4].weight, em[4].bias, em[4].eps)
    groups = a.shape[1] // (k * k)
    a = a.view(b, 1, groups, k * k, h, w)
    v = bn_eval(conv1x1(x, va[0]), va[1])
    c = v.shape[1]
    windows = F.unfold(v, k, padding=k // 2).view(b, c, k * k, h, w)
    weights = a[:, 0, torch.arange(c) % groups]  # (b, C, k^2, H, W): channel c -> group c % G
    dyn = (windows * weights).sum(2)
    dyn = bn_eval(dyn, blk.bn)
    dyn = dyn * torch.sigmoid(dyn)  # swish
    both = torch.stack([dyn, key], 2)  # radix 0: dynamic, 1: static
    gap = both.sum(2).mean((2, 3), keepdim=True)
    z = F.relu(bn_eval(conv1x1(gap, se[0]), se[1]))
    attn = torch.softmax(conv1x1(z, se[3]).view(b, c, 2), 2)
    return (both * attn[..., None, None]).sum(2), attn[:, :, 0, None, None]


@pytest.mark.parametrize(
    "channels, options, size",
    [(32, {}, (7, 9)), (32, {"kernel_size": 5}, (6, 6)), (16, {"out_channels": 32}, (5, 4)),
     (32, {"stride": 2}, (9, 8)), (24, {"out_channels": 16, "stride": 2}, (8, 8))],
)  # fmt: skip
def test_cot_matches_authors_layer_and_records_dynamic_weight(channels, options, size) -> None:
    blk = randomized("cot", channels, **options)
    x = randn64(2, channels, *size)
    y, got = recorded(blk, x)
    ref, dynamic = _official_cot(blk, x)
    close(y, ref)
    close(got, dynamic)
    s = blk.stride
    assert y.shape[2:] == (-(-size[0] // s), -(-size[1] // s))


def test_cot_window_weights_are_shared_by_every_eighth_channel() -> None:
    """Channels c and c + C/8 aggregate V with the same local weights: equal values in those two
    channels of V give equal dynamic contexts (before the channel-wise BN)."""
    blk = visattn.create_block("cot", 32)
    v = randn64(1, 32, 5, 5)
    v[:, 4] = v[:, 0]  # C/8 = 4 weight groups: channel 4 uses group 0, as channel 0
    a = torch.randn(1, 4, 9, 5, 5, dtype=torch.float64)
    out = local_aggregation(v, a, 3)
    close(out[:, 4], out[:, 0])
    assert (out[:, 1] - out[:, 0]).abs().max() > 1e-3
    assert blk.weight_groups == 4


@pytest.mark.parametrize("c, cp, k", [(32, 32, 3), (32, 64, 3), (64, 32, 5), (256, 256, 3)])
def test_cot_parameter_count(c: int, cp: int, k: int) -> None:
    blk = visattn.create_block("cot", c, out_channels=cp, kernel_size=k)
    r, g = max(cp // 2, 32), k * k * cp // 8
    expected = (
        k * k * c * cp // 4 + 2 * cp  # key conv (4 groups) + BN
        + (c + cp) * cp // 2 + cp  # W_delta + BN
        + (cp // 2) * g + 3 * g  # W_theta with bias + GroupNorm
        + c * cp + 2 * cp  # W_v + BN
        + 2 * cp  # BN after the aggregation
        + cp * r + 3 * r + 2 * r * cp + 2 * cp  # fusion MLP
    )  # fmt: skip
    assert n_params(blk) == expected


def test_cot_options_that_do_not_fit_are_refused_by_name() -> None:
    with pytest.raises(ValueError, match=r"block 'cot'.*multiples of 4"):
        visattn.create_block("cot", 30)
    with pytest.raises(ValueError, match=r"block 'cot'.*'out_channels'=36.*multiple of 8"):
        visattn.create_block("cot", 32, out_channels=36)
    with pytest.raises(ValueError, match=r"block 'cot'.*'kernel_size'"):
        visattn.create_block("cot", 32, kernel_size=4)


def test_cot_replaces_the_middle_conv_of_a_resnet() -> None:
    model = visattn.create_model(
        "resnet18", num_classes=5, attention={"name": "cot", "position": "conv"}
    )
    cots = [m for m in model.modules() if type(m).__name__ == "ContextualTransformer"]
    assert len(cots) == 8 and {m.stride for m in cots} == {1, 2}
    y = model(torch.randn(2, 3, 64, 64))
    assert y.shape == (2, 5)
    y.sum().backward()
    assert all(p.grad is not None for m in cots for p in m.parameters())


# --------------------------------------------------------------------------- ACmix


def _official_acmix(blk, x: torch.Tensor) -> torch.Tensor:
    """The authors' ``ACmix.forward`` (maps larger than the attention padding; even maps when
    strided, where their ``h // stride`` view is right)."""
    q, k, v = conv1x1(x, blk.conv1), conv1x1(x, blk.conv2), conv1x1(x, blk.conv3)
    head, s, ka = blk.heads, blk.stride, blk.kernel_att
    b, c, h, w = q.shape
    hd = c // head
    ho, wo = h // s, w // s
    loc_w = torch.linspace(-1.0, 1.0, w, dtype=x.dtype).unsqueeze(0).repeat(h, 1)
    loc_h = torch.linspace(-1.0, 1.0, h, dtype=x.dtype).unsqueeze(1).repeat(1, w)
    pe = conv1x1(torch.cat([loc_w[None], loc_h[None]], 0)[None], blk.conv_p)
    q_att = q.reshape(b * head, hd, h, w) * hd**-0.5
    k_att, v_att = k.reshape(b * head, hd, h, w), v.reshape(b * head, hd, h, w)
    q_pe = pe
    if s > 1:
        q_att, q_pe = q_att[:, :, ::s, ::s], pe[:, :, ::s, ::s]
    pad = torch.nn.ReflectionPad2d((ka - 1 + 1) // 2)
    unfold = torch.nn.Unfold(kernel_size=ka, padding=0, stride=s)
    unfold_k = unfold(pad(k_att)).view(b * head, hd, ka * ka, ho, wo)
    unfold_rpe = unfold(pad(pe)).view(1, hd, ka * ka, ho, wo)
    att = (q_att.unsqueeze(2) * (unfold_k + q_pe.unsqueeze(2) - unfold_rpe)).sum(1)
    att = torch.softmax(att, 1)
    out_att = unfold(pad(v_att)).view(b * head, hd, ka * ka, ho, wo)
    out_att = (att.unsqueeze(1) * out_att).sum(2).view(b, c, ho, wo)
    f_all = F.conv2d(
        torch.cat([t.reshape(b, head, hd, h * w) for t in (q, k, v)], 1), blk.fc.weight
    )
    f_conv = f_all.permute(0, 2, 1, 3).reshape(b, -1, h, w)
    # the authors declare a bias and reset_parameters sets it to None: no bias
    out_conv = F.conv2d(f_conv, blk.dep_conv.weight, None, stride=s, padding=1, groups=hd)
    return blk.rate1 * out_att + blk.rate2 * out_conv


@pytest.mark.parametrize(
    "channels, options, size",
    [(32, {}, (9, 7)), (16, {"out_channels": 32, "heads": 2}, (6, 8)),
     (32, {"stride": 2}, (8, 10)), (24, {"kernel_att": 5, "heads": 3}, (5, 5))],
)  # fmt: skip
def test_acmix_matches_authors_module(channels: int, options: dict, size) -> None:
    blk = randomized("acmix", channels, **options)
    x = randn64(2, channels, *size)
    with torch.no_grad():
        close(blk(x), _official_acmix(blk, x))


def _reflect(i: int, n: int) -> int:
    """Reflect index ``i`` into ``[0, n)`` (edge not repeated), bouncing as often as needed."""
    if n == 1:
        return 0
    while i < 0 or i >= n:
        i = -i if i < 0 else 2 * (n - 1) - i
    return i


def _eq_acmix_attention(blk, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Stage II attention path, query by query: softmax over the window of
    q_i . (k_j + W_p p_i - W_p p_j) / sqrt(d), keys reflected into the map; and the received map
    (each weight added to the position its key reflects to)."""
    q, k, v = conv1x1(x, blk.conv1), conv1x1(x, blk.conv2), conv1x1(x, blk.conv3)
    heads, d, ka, s = blk.heads, blk.dim_head, blk.kernel_att, blk.stride
    n, c, h, w = q.shape
    grid_x = torch.linspace(-1, 1, w, dtype=x.dtype)[None].expand(h, w)
    grid_y = torch.linspace(-1, 1, h, dtype=x.dtype)[:, None].expand(h, w)
    pe = conv1x1(torch.stack([grid_x, grid_y])[None], blk.conv_p)[0]  # (d, H, W)
    ho, wo = -(-h // s), -(-w // s)
    out = torch.zeros(n, c, ho, wo, dtype=x.dtype)
    received = torch.zeros(n, 1, h, w, dtype=x.dtype)
    r = ka // 2
    for yo in range(ho):
        for xo in range(wo):
            y, xx = yo * s, xo * s
            keys = [
                (_reflect(y + dy, h), _reflect(xx + dx, w))
                for dy in range(-r, r + 1)
                for dx in range(-r, r + 1)
            ]
            for m in range(heads):
                ch = slice(m * d, (m + 1) * d)
                qi = q[:, ch, y, xx] / d**0.5  # (N, d)
                logits = torch.stack(
                    [
                        (qi * (k[:, ch, a, bb] + pe[:, y, xx] - pe[:, a, bb])).sum(1)
                        for a, bb in keys
                    ],
                    1,
                )
                att = torch.softmax(logits, 1)  # (N, k_a^2)
                vals = torch.stack([v[:, ch, a, bb] for a, bb in keys], 1)  # (N, k_a^2, d)
                out[:, ch, yo, xo] = (att[..., None] * vals).sum(1)
                for j, (a, bb) in enumerate(keys):
                    received[:, 0, a, bb] += att[:, j]
    return out, received / (heads * ho * wo)


@pytest.mark.parametrize(
    "options, size",
    [({}, (3, 5)), ({"heads": 2}, (1, 4)), ({"stride": 2, "kernel_att": 3}, (5, 6))],
)
def test_acmix_attention_path_matches_equation_on_any_map(options: dict, size) -> None:
    """Maps smaller than the 7x7 window (where the authors' ReflectionPad2d refuses) and odd
    strided maps: the attention path is the equation with keys reflected into the map."""
    blk = randomized("acmix", 16, **options)
    with torch.no_grad():
        blk.rate2.zero_()  # the attention path alone
        blk.rate1.fill_(1.0)
    x = randn64(2, 16, *size)
    y, got = recorded(blk, x)
    ref, received = _eq_acmix_attention(blk, x)
    close(y, ref)
    close(got, received)
    close(got.sum((1, 2, 3)), torch.ones(2, dtype=torch.float64))


@pytest.mark.parametrize(
    "options, size",
    [({}, (9, 7)), ({"heads": 2}, (1, 4)), ({"stride": 2, "kernel_att": 3}, (5, 6))],
)
def test_acmix_exporters_form_is_the_equation(monkeypatch, options: dict, size) -> None:
    """Under an exporter the attention path gathers each window in one node
    (``window_gather``) instead of ``k_a^2`` slices; both are the equation (float64)."""
    blk = randomized("acmix", 16, **options)
    with torch.no_grad():
        blk.rate2.zero_()
        blk.rate1.fill_(1.0)
    x = randn64(2, 16, *size)
    monkeypatch.setattr(acmix_module, "exporting", lambda: True)
    with torch.no_grad():
        close(blk(x), _eq_acmix_attention(blk, x)[0])


@pytest.mark.parametrize("kernel, stride, size", [(7, 1, (7, 9)), (3, 2, (6, 5)), (5, 3, (11, 11))])
def test_window_gather_stacks_the_window_slices(kernel: int, stride: int, size) -> None:
    padded = torch.randn(2, 3, *size)
    out_h = (size[0] - kernel) // stride + 1
    out_w = (size[1] - kernel) // stride + 1
    views = window_slices(padded, kernel, out_h, out_w, stride)
    assert torch.equal(window_gather(padded, kernel, out_h, out_w, stride), torch.stack(views, 2))


def test_acmix_convolution_path_starts_as_the_shift_kernels() -> None:
    """At init the grouped conv sums, for each output channel, the k_c^2 fc features shifted to
    their offsets: the path equals a k_c x k_c conv applied to fc's output features."""
    blk = visattn.create_block("acmix", 16, heads=2).double().eval()
    with torch.no_grad():
        blk.rate1.zero_()
        blk.rate2.fill_(1.0)
    x = randn64(1, 16, 6, 5)
    q, k, v = conv1x1(x, blk.conv1), conv1x1(x, blk.conv2), conv1x1(x, blk.conv3)
    heads, d = 2, 8
    feats = torch.einsum(
        "pt,ntdl->npdl", blk.fc.weight.detach()[:, :, 0, 0],
        torch.cat([t.reshape(1, heads, d, 30) for t in (q, k, v)], 1),
    ).reshape(1, 9, d, 6, 5)  # fmt: skip
    padded = F.pad(feats, (1, 1, 1, 1))
    shifted = sum(padded[:, p, :, p // 3 : p // 3 + 6, p % 3 : p % 3 + 5] for p in range(9))
    ref = shifted.repeat_interleave(16 // d, dim=1)  # output channel o reads feature o // 2
    with torch.no_grad():
        close(blk(x), ref)


@pytest.mark.parametrize("c, cp, heads, kc", [(32, 32, 4, 3), (32, 64, 8, 3), (64, 32, 4, 5)])
def test_acmix_parameter_count(c: int, cp: int, heads: int, kc: int) -> None:
    blk = visattn.create_block("acmix", c, out_channels=cp, heads=heads, kernel_conv=kc)
    d = cp // heads
    expected = 3 * c * cp + 3 * cp + 3 * d + 3 * heads * kc**2 + cp * kc**4 + 2
    assert n_params(blk) == expected
    if (c, cp, heads, kc) == (32, 32, 4, 3):  # the authors' module at C=64 has 17,822
        assert n_params(visattn.create_block("acmix", 64)) == 17_822


def test_acmix_options_that_do_not_fit_are_refused_by_name() -> None:
    with pytest.raises(ValueError, match=r"block 'acmix'.*'heads'=5 must divide out_channels=32"):
        visattn.create_block("acmix", 32, heads=5)
    with pytest.raises(ValueError, match=r"block 'acmix'.*'kernel_att'"):
        visattn.create_block("acmix", 32, kernel_att=6)
