"""visattn models as timm citizens for detection and segmentation: ``features_only`` /
``out_indices`` through timm's machinery, ``feature_info``, ``forward_intermediates``,
gradient checkpointing, local ``pretrained`` files, ``pretrained_backbone=``, and real
consumers (torchvision's FeaturePyramidNetwork, ``torch.export``)."""

from __future__ import annotations

import warnings

import pytest
import timm
import torch
import torchvision
from torchvision.ops import FeaturePyramidNetwork

import visattn

# (timm name, extra kwargs, input size): one per family; ImageNet ones at small inputs
FAMILIES = [
    ("visattn_resnet20_cifar", {}, 32),
    ("visattn_se_resnet20_cifar", {}, 32),
    ("visattn_preresnet164_cifar", {}, 32),
    ("visattn_resnet18", {"attention": {"name": "cbam"}}, 64),
    ("visattn_se_resnet50", {}, 64),
    ("visattn_gsop_resnet50", {}, 64),
    ("visattn_bam_resnet50", {}, 64),
    ("visattn_attention56", {}, 64),
    ("visattn_attention56_cifar", {}, 32),
    ("visattn_attention92_cifar", {}, 32),
]


def _ids(f):
    return f[0].removeprefix("visattn_")


@pytest.mark.parametrize(("name", "kwargs", "size"), FAMILIES, ids=[_ids(f) for f in FAMILIES])
def test_features_only_follows_feature_info_and_equals_forward_intermediates(name, kwargs, size):
    full = timm.create_model(name, **kwargs).eval()
    info = full.feature_info
    assert info[0]["reduction"] <= 2 and len(info) == len(full.feature_stages()) + 1
    feats = timm.create_model(name, features_only=True, out_indices=(1, 2, 3), **kwargs).eval()
    missing, _ = feats.model.load_state_dict(full.state_dict(), strict=False)  # pruned
    assert not missing
    assert feats.feature_info.channels() == [info[i]["num_chs"] for i in (1, 2, 3)]
    assert feats.feature_info.reduction() == [info[i]["reduction"] for i in (1, 2, 3)]
    x = torch.randn(2, 3, size, size)
    with torch.no_grad():
        out = feats(x)
        want = full.forward_intermediates(x, indices=[1, 2, 3], intermediates_only=True)
        final, every = full.forward_intermediates(x)
        torch.testing.assert_close(final, full.forward_features(x))
    assert len(out) == 3 and len(every) == len(info)
    for o, w, i in zip(out, want, (1, 2, 3)):
        r = info[i]["reduction"]
        assert o.shape == (2, info[i]["num_chs"], -(-size // r), -(-size // r))
        torch.testing.assert_close(o, w)
    for f, i in zip(every, info):  # every feature index, the stem included
        assert f.shape[1] == i["num_chs"] and f.shape[-1] == -(-size // i["reduction"])
        assert full.get_submodule(i["module"]) is not None  # module names are real


@pytest.mark.parametrize(
    "name", ["visattn_resnet20_cifar", "visattn_preresnet164_cifar", "visattn_attention56_cifar"]
)
def test_features_only_without_out_indices_returns_every_level(name):
    m = timm.create_model(name, features_only=True).eval()
    with torch.no_grad():
        out = m(torch.randn(1, 3, 32, 32))
    assert [o.shape[1] for o in out] == m.feature_info.channels()
    assert len(out) == visattn.models.get_model_spec(name).feature_levels


def test_forward_intermediates_takes_timms_index_forms():
    m = visattn.create_model("resnet20_cifar").eval()
    x = torch.randn(1, 3, 32, 32)
    with torch.no_grad():
        last2 = m.forward_intermediates(x, indices=2, intermediates_only=True)
        all_ = m.forward_intermediates(x, intermediates_only=True)
        neg = m.forward_intermediates(x, indices=[-1], intermediates_only=True)
        final, early = m.forward_intermediates(x, indices=[1], stop_early=True)
    assert [t.shape[1] for t in last2] == [32, 64] and len(all_) == 4
    torch.testing.assert_close(neg[0], all_[-1])
    torch.testing.assert_close(final, early[0])  # stopped after layer1
    with pytest.raises(ValueError, match="output_fmt"):
        m.forward_intermediates(x, output_fmt="NHWC")


def test_fpn_on_attention_backbone_features_runs_forward_and_backward():
    """A real consumer: torchvision's FeaturePyramidNetwork on features_only outputs."""
    backbone = timm.create_model(
        "visattn_resnet18", features_only=True, out_indices=(1, 2, 3, 4), attention={"name": "se"}
    )
    fpn = FeaturePyramidNetwork(backbone.feature_info.channels(), out_channels=32)
    x = torch.randn(2, 3, 96, 96)
    feats = backbone(x)
    pyramid = fpn({str(i): f for i, f in enumerate(feats)})
    assert [tuple(p.shape) for p in pyramid.values()] == [
        (2, 32, 24, 24),
        (2, 32, 12, 12),
        (2, 32, 6, 6),
        (2, 32, 3, 3),
    ]
    sum(p.square().mean() for p in pyramid.values()).backward()
    se = backbone.model.layer1[0].attn_standard
    assert all(p.grad is not None and p.grad.abs().sum() > 0 for p in se.parameters())
    assert backbone.model.conv1.weight.grad.abs().sum() > 0


def test_features_only_model_goes_through_torch_export():
    m = timm.create_model("visattn_se_resnet20_cifar", features_only=True, out_indices=(1, 2, 3))
    m.eval()
    x = torch.randn(2, 3, 32, 32)
    ep = torch.export.export(m, (x,))
    y = torch.randn(2, 3, 32, 32)
    with torch.no_grad():
        for a, b in zip(ep.module()(y), m(y)):
            torch.testing.assert_close(a, b)


@pytest.mark.parametrize("name", ["se_resnet20_cifar", "attention56_cifar"])
def test_grad_checkpointing_gives_the_same_outputs_and_gradients(name):
    torch.manual_seed(0)
    a = visattn.create_model(name)
    b = visattn.create_model(name)
    b.load_state_dict(a.state_dict())
    b.set_grad_checkpointing(True)
    x = torch.randn(2, 3, 32, 32)
    ya, yb = a(x), b(x)
    torch.testing.assert_close(ya, yb)
    ya.sum().backward()
    yb.sum().backward()
    for (n, pa), pb in zip(a.named_parameters(), b.parameters()):
        torch.testing.assert_close(pa.grad, pb.grad, msg=n)


# ----------------------------------------------------------------------------- weights


@pytest.fixture(scope="module")
def torchvision_resnet18_file(tmp_path_factory):
    torch.manual_seed(0)
    tv = torchvision.models.resnet18(weights=None)
    path = tmp_path_factory.mktemp("weights") / "resnet18_torchvision.pth"
    torch.save(tv.state_dict(), path)
    return tv.eval(), path


def test_timm_pretrained_with_a_local_file_loads_and_reports_attention_keys(
    torchvision_resnet18_file,
):
    tv, path = torchvision_resnet18_file
    with pytest.warns(UserWarning, match="attention tensor"):
        m = timm.create_model(
            "visattn_resnet18",
            pretrained=True,
            pretrained_cfg_overlay={"file": str(path)},
            attention={"name": "se"},
        )
    report = m.checkpoint_report
    assert report.new_keys and all(".attn_standard." in k for k in report.new_keys)
    sd = m.state_dict()
    for k, v in tv.state_dict().items():
        torch.testing.assert_close(sd[k], v)
    # features_only with the same file, and another num_classes: the classifier is reset
    feats = timm.create_model(
        "visattn_resnet18",
        features_only=True,
        pretrained=True,
        pretrained_cfg_overlay={"file": str(path)},
    )
    torch.testing.assert_close(feats.model.conv1.weight, tv.conv1.weight)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ten = timm.create_model(
            "visattn_resnet18",
            num_classes=10,
            pretrained=True,
            pretrained_cfg_overlay={"file": str(path)},
        )
    assert ten.checkpoint_report.reset_keys == ["fc.weight", "fc.bias"]
    torch.testing.assert_close(ten.layer4[1].bn2.weight, tv.layer4[1].bn2.weight)


def test_identity_insertion_composes_with_the_local_pretrained_file(torchvision_resnet18_file):
    tv, path = torchvision_resnet18_file
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        m = timm.create_model(
            "visattn_resnet18",
            pretrained=True,
            pretrained_cfg_overlay={"file": str(path)},
            attention={"name": "se", "init": "identity"},
        ).eval()
    x = torch.randn(2, 3, 64, 64)
    with torch.no_grad():
        torch.testing.assert_close(m(x), tv(x))


def test_timm_pretrained_without_a_file_is_a_clear_error():
    """A model without released weights (one with them downloads its default tag)."""
    with pytest.raises(ValueError, match=r"no pretrained weights to download.*file="):
        timm.create_model("visattn_resnet50", pretrained=True)


def test_pretrained_backbone_loads_torchvision_weights_strictly_for_the_backbone(
    torchvision_resnet18_file, tmp_path
):
    tv, path = torchvision_resnet18_file
    with pytest.warns(UserWarning, match="attention tensor"):
        m = visattn.create_model(
            "resnet18", num_classes=10, attention={"name": "cbam"}, pretrained_backbone=path
        )
    assert m.checkpoint_report.reset_keys == ["fc.weight", "fc.bias"]
    torch.testing.assert_close(m.layer3[0].downsample[0].weight, tv.layer3[0].downsample[0].weight)
    sd = tv.state_dict()
    broken = {
        "missing": (
            {k: v for k, v in sd.items() if k != "layer2.0.bn1.running_mean"},
            "missing key.*layer2.0.bn1.running_mean",
        ),
        "unexpected": (
            {**sd, "layer5.0.conv1.weight": torch.zeros(1)},
            "unexpected key.*layer5.0.conv1.weight",
        ),
        "shape": (
            {**sd, "layer1.0.conv1.weight": torch.zeros(64, 64, 1, 1)},
            "shape mismatch.*layer1.0.conv1.weight",
        ),
    }
    for kind, (state, message) in broken.items():
        torch.save(state, tmp_path / f"{kind}.pth")
        with pytest.raises(ValueError, match=message):
            visattn.create_model(
                "resnet18", attention={"name": "se"}, pretrained_backbone=tmp_path / f"{kind}.pth"
            )
    with pytest.raises(ValueError, match="not both"):
        visattn.create_model("resnet18", checkpoint_path=path, pretrained_backbone=path)
