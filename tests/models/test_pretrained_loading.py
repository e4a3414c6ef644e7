"""Loading released weights by tag: ``visattn.create_model("<model>.<tag>")``, a new classifier
for fine-tuning, the user's Hugging Face hub cache (offline), and the failures of the CBAM and
triplet converters (another network's file, a truncated file)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import timm
import torch
import torch.nn as nn
from helpers.weights import randomize

import visattn
from visattn.models.pretrained import get_pretrained, load_pretrained
from visattn.models.resnet import BasicBlock, ResNet

REPO = Path(__file__).resolve().parents[2]
X = torch.randn(2, 3, 64, 64, generator=torch.Generator().manual_seed(0))


def _timm_file(tmp_path: Path, timm_name: str = "skresnet18") -> tuple[nn.Module, Path]:
    ref = randomize(timm.create_model(timm_name), 7, norms_only=True).eval()
    path = tmp_path / f"{timm_name}.pth"
    torch.save(ref.state_dict(), path)
    return ref, path


# --------------------------------------------------------------------------- create_model


def test_create_model_with_a_tag_records_its_config_without_loading():
    model = visattn.create_model("se_resnet50.ra2_in1k", num_classes=10)
    cfg = model.pretrained_cfg
    assert cfg["tag"] == "ra2_in1k" and cfg["hf_hub_id"] == "timm/seresnet50.ra2_in1k"
    assert (cfg["interpolation"], cfg["crop_pct"]) == ("bicubic", 0.875)
    assert model.num_classes == 10 and model.model_name == "se_resnet50"


def test_create_model_with_a_tag_and_pretrained_loads_the_file(tmp_path: Path):
    ref, path = _timm_file(tmp_path)
    ours = visattn.create_model(
        "sk_resnet18.ra_in1k", pretrained=True, pretrained_cfg_overlay={"file": str(path)}
    ).eval()
    with torch.no_grad():
        torch.testing.assert_close(ours(X), ref(X), rtol=1e-5, atol=1e-5)


def test_another_num_classes_keeps_the_backbone_and_a_new_classifier(tmp_path: Path):
    ref, path = _timm_file(tmp_path)
    torch.manual_seed(0)
    ours = visattn.create_model(
        "sk_resnet18.ra_in1k",
        pretrained=True,
        pretrained_cfg_overlay={"file": str(path)},
        num_classes=5,
    ).eval()
    assert ours.fc.out_features == 5
    with torch.no_grad():
        torch.testing.assert_close(
            ours.forward_features(X), ref.forward_features(X), rtol=1e-5, atol=1e-5
        )
    # the backbone check stays strict: a file of another network is refused
    _, other = _timm_file(tmp_path, "resnet18")
    with pytest.raises(ValueError, match=r"missing key\(s\)"):
        visattn.create_model(
            "sk_resnet18.ra_in1k",
            pretrained=True,
            pretrained_cfg_overlay={"file": str(other)},
            num_classes=5,
        )


def test_pretrained_without_a_tag_names_the_tags():
    with pytest.raises(ValueError, match=r"se_resnet50\.ra2_in1k"):
        visattn.create_model("se_resnet50", pretrained=True)
    with pytest.raises(KeyError, match=r"se_resnet50\.a1_in1k"):
        visattn.create_model("se_resnet50.a9_in1k")


# --------------------------------------------------------------------------- the hub cache

_LOAD_FROM_CACHE = """
import sys, torch, visattn
model = visattn.create_model("sk_resnet18.ra_in1k", pretrained=True).eval()
with torch.no_grad():
    torch.save(model(torch.load(sys.argv[1])), sys.argv[2])
"""


def test_a_tag_loads_from_the_users_hub_cache_offline(tmp_path: Path):
    """timm asks huggingface_hub for ``model.safetensors`` of the tag's ``hf_hub_id``; offline,
    huggingface_hub answers from ``$HF_HOME/hub/models--<org>--<name>/snapshots/<commit>/``,
    the commit named by ``refs/main``."""
    from safetensors.torch import save_file

    ref = randomize(timm.create_model("skresnet18"), 8, norms_only=True).eval()
    org, name = get_pretrained("sk_resnet18.ra_in1k").hf_hub_id.split("/")
    repo = tmp_path / "hf" / "hub" / f"models--{org}--{name}"
    commit = "0123456789abcdef0123456789abcdef01234567"
    (repo / "snapshots" / commit).mkdir(parents=True)
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text(commit)
    save_file(ref.state_dict(), repo / "snapshots" / commit / "model.safetensors")
    torch.save(X, tmp_path / "x.pt")
    env = {
        **os.environ,
        "HF_HOME": str(tmp_path / "hf"),
        "HF_HUB_OFFLINE": "1",
        "TORCH_HOME": str(tmp_path / "torch"),
        "PYTHONPATH": str(REPO),
        "OMP_NUM_THREADS": "1",
    }
    env.pop("HF_HUB_CACHE", None)
    args = [str(tmp_path / "x.pt"), str(tmp_path / "y.pt")]
    run = subprocess.run(
        [sys.executable, "-c", _LOAD_FROM_CACHE, *args], env=env, capture_output=True, text=True
    )
    assert run.returncode == 0, run.stderr[-2000:]
    with torch.no_grad():
        torch.testing.assert_close(torch.load(tmp_path / "y.pt"), ref(X), rtol=1e-5, atol=1e-5)


# --------------------------------------------------------------------------- failures


def _plain_resnet50_as_the_authors_save(path: Path) -> Path:
    """A torchvision ResNet-50 (no attention) saved as the CBAM authors save theirs."""
    state = timm.create_model("resnet50").state_dict()
    torch.save({"state_dict": {f"module.{k}": v for k, v in state.items()}}, path)
    return path


#: source -> (model, what refusing a plain ResNet-50 file names)
REFUSALS = {
    "cbam_official": (
        "cbam_resnet50",
        r"missing key\(s\): layer1\.0\.attn_standard\.channel\.fc1\.weight",
    ),
    "triplet_official": (
        "triplet_resnet50",
        r"missing key\(s\): layer1\.0\.attn_standard\.\w\w\.conv\.weight",
    ),
    "bam_official": ("bam_resnet50_official", r"missing key\(s\): layer1\.attn_stage\.channel"),
    "fca_official": ("fca_resnet50", r"missing key\(s\): layer1\.0\.attn_standard\.fc1\.weight"),
    "gct_official": ("gct_resnet50_official", r"missing key\(s\): conv1\.attn_before\.alpha"),
    "sk_pytorchinsight": (
        "sk_resnet50",
        r"missing key\(s\): layer1\.0\.conv2\.paths\.1\.0\.weight",
    ),
    "timm_legacy_senet": (
        "legacy_se_resnet50",
        r"missing key\(s\): layer1\.0\.attn_standard\.fc1\.weight",
    ),
    # parameter-free: the keys would fit, the authors' wrapping of conv2 is what is missing
    "simam_official": ("simam_resnet50", r"not a SimAM file: .*layer1\.0\.conv2\.weight"),
}


def _tag(source: str) -> str:
    model_name = REFUSALS[source][0]
    (tag,) = [t.name for t in visattn.list_pretrained(f"{model_name}.*") if t.source == source]
    return tag


@pytest.mark.parametrize("source", sorted(REFUSALS))
def test_authors_converters_refuse_another_network_naming_the_keys(tmp_path: Path, source: str):
    model_name, message = REFUSALS[source]
    path = _plain_resnet50_as_the_authors_save(tmp_path / "resnet50.pth.tar")
    model = visattn.create_model(model_name)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    with pytest.raises(ValueError, match=message):
        load_pretrained(model, path, source=source)
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())
    with pytest.raises(ValueError, match=message):
        timm.create_model(
            f"visattn_{_tag(source)}", pretrained=True, pretrained_cfg_overlay={"file": str(path)}
        )


@pytest.mark.parametrize("source", sorted(REFUSALS))
def test_a_truncated_authors_file_is_named_as_damaged(tmp_path: Path, source: str):
    path = _plain_resnet50_as_the_authors_save(tmp_path / "w.pth.tar")
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])
    tag = get_pretrained(_tag(source))
    with pytest.raises(ValueError, match=rf"checkpoint {path} is damaged \(truncated"):
        load_pretrained(visattn.create_model(tag.model), path, source=tag.source)
    with pytest.raises(ValueError, match=rf"checkpoint {path} is damaged \(truncated"):
        timm.create_model(
            f"visattn_{tag.name}", pretrained=True, pretrained_cfg_overlay={"file": str(path)}
        )


@pytest.mark.parametrize("source", sorted(REFUSALS))
def test_a_wrong_checksum_is_refused_before_reading(tmp_path: Path, source: str):
    path = _plain_resnet50_as_the_authors_save(tmp_path / "w.pth.tar")
    model = visattn.create_model(REFUSALS[source][0])
    before = {k: v.clone() for k, v in model.state_dict().items()}
    with pytest.raises(ValueError, match=r"checksum mismatch .* the file is damaged or not"):
        load_pretrained(model, path, source=source, sha256="00ff00ff")
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())


def test_legacy_senet_weights_are_refused_by_torchvisions_layout(tmp_path: Path):
    """The same keys, another function: the converter checks the Caffe layout."""
    path = tmp_path / "legacy.pth"
    torch.save(timm.create_model("legacy_seresnet50").state_dict(), path)
    with pytest.raises(ValueError, match=r"need the Caffe layout .*build legacy_se_resnet50"):
        load_pretrained(visattn.create_model("se_resnet50"), path, source="timm_legacy_senet")
    caffe = visattn.create_model("resnet50", stride_in_1x1=True, stem_pool_ceil=True)
    assert caffe.layer3[0].conv1.stride == (2, 2) and caffe.layer3[0].conv2.stride == (1, 1)
    assert caffe.maxpool.ceil_mode and caffe.maxpool.padding == 0
    with pytest.raises(ValueError, match="stride_in_1x1 needs Bottleneck blocks"):
        visattn.create_model("resnet18", stride_in_1x1=True)
    with pytest.raises(ValueError, match="stem_pool_ceil needs the ImageNet stem"):
        ResNet(BasicBlock, (1, 1, 1), planes=(16, 32, 64), stem="cifar", stem_pool_ceil=True)
