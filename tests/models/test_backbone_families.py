"""Attention in the common torchvision and timm CNN families (random weights, 64x64 inputs):
identity at insertion at each family's standard position (logits equal, train and eval mode),
the original state_dict loading with exactly the new keys missing, ``capture_attention``,
``replace: se``, ONNX export, and ``create_model`` with ``tv:``/``timm:`` names.

Three families run in the default tier; the rest of the matrix is ``heavy``."""

from __future__ import annotations

import copy

import pytest
import timm
import torch
import torch.nn as nn
import torchvision
from helpers.weights import randomize

import visattn
from visattn.models.families import is_se

SIZE = (3, 64, 64)
STANDARD = "standard"


def _tv(name: str) -> nn.Module:
    return torchvision.models.get_model(name, weights=None, num_classes=7)


def _timm(name: str) -> nn.Module:
    return timm.create_model(name, pretrained=False, num_classes=7)


# (library, model, classes selected, position): each family's standard position, or after
# plain modules where the family has no rule (DenseNet, VGG)
CASES = [
    ("tv", "mobilenet_v3_small", ["InvertedResidual"], STANDARD),
    ("tv", "efficientnet_b0", ["MBConv"], STANDARD),
    ("tv", "convnext_tiny", ["CNBlock"], STANDARD),
    ("tv", "regnet_y_400mf", ["ResBottleneckBlock"], STANDARD),
    ("tv", "densenet121", ["_Transition"], None),
    ("tv", "vgg11_bn", ["MaxPool2d"], None),
    ("timm", "mobilenetv3_large_100", ["InvertedResidual", "DepthwiseSeparableConv"], STANDARD),
    ("timm", "efficientnet_b0", ["InvertedResidual", "DepthwiseSeparableConv"], STANDARD),
    ("timm", "convnext_nano", ["ConvNeXtBlock"], STANDARD),
    ("timm", "regnetz_b16", ["BottleneckBlock"], STANDARD),
]
DEFAULT_TIER = {("tv", "efficientnet_b0"), ("timm", "convnext_nano"), ("tv", "densenet121")}
MATRIX = [
    pytest.param(
        *c, id=f"{c[0]}-{c[1]}", marks=[] if c[:2] in DEFAULT_TIER else [pytest.mark.heavy]
    )
    for c in CASES
]


def _build(library: str, name: str) -> nn.Module:
    """Random weights with norm statistics and layer scales as a trained network has them
    (ConvNeXt's layer scales start at 1e-6, which would hide any change to its branches)."""
    torch.manual_seed(0)
    model = randomize((_tv if library == "tv" else _timm)(name), 0, norms_only=True)
    with torch.no_grad():
        for key, p in model.named_parameters():
            if key.endswith(("layer_scale", ".gamma")) and "convnext" in name:
                p.uniform_(0.5, 1.0)
    return model


def _run(model: nn.Module, x: torch.Tensor) -> torch.Tensor:
    torch.manual_seed(3)  # the same dropout / stochastic-depth draws in both models
    return model(x)


@pytest.mark.parametrize(("library", "name", "classes", "position"), MATRIX)
def test_identity_insertion_in_each_family(library, name, classes, position):
    original = _build(library, name)
    state = copy.deepcopy(original.state_dict())
    placement = {"name": "cbam", "after": classes, "position": position, "init": "identity"}
    model = copy.deepcopy(original)
    paths = visattn.inject(model, placement, input_size=SIZE)
    assert len(paths) >= 3
    x = torch.randn(3, *SIZE)
    for mode in (False, True):  # eval, then train
        original.train(mode)
        model.train(mode)
        with torch.no_grad():
            torch.testing.assert_close(_run(model, x), _run(original, x), rtol=1e-5, atol=1e-5)
    # the host's parameter names are unchanged: only the blocks' keys are new
    fresh = copy.deepcopy(model)
    result = fresh.load_state_dict(state, strict=False)
    assert result.unexpected_keys == []
    assert result.missing_keys and all(
        any(k.startswith(p + ".") for p in paths) for k in result.missing_keys
    )
    model.eval()
    with visattn.capture_attention(model) as maps:
        model(x)
    assert {p for p in paths if any(k == p or k.startswith(p + ".") for k in maps)} == set(paths)
    # the paper's initialisation changes the function: the comparison above can fail
    other = copy.deepcopy(original).eval()
    visattn.inject(other, {**placement, "init": "default"}, input_size=SIZE)
    with torch.no_grad():
        assert not torch.allclose(other(x), original.eval()(x), atol=1e-4)


@pytest.mark.parametrize(
    ("library", "name"),
    [
        pytest.param("tv", "mobilenet_v3_small", id="tv-mobilenet_v3_small"),
        pytest.param("timm", "efficientnet_b0", id="timm-efficientnet_b0"),
        pytest.param("tv", "regnet_y_400mf", id="tv-regnet_y_400mf", marks=pytest.mark.heavy),
    ],
)
def test_replace_se_swaps_every_squeeze_excitation(library, name):
    """With ``init: identity`` the replacing block passes its input through, so the network
    computes what it would with its SE modules removed (not what it computed with them)."""
    original = _build(library, name).eval()
    se_paths = [p for p, m in original.named_modules() if is_se(m)]
    model = copy.deepcopy(original)
    paths = visattn.inject(model, {"name": "eca", "replace": "se", "init": "identity"})
    assert paths == se_paths
    assert not any(is_se(m) for m in model.modules())
    without_se = copy.deepcopy(original)
    for p in se_paths:
        head, _, attr = p.rpartition(".")
        setattr(without_se.get_submodule(head), attr, nn.Identity())
    x = torch.randn(2, *SIZE)
    with torch.no_grad():
        torch.testing.assert_close(model(x), without_se(x), rtol=1e-5, atol=1e-5)
        assert not torch.allclose(model(x), original(x), atol=1e-4)


def test_position_on_an_unknown_family_names_the_known_ones():
    model = _tv("mobilenet_v3_small")
    keys = list(model.state_dict())
    with pytest.raises(ValueError, match=r"position 'standard' needs a known block family.*MBConv"):
        visattn.inject(
            model, {"name": "se", "after": ["Conv2dNormActivation"], "position": STANDARD}
        )
    with pytest.raises(ValueError, match="a _DenseBlock, a container whose forward runs"):
        visattn.inject(_tv("densenet121"), {"name": "se", "after": "features.denseblock1"})
    assert list(model.state_dict()) == keys


def test_resnet_blocks_by_class_fill_the_same_slots_as_stages():
    by_class = _tv("resnet18")
    paths = visattn.inject(by_class, {"name": "se", "after": ["BasicBlock"], "position": "post"})
    by_stage = _tv("resnet18")
    assert paths == visattn.inject(by_stage, {"name": "se", "position": "post"})
    assert paths[0] == "layer1.0.attn_post"


def test_create_model_builds_torchvision_and_timm_models_with_patterns():
    attention = [{"name": "se", "after": ["MBConv"], "position": STANDARD, "init": "identity"}]
    model = visattn.create_model(
        "tv:efficientnet_b0", num_classes=9, attention=attention, input_size=SIZE
    )
    assert model.attention_paths and model.model_name == "tv:efficientnet_b0"
    assert model(torch.randn(2, *SIZE)).shape == (2, 9)
    assert model.pretrained_cfg["classifier"] == "classifier.1"
    timm_model = visattn.create_model(
        "timm:convnext_nano",
        num_classes=5,
        attention={"name": "eca", "after": ["ConvNeXtBlock"], "position": STANDARD},
        input_size=SIZE,
    )
    assert timm_model.default_input_size == (3, 224, 224)
    assert timm_model.attention_paths[0] == "stages.0.blocks.0.drop_path.attn_before"
    with pytest.raises(KeyError, match="did you mean 'timm:convnext_nano'"):
        visattn.create_model("timm:convnext_nanno")


def test_pretrained_backbone_loads_into_a_torchvision_model(tmp_path):
    trained = _build("tv", "mobilenet_v3_small").eval()
    torch.save(trained.state_dict(), tmp_path / "mnv3.pth")
    model = visattn.create_model(
        "tv:mobilenet_v3_small",
        num_classes=7,
        attention={"name": "cbam", "after": ["InvertedResidual"], "init": "identity"},
        input_size=SIZE,
        pretrained_backbone=tmp_path / "mnv3.pth",
    ).eval()
    assert model.checkpoint_report.new_keys
    x = torch.randn(2, *SIZE)
    with torch.no_grad():
        torch.testing.assert_close(model(x), trained(x), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize(
    "exporter",
    [
        "torchscript",
        pytest.param("dynamo", marks=pytest.mark.heavy),  # 164 s on 2 loaded cores
    ],
)
def test_onnx_export_of_an_injected_torchvision_model(tmp_path, exporter):
    pytest.importorskip("onnxruntime")
    model = _build("tv", "mobilenet_v3_small")
    visattn.inject(model, {"name": "cbam", "after": ["InvertedResidual"], "position": STANDARD})
    report = visattn.export_onnx(model, tmp_path / "m.onnx", input_size=SIZE, exporter=exporter)
    assert report.exporter == exporter and report.max_abs_diff <= 1e-3
