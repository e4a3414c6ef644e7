"""The conv-replacing attention blocks added with the 2022-2025 papers: CoT (Li et al., TPAMI
2022) against the authors' ``CotLayer`` (JDAI-CV/CoTNet) and its CUDA aggregation.

The reference below is written from reading the authors' module and their ``aggregation_zeropad``
kernel: it gathers the windows with ``F.unfold`` and indexes the shared attention maps with
``c % G`` explicitly, where the block uses shifted slices and ``repeat``."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from paper_helpers import bn_eval, close, conv1x1, n_params, randn64, randomized, recorded

import visattn
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
