"""Defaults and named models that follow the authors' released code: BAT (r = 2, 4 groups) and
BAT-ResNet-50, FcaNet's orthonormal DCT, SRM's official ``+ 1e-5``, GE-theta-plus's ReLU after
the gather, triplet attention's zero-initialised hw BN, and the ``output`` block position they
need. Each check recomputes the authors' form here, from the weights, without the blocks'
helpers."""

from __future__ import annotations

import torch
import torch.nn as nn
import torch.nn.functional as F

import visattn
from visattn.profile import count_params

RESNET50 = 25_557_032  # torchvision's resnet50


def _bat_params(c: int, r: int = 2, g: int = 4, s: int = 7) -> int:
    """A BAT block without conv biases before its BNs: phi_1 (C C' + 2 C'), the transform's
    grouping conv C' -> G with BN (C' G + 2 G), conv_p and conv_q (each s^3 G^2 + s^2 G with
    bias), its output conv C' -> C' with BN (C'^2 + 2 C'), phi_2 (C' C + 2 C)."""
    cr = c // r
    return (
        (c * cr + 2 * cr)
        + (cr * g + 2 * g)
        + 2 * (s**3 * g * g + s * s * g)
        + (cr * cr + 2 * cr)
        + (cr * c + 2 * c)
    )


# ----------------------------------------------------------------------------------------- BAT


def test_bat_defaults_are_the_authors_and_timms_are_options() -> None:
    info = visattn.block_info("bat")
    assert (info.defaults["reduction"], info.defaults["groups"], info.defaults["block_size"]) == (
        2,
        4,
        7,
    )
    blk = visattn.create_block("bat", 256)
    assert blk.inner_channels == 128 and blk.ba.groups == 4
    assert count_params(blk) == _bat_params(256)
    timm_like = visattn.create_block("bat", 256, reduction=4, groups=2)
    assert count_params(timm_like) == _bat_params(256, r=4, g=2)


def test_bat_resnet50_is_the_authors_network() -> None:
    """nlnet50 --nltype bat --nl_mod 2 2 1000: a BAT after blocks 1, 3 of layer2 (512 channels)
    and 1, 3, 5 of layer3 (1024); the authors' README: 30.2M parameters."""
    model = visattn.create_model("bat_resnet50")
    assert model.attention_paths == [
        "layer2.1.attn_output",
        "layer2.3.attn_output",
        "layer3.1.attn_output",
        "layer3.3.attn_output",
        "layer3.5.attn_output",
    ]
    n = count_params(model)
    assert n == RESNET50 + 2 * _bat_params(512) + 3 * _bat_params(1024) == 30_226_008
    assert round(n / 1e6, 1) == 30.2
    bats = [model.get_submodule(p) for p in model.attention_paths]
    assert all(b.dropout.p == 0.2 and b.inner_channels == b.conv1[0].in_channels // 2 for b in bats)


def test_output_position_is_after_the_blocks_final_activation() -> None:
    """The block at ``output`` sees the residual block's output, relu(branch + shortcut), as the
    authors' BAT (and the non-local paper's blocks) sit between two residual blocks."""
    model = visattn.create_model("bat_resnet50").eval()
    block = model.layer2[1]
    x = torch.randn(1, 512, 14, 14, generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        y = block(x)
        bat = block.attn_output
        block.attn_output = nn.Identity()
        plain = block(x)
        block.attn_output = bat
        assert plain.min() >= 0  # after the ReLU
        torch.testing.assert_close(y, bat(plain))


def test_output_position_in_every_residual_block_kind() -> None:
    torch.manual_seed(0)
    for name in ("resnet20_cifar", "resnet18", "preresnet164_cifar"):
        model = visattn.create_model(
            name, attention={"name": "se", "position": "output", "stages": [1], "blocks": [0]}
        ).eval()
        block = model.layer1[0]
        assert model.attention_paths == ["layer1.0.attn_output"]
        assert block.slot_channels("output") == block.out_channels
        x = torch.randn(2, block.in_channels, 8, 8)
        with torch.no_grad():
            se = block.attn_output
            block.attn_output = nn.Identity()
            plain = block(x)
            block.attn_output = se
            torch.testing.assert_close(block(x), se(plain))


def test_output_position_on_injected_torchvision_and_timm_resnets() -> None:
    import timm
    import torchvision

    for model in (torchvision.models.resnet18(), timm.create_model("resnet18")):
        paths = visattn.inject(
            model, {"name": "eca", "position": "output", "stages": [2], "init": "identity"}
        )
        assert paths == ["layer2.0.attn_output", "layer2.1.attn_output"]


# ----------------------------------------------------------------------------------------- FCA


def _gates(name: str, channels: int, x: torch.Tensor, **options) -> torch.Tensor:
    blk = visattn.create_block(name, channels, **options)
    with visattn.capture_attention(blk) as maps, torch.no_grad():
        blk(x)
    return maps[""]


def test_fca_default_dct_is_orthonormal_and_no_gate_starts_saturated() -> None:
    """C = 256 on a 56x56 post-ReLU map: with the official orthonormal DCT no fresh gate is
    below 0.01 or above 0.99; Eq. (1)'s unscaled basis saturates most of them."""
    torch.manual_seed(0)
    assert visattn.block_info("fca").defaults["dct_norm"] == "ortho"
    x = F.relu(torch.randn(2, 256, 56, 56))
    g = _gates("fca", 256, x)
    assert g.shape == (2, 256, 1, 1)
    assert ((g < 0.01) | (g > 0.99)).sum() == 0
    torch.manual_seed(0)
    g_none = _gates("fca", 256, x, dct_norm="none")
    assert ((g_none < 0.01) | (g_none > 0.99)).float().mean() > 0.5


# ----------------------------------------------------------------------------------------- SRM


def test_srm_official_std_adds_1e5_under_the_root() -> None:
    """The official style pooling: sqrt(unbiased variance + 1e-5). On a low-variance map it
    differs clearly from torch.std."""
    torch.manual_seed(0)
    x = 1.0 + 1e-3 * torch.randn(4, 8, 6, 6, dtype=torch.float64)
    blk = visattn.create_block("srm", 8, std="official").double().eval()
    with torch.no_grad():
        blk.cfc.copy_(torch.randn(8, 2, dtype=torch.float64))
    flat = x.flatten(2)
    sigma = torch.sqrt(flat.var(dim=2, unbiased=True) + 1e-5)
    z = blk.cfc[:, 0] * flat.mean(2) + blk.cfc[:, 1] * sigma
    bn = blk.bn
    z = (z - bn.running_mean) / torch.sqrt(bn.running_var + bn.eps) * bn.weight + bn.bias
    with torch.no_grad():
        torch.testing.assert_close(blk(x), x * torch.sigmoid(z)[:, :, None, None])
        plain = visattn.create_block("srm", 8, std="unbiased").double().eval()
        plain.load_state_dict(blk.state_dict())
        assert (plain(x) - blk(x)).abs().max() > 1e-4
    assert (sigma - flat.std(dim=2)).abs().min() > 1e-3  # the std itself: ~3.3e-3 vs ~1e-3
    srm50 = visattn.create_model("srm_resnet50")
    assert {srm50.get_submodule(p).std for p in srm50.attention_paths} == {"official"}


# ------------------------------------------------------------------------------------ GE, triplet


def test_ge_resnet50_gather_ends_in_the_prototxts_relu() -> None:
    """GE-theta-plus, global extent: depthwise whole-map conv, BN, ReLU, then the MLP and the
    sigmoid, recomputed here on a 7x7 map."""
    model = visattn.create_model("ge_resnet50")
    ge = model.layer4[0].attn_standard
    assert isinstance(ge.gather[-1], nn.ReLU)
    torch.manual_seed(0)
    with torch.no_grad():
        for t in ge.parameters():
            t.copy_(torch.randn_like(t) * 0.1)
        ge.gather[1].running_mean.uniform_(-0.5, 0.5)
    ge.eval()
    x = torch.randn(2, 2048, 7, 7)
    conv, bn = ge.gather[0], ge.gather[1]
    z = (x * conv.weight.view(1, 2048, 7, 7)).sum((2, 3), keepdim=True)
    z = (z - bn.running_mean.view(1, -1, 1, 1)) / torch.sqrt(
        bn.running_var.view(1, -1, 1, 1) + bn.eps
    ) * bn.weight.view(1, -1, 1, 1) + bn.bias.view(1, -1, 1, 1)
    z = F.relu(z)
    fc1, fc2 = ge.mlp[0], ge.mlp[2]
    h = F.relu(F.conv2d(z, fc1.weight, fc1.bias))
    g = torch.sigmoid(F.conv2d(h, fc2.weight, fc2.bias))
    with torch.no_grad():
        torch.testing.assert_close(ge(x), x * g, rtol=1e-4, atol=1e-5)
    # without the option the gather stops at the BN
    plain = visattn.create_block("ge", 64, variant="theta", extent=4)
    assert isinstance(plain.gather[-1], nn.BatchNorm2d)


def test_triplet_resnet50_zeroes_the_hw_branch_bn_as_the_authors_resnet() -> None:
    model = visattn.create_model("triplet_resnet50")
    blocks = [model.get_submodule(p) for p in model.attention_paths]
    assert len(blocks) == 16
    for b in blocks:
        assert torch.all(b.hw.bn.weight == 0)
        assert torch.all(b.cw.bn.weight == 1) and torch.all(b.hc.bn.weight == 1)
    # so the hw gate starts at sigmoid(0) = 1/2 everywhere
    blk = visattn.create_block("triplet", 8, zero_init_hw=True).eval()
    x = torch.randn(2, 8, 5, 6)
    z = torch.cat((x.amax(1, True), x.mean(1, True)), 1)
    with torch.no_grad():
        torch.testing.assert_close(torch.sigmoid(blk.hw(z)), torch.full((2, 1, 5, 6), 0.5))
