"""The Residual Attention module (Wang et al., CVPR 2017) and its pre-activation unit against
independent re-computations of the paper's equations and structure."""

from __future__ import annotations

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F
from helpers.weights import randomize

import visattn
from visattn.blocks._units import PreActBottleneck


def bn(m: nn.BatchNorm2d, x: torch.Tensor) -> torch.Tensor:
    scale = m.weight / torch.sqrt(m.running_var + m.eps)
    return (x - m.running_mean[:, None, None]) * scale[:, None, None] + m.bias[:, None, None]


def unit_reference(u: PreActBottleneck, x: torch.Tensor, stride: int = 1) -> torch.Tensor:
    pre = torch.relu(bn(u.bn1, x))
    out = F.conv2d(pre, u.conv1.weight)
    out = F.conv2d(torch.relu(bn(u.bn2, out)), u.conv2.weight, stride=stride, padding=1)
    out = F.conv2d(torch.relu(bn(u.bn3, out)), u.conv3.weight)
    short = x if u.downsample is None else F.conv2d(pre, u.downsample.weight, stride=stride)
    return out + short


# --------------------------------------------------------------------------- PreActBottleneck


@pytest.mark.parametrize(("cin", "cout", "stride"), [(16, 16, 1), (16, 32, 1), (32, 32, 2)])
def test_preact_bottleneck_equals_bn_relu_conv_recomputation(cin: int, cout: int, stride: int):
    u = randomize(
        PreActBottleneck(cin, cout // 4, stride, out_channels=cout), norms_only=True
    ).eval()
    assert (u.downsample is None) == (cin == cout and stride == 1)
    assert u.conv1.out_channels == u.conv2.out_channels == cout // 4
    x = torch.randn(2, cin, 9, 7)
    with torch.no_grad():
        y = u(x)
        torch.testing.assert_close(y, unit_reference(u, x, stride), rtol=1e-5, atol=1e-5)
    assert y.shape == (2, cout, -(-9 // stride), -(-7 // stride))


@pytest.mark.parametrize(("cin", "cout", "stride"), [(64, 64, 1), (64, 128, 2), (72, 72, 1)])
def test_preact_bottleneck_parameter_closed_form(cin: int, cout: int, stride: int) -> None:
    b = cout // 4
    want = 2 * cin + cin * b + 4 * b + 9 * b * b + b * cout
    if cin != cout or stride != 1:
        want += cin * cout
    unit = PreActBottleneck(cin, b, stride, out_channels=cout)
    assert sum(p.numel() for p in unit.parameters()) == want


def test_preact_bottleneck_refuses_an_empty_bottleneck() -> None:
    with pytest.raises(ValueError, match="planes"):
        PreActBottleneck(8, 0)


def test_one_preact_bottleneck_serves_blocks_and_models() -> None:
    """The Residual Attention module and ``preresnet164_cifar`` use the same class."""
    from visattn.models import PreActBottleneck as ModelUnit

    assert issubclass(ModelUnit, PreActBottleneck)
    blk = visattn.create_block("residual_attention", 16)
    assert all(type(m) is PreActBottleneck for m in blk.trunk)
    assert ModelUnit.forward is PreActBottleneck.forward


# --------------------------------------------------------------------------- the module


def make(channels: int = 16, **options) -> nn.Module:
    return randomize(
        visattn.create_block("residual_attention", channels, **options), norms_only=True
    ).eval()


def mask_reference(
    blk: nn.Module, x: torch.Tensor, depth: int, align_corners: bool = True
) -> torch.Tensor:
    """Bottom-up / top-down mask logits of Fig. 2-3, unrolled by hand for depth 1, 2 and 3."""

    def up(t: torch.Tensor, like: torch.Tensor) -> torch.Tensor:
        return F.interpolate(t, size=like.shape[-2:], mode="bilinear", align_corners=align_corners)

    def pool(t: torch.Tensor) -> torch.Tensor:
        return F.max_pool2d(t, 3, 2, 1)

    d, s, u = blk.down, blk.skips, blk.up
    m1 = d[0](pool(x))
    if depth == 1:
        top = u[0](m1)
    elif depth == 2:
        m2 = d[1](pool(m1))
        top = u[0](up(u[1](m2), m1) + s[0](m1))
    else:
        assert depth == 3
        m2 = d[1](pool(m1))
        m3 = d[2](pool(m2))
        t2 = up(u[2](m3), m2) + s[1](m2)
        top = u[0](up(u[1](t2), m1) + s[0](m1))
    h = blk.mask_head
    z = up(top, x)
    z = F.conv2d(torch.relu(bn(h[0], z)), h[2].weight)
    return F.conv2d(torch.relu(bn(h[3], z)), h[5].weight, h[5].bias)  # bias None by default


@pytest.mark.parametrize("align_corners", [True, False])
@pytest.mark.parametrize("depth", [1, 2, 3])
@pytest.mark.parametrize("size", [(15, 15), (7, 7), (12, 9)], ids=lambda s: f"{s[0]}x{s[1]}")
def test_mask_branch_equals_bottom_up_top_down_recomputation(
    depth: int, size, align_corners: bool
) -> None:
    blk = make(depth=depth, align_corners=align_corners, mask_bias=not align_corners)
    x = torch.randn(2, 16, *size)
    with visattn.capture_attention(blk) as maps, torch.no_grad():
        blk(x)
        m = maps[""]
        want = torch.sigmoid(mask_reference(blk, blk.pre(x), depth, align_corners))
    assert m.shape == x.shape
    torch.testing.assert_close(m, want, rtol=1e-5, atol=1e-5)


def test_defaults_follow_the_official_prototxt_no_mask_bias_and_corner_aligned_upsampling():
    """The released Caffe prototxt: no bias on the mask head's last 1x1 conv, ``Interp``
    (corner-aligned) up-sampling. The earlier behaviour stays available as options."""
    official = visattn.create_block("residual_attention", 16)
    assert official.mask_head[-1].bias is None and official.align_corners is True
    old = visattn.create_block("residual_attention", 16, mask_bias=True, align_corners=False)
    assert old.mask_head[-1].bias is not None and old.align_corners is False
    n = sum(p.numel() for p in official.parameters())
    assert sum(p.numel() for p in old.parameters()) == n + 16
    # the two up-sampling conventions differ on the same weights
    torch.manual_seed(0)
    a = make(depth=2)
    b = make(depth=2, align_corners=False)
    b.load_state_dict(a.state_dict())
    x = torch.randn(1, 16, 12, 12)
    with torch.no_grad():
        assert not torch.allclose(a.mask_logits(x), b.mask_logits(x), atol=1e-5)


@pytest.mark.parametrize("learning", ["arl", "nal"])
def test_output_combines_trunk_and_mask_as_the_paper_says(learning: str) -> None:
    """ARL ``H = (1 + M) * T`` (Eq. 3), NAL ``H = M * T`` (Eq. 1), then post-processing."""
    blk = make(learning=learning, p=1, t=2)
    x = torch.randn(2, 16, 11, 11)
    with visattn.capture_attention(blk) as maps, torch.no_grad():
        out = blk(x)
        m = maps[""]
        trunk = blk.trunk(blk.pre(x))
    combined = (1 + m) * trunk if learning == "arl" else m * trunk
    torch.testing.assert_close(out, blk.post(combined), rtol=1e-5, atol=1e-5)


def test_arl_output_over_trunk_lies_between_one_and_two() -> None:
    blk = make(p=0)  # no post-processing: the output is (1 + M) * T itself
    x = torch.randn(2, 16, 9, 9)
    with torch.no_grad():
        ratio = blk(x) / blk.trunk(x)
    assert ratio.min() >= 1 and ratio.max() <= 2


def test_mask_activations_normalise_as_eqs_4_to_6() -> None:
    x = torch.randn(2, 16, 9, 10, dtype=torch.float64)
    masks = {}
    for kind in ("mixed", "channel", "spatial"):
        torch.manual_seed(1)
        blk = make(mask=kind).double()
        with visattn.capture_attention(blk) as maps, torch.no_grad():
            blk(x)
            masks[kind] = maps[""]
            logits = mask_reference(blk, blk.pre(x), 1)
    # all three share weights (same seed), so they see the same logits s
    torch.testing.assert_close(masks["mixed"], torch.sigmoid(logits), rtol=1e-5, atol=1e-5)
    norms = masks["channel"].pow(2).sum(dim=1).sqrt()
    torch.testing.assert_close(norms, torch.ones_like(norms))
    torch.testing.assert_close(
        masks["channel"], logits / logits.pow(2).sum(1, keepdim=True).sqrt(), rtol=1e-5, atol=1e-5
    )
    # spatial: each channel's map standardised over positions (documented eps 1e-5), then sigmoid
    var = logits.var(dim=(2, 3), unbiased=False)
    inv = torch.logit(masks["spatial"])  # back to the normalised logits
    torch.testing.assert_close(inv.mean(dim=(2, 3)), torch.zeros_like(var), atol=1e-6, rtol=0)
    torch.testing.assert_close(inv.std(dim=(2, 3), unbiased=False), (var / (var + 1e-5)).sqrt())
    mu = logits.mean((2, 3), keepdim=True)
    want = torch.sigmoid((logits - mu) / (var[..., None, None] + 1e-5).sqrt())
    torch.testing.assert_close(masks["spatial"], want)


@pytest.mark.parametrize(
    "size", [(1, 1), (2, 2), (3, 5), (7, 7), (15, 15), (33, 17)], ids=lambda s: f"{s[0]}x{s[1]}"
)
@pytest.mark.parametrize("depth", [1, 3, 4])
def test_any_input_size_works_even_when_pooling_reaches_one_pixel(size, depth: int) -> None:
    blk = make(depth=depth)
    x = torch.randn(2, 16, *size)
    y = blk.train()(x)
    assert y.shape == x.shape and torch.isfinite(y).all()


@pytest.mark.parametrize(
    "opt",
    [
        {},
        {"p": 0, "t": 1},
        {"p": 2, "t": 3, "r": 2, "depth": 3},
        {"depth": 2, "r": 1},
        {"mask_bias": True},
    ],
)
@pytest.mark.parametrize("channels", [16, 64, 72])
def test_parameter_count_matches_closed_form(opt: dict, channels: int) -> None:
    p, t, r, depth = (opt.get(k, d) for k, d in (("p", 1), ("t", 2), ("r", 1), ("depth", 1)))
    blk = visattn.create_block("residual_attention", channels, **opt)
    c, b = channels, channels // 4
    unit = 2 * c + 2 * c * b + 4 * b + 9 * b * b
    units = 2 * p + t + 2 * r * depth + depth - 1
    assert sum(isinstance(m, PreActBottleneck) for m in blk.modules()) == units
    bias = c if opt.get("mask_bias") else 0
    assert sum(p_.numel() for p_ in blk.parameters()) == units * unit + 2 * c * c + 4 * c + bias


def test_default_closed_form_from_docstring() -> None:
    c, b = 256, 64
    unit = 2 * c + 2 * c * b + 4 * b + 9 * b * b
    blk = visattn.create_block("residual_attention", c)
    assert sum(p.numel() for p in blk.parameters()) == 6 * unit + 2 * c * c + 4 * c


@pytest.mark.parametrize(
    ("options", "option"),
    [
        ({"depth": 0}, "depth"),
        ({"t": 0}, "'t'"),
        ({"r": 0}, "'r'"),
        ({"p": -1}, "'p'"),
        ({"learning": "residual"}, "learning"),
        ({"mask": "softmax"}, "mask"),
        ({"mask_bias": 1}, "mask_bias"),
        ({"align_corners": "yes"}, "align_corners"),
    ],
)
def test_impossible_options_raise_value_error_naming_block_and_option(options, option) -> None:
    with pytest.raises(ValueError, match=rf"block 'residual_attention'.*{option}"):
        visattn.create_block("residual_attention", 16, **options)


def test_fewer_than_four_channels_is_refused() -> None:
    with pytest.raises(ValueError, match=r"block 'residual_attention'.*channels"):
        visattn.create_block("residual_attention", 3)
