"""visattn models as segmentation-models-pytorch timm-universal encoders (``tu-visattn_*``):
Unet, FPN, UNet++ and DeepLabV3+ (dilated stages), local weights, TorchScript of every encoder
inside smp, and the refusals of :func:`visattn.integrations.smp.encoder_name`."""

from __future__ import annotations

import re

import pytest
import torch

smp = pytest.importorskip("segmentation_models_pytorch")

import timm  # noqa: E402
from helpers.tiers import tiered  # noqa: E402

import visattn  # noqa: E402
from visattn.integrations.smp import encoder_name  # noqa: E402
from visattn.models import get_model_spec  # noqa: E402

SIZE = 64


def _segment(model: torch.nn.Module, classes: int) -> None:
    """Forward and backward at 64x64: a full-resolution mask per class."""
    x = torch.randn(2, 3, SIZE, SIZE)
    y = model.train()(x)
    assert y.shape == (2, classes, SIZE, SIZE)
    y.square().mean().backward()
    assert all(p.grad is not None for p in model.encoder.parameters() if p.requires_grad)


@pytest.mark.parametrize("arch", ["Unet", "FPN", "UnetPlusPlus"])
def test_decoders_take_a_visattn_encoder_with_its_attention(arch) -> None:
    # smp checks the plain resnet18's strides; the encoder it builds gets the placement
    model = getattr(smp, arch)(
        encoder_name("resnet18"), encoder_weights=None, classes=2, attention={"name": "cbam"}
    )
    paths = [
        n
        for n, m in model.encoder.model.model.named_modules()
        if visattn.block_info("cbam").cls is type(m)
    ]
    assert len(paths) == 8  # CBAM in every BasicBlock
    assert model.encoder.out_channels == [3, 64, 64, 128, 256, 512]
    _segment(model, 2)


def test_a_named_attention_model_is_an_encoder() -> None:
    model = smp.Unet(encoder_name("se_resnet50"), encoder_weights=None, classes=3)
    assert model.encoder.out_channels == [3, 64, 256, 512, 1024, 2048]
    _segment(model, 3)


@pytest.mark.parametrize("output_stride", [16, 8])
def test_deeplabv3plus_gets_the_dilated_resnet(output_stride) -> None:
    model = smp.DeepLabV3Plus(
        encoder_name("resnet18", output_stride=output_stride),
        encoder_weights=None,
        classes=2,
        encoder_output_stride=output_stride,
        attention={"name": "se"},
    )
    backbone = model.encoder.model.model  # inside timm's FeatureGetterNet
    assert model.encoder.model.feature_info.reduction()[-1] == output_stride
    feats = model.encoder(torch.randn(1, 3, SIZE, SIZE))
    assert feats[-1].shape[-1] == SIZE // output_stride
    dilations = {m.dilation for m in backbone.layer4.modules() if isinstance(m, torch.nn.Conv2d)}
    assert (32 // output_stride,) * 2 in dilations  # layer4: dilated by 2 (stride 16), 4 (stride 8)
    _segment(model, 2)


def test_local_weights_reach_the_encoder(tmp_path) -> None:
    file = tmp_path / "resnet18.pth"
    theirs = timm.create_model("resnet18")
    torch.save(theirs.state_dict(), file)
    model = smp.Unet(
        encoder_name("resnet18"),
        encoder_weights=True,
        classes=2,
        pretrained_cfg_overlay={"file": str(file)},
    )
    torch.testing.assert_close(
        model.encoder.model.model.layer3[1].conv2.weight, theirs.layer3[1].conv2.weight
    )


def test_gsop_at_stride_32_is_an_encoder_and_the_official_layout_is_refused_with_the_reason() -> (
    None
):
    with pytest.raises(ValueError, match="Unsupported model downsampling pattern"):
        smp.Unet("tu-visattn_gsop_resnet50", encoder_weights=None, last_stride=2)
    with pytest.raises(ValueError, match=r"strides 2, 4, 8, 16, 16.*use 'gsop_resnet50_s32'"):
        encoder_name("gsop_resnet50")
    model = smp.FPN(encoder_name("gsop_resnet50_s32"), encoder_weights=None, classes=2)
    gsop = visattn.block_info("gsop").cls
    assert sum(isinstance(m, gsop) for m in model.encoder.model.model.modules()) == 4
    _segment(model, 2)


@pytest.mark.parametrize(
    ("name", "strides"),
    [
        ("resnet56_cifar", "1, 1, 2, 4"),
        ("se_resnet56_cifar", "1, 1, 2, 4"),
        ("attention56_cifar", "1, 1, 2, 4, 4"),
    ],
)
def test_cifar_models_are_refused_naming_their_strides(name, strides) -> None:
    with pytest.raises(
        ValueError, match=rf"strides {strides},.*CIFAR network has no stride-32 pyramid"
    ):
        encoder_name(name)


def test_models_without_a_dilated_form_are_refused_for_deeplab() -> None:
    assert encoder_name("attention56") == "tu-visattn_attention56"
    with pytest.raises(ValueError, match="no output_stride option"):
        encoder_name("attention56", output_stride=16)
    with pytest.raises(ValueError, match="8, 16 or 32"):
        encoder_name("resnet50", output_stride=4)
    with pytest.raises(KeyError, match="se_resnet50"):
        encoder_name("se_resnet5")


def test_a_block_that_cannot_work_dilated_is_refused_for_deeplab_with_visattns_reason() -> None:
    assert encoder_name("botnet50") == "tu-visattn_botnet50"
    with pytest.raises(ValueError, match=r"botnet50.*output_stride 16.*mhsa.*dilated"):
        encoder_name("botnet50", output_stride=16)
    # GE's global gather is sized for layer4's 7x7 map at 224 px; dilated, the map is 14x14
    with pytest.raises(ValueError, match=r"ge_resnet50.*output_stride 16.*7x7 inputs.*14x14"):
        encoder_name("ge_resnet50", output_stride=16)


#: every ImageNet model under Unet (stride 32) and DeepLabV3+ (stride 16); the default run keeps
#: a channel-attention ResNet, the conv-replacing BoTNet and a Residual Attention Network
SCRIPT_CASES = tiered(
    [
        (name, arch)
        for name in visattn.list_models()
        if get_model_spec(name).dataset == "imagenet"
        for arch in ("Unet", "DeepLabV3Plus")
    ],
    keep=lambda case: (
        case
        in {
            ("se_resnet50", "Unet"),
            ("se_resnet50", "DeepLabV3Plus"),
            ("botnet50", "Unet"),
            ("attention56", "Unet"),
        }
    ),
)


#: models whose gather spans the whole map at their paper's input (GE-θ+: a depthwise kernel
#: the size of each stage's map at 224 px), so they run at 224 px, not at SIZE
FULL_EXTENT_INPUT = {"ge_resnet50": 224}


@pytest.mark.parametrize(("name", "arch"), SCRIPT_CASES)
def test_every_encoder_smp_can_build_scripts_inside_smp(name: str, arch: str, tmp_path) -> None:
    """smp declares its timm-universal encoders scriptable: every ``tu-visattn_*`` ImageNet
    encoder that :func:`encoder_name` accepts compiles with ``torch.jit.script`` inside the
    decoder, gives the eager outputs, and saves and reloads; one it refuses says why."""
    output_stride = 32 if arch == "Unet" else 16
    try:
        encoder = encoder_name(name, output_stride=output_stride)
    except ValueError as err:
        assert re.search(rf"visattn model '{name}'.* cannot be", str(err)), err  # and why
        return
    options = {} if arch == "Unet" else {"encoder_output_stride": output_stride}
    model = getattr(smp, arch)(encoder, encoder_weights=None, classes=2, **options).eval()
    scripted = torch.jit.script(model)
    torch.jit.save(scripted, tmp_path / "model.pt")
    reloaded = torch.jit.load(tmp_path / "model.pt")
    size = FULL_EXTENT_INPUT.get(name, SIZE)
    x = torch.randn(1, 3, size, size)
    with torch.no_grad():
        want = model(x)
        # the same kernels in another order (GSoP's covariance): float32 rounding, no more
        torch.testing.assert_close(scripted(x), want, rtol=1e-4, atol=1e-4)
        torch.testing.assert_close(reloaded(x), want, rtol=1e-4, atol=1e-4)
