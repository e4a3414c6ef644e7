"""timm's ``output_stride`` for visattn's ImageNet ResNets: the later stages dilate instead of
striding, exactly as timm's ResNets do (same outputs with the same weights)."""

from __future__ import annotations

import pytest
import timm
import torch

import visattn


@pytest.mark.parametrize("depth", [18, 50])
@pytest.mark.parametrize("output_stride", [32, 16, 8])
def test_output_stride_gives_timms_resnet_with_the_same_weights(depth, output_stride) -> None:
    theirs = timm.create_model(f"resnet{depth}", output_stride=output_stride).eval()
    ours = visattn.create_model(f"resnet{depth}", output_stride=output_stride).eval()
    ours.load_state_dict(theirs.state_dict())  # strict: the same parameters, no new ones

    def levels(m):  # (timm names the stem's activation act1, visattn relu)
        return [(f["num_chs"], f["reduction"]) for f in m.feature_info]

    assert levels(ours) == levels(theirs)
    convs = [
        (n, m.dilation, m.stride, m.padding)
        for n, m in theirs.named_modules()
        if isinstance(m, torch.nn.Conv2d)
    ]
    assert [
        (n, m.dilation, m.stride, m.padding)
        for n, m in ours.named_modules()
        if isinstance(m, torch.nn.Conv2d)
    ] == convs
    x = torch.randn(2, 3, 64, 64)
    with torch.no_grad():
        torch.testing.assert_close(ours.forward_features(x), theirs.forward_features(x))
        torch.testing.assert_close(ours(x), theirs(x))


def test_features_only_through_timm_report_the_dilated_strides() -> None:
    m = timm.create_model("visattn_se_resnet50", features_only=True, output_stride=8)
    assert m.feature_info.reduction() == [2, 4, 8, 8, 8]
    feats = m(torch.randn(1, 3, 64, 64))
    assert [f.shape[-1] for f in feats] == [32, 16, 8, 8, 8]
    assert timm.create_model("visattn_se_resnet50", output_stride=16).pretrained_cfg[
        "pool_size"
    ] == (14, 14)


def test_output_stride_composes_with_last_stride_one() -> None:
    """GSoP-Net1's layer4 at stride 1 is already at stride 16: nothing more to dilate."""
    m = visattn.create_model("gsop_resnet50", output_stride=16)
    assert all(c.dilation == (1, 1) for c in m.modules() if isinstance(c, torch.nn.Conv2d))
    m8 = visattn.create_model("gsop_resnet50", output_stride=8)
    assert m8.layer3[0].conv2.dilation == (1, 1) and m8.layer3[1].conv2.dilation == (2, 2)
    assert m8.layer4[0].conv2.dilation == (2, 2) and m8.feature_info[-1]["reduction"] == 8


@pytest.mark.parametrize("bad", [4, 12, 64])
def test_output_strides_timm_does_not_have_are_refused(bad) -> None:
    with pytest.raises(ValueError, match=r"output_stride must be one of \[8, 16, 32\]"):
        visattn.create_model("resnet18", output_stride=bad)


def test_cifar_resnets_have_no_output_stride_option() -> None:
    with pytest.raises(TypeError, match="unknown option 'output_stride'"):
        visattn.create_model("resnet56_cifar", output_stride=16)


@pytest.mark.parametrize(
    ("name", "options"),
    [
        ("resnet50", {"attention": {"name": "sk", "position": "conv"}}),
        ("sk_resnet18", {}),
    ],
)
def test_conv_replacing_blocks_refuse_a_dilated_conv(name, options) -> None:
    """SK and the other conv-replacing blocks have no dilation: they would silently shrink the
    receptive field of a dilated stage."""
    with pytest.raises(ValueError, match=r"layer4\.1\.conv[12] is dilated \(2, 2\)"):
        visattn.create_model(name, output_stride=16, **options)
    visattn.create_model(name, output_stride=32, **options)  # the undilated network builds
