"""visattn's released weights as timm serves its own: a default tag per model, every tag in
``timm.list_pretrained``, each tag's ``pool_size`` right for its input size, and an offline
download failure that names the local-file route."""

from __future__ import annotations

import huggingface_hub.constants
import pytest
import timm
import torch
from helpers.tiers import tiered

import visattn  # noqa: F401 (registers the visattn_* models in timm)
from visattn.models.pretrained import list_pretrained


def test_every_released_tag_is_in_timms_pretrained_list() -> None:
    ours = {f"visattn_{t.name}" for t in list_pretrained()}
    assert set(timm.list_pretrained("visattn_*")) == ours
    assert len(ours) == len(list_pretrained())


def test_default_tag_is_timms_for_the_weights_timm_hosts() -> None:
    model = timm.create_model("visattn_se_resnet50")
    assert model.pretrained_cfg["tag"] == timm.create_model("seresnet50").pretrained_cfg["tag"]
    # a model without released weights keeps an untagged config
    assert not timm.create_model("visattn_resnet20_cifar").pretrained_cfg.get("tag")


def test_a_tags_local_file_loads_through_its_converter(tmp_path) -> None:
    """With a tag and a local file, the tag's converter reads the file (timm's seresnet50 here);
    without a tag a local file is read as any state dict (test_named_models.py)."""
    source = timm.create_model("seresnet50", num_classes=1000)
    torch.save(source.state_dict(), tmp_path / "w.pth")
    model = timm.create_model(
        "visattn_se_resnet50.a1_in1k",
        pretrained=True,
        pretrained_cfg_overlay={"file": str(tmp_path / "w.pth")},
    ).eval()
    x = torch.randn(1, 3, 64, 64)
    with torch.no_grad():
        torch.testing.assert_close(model(x), source.eval()(x), rtol=1e-4, atol=1e-4)


def test_hub_failure_offline_names_the_local_file_route(monkeypatch) -> None:
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)
    route = r"se_resnet50\.\w+_in1k.*pretrained_cfg_overlay=dict\(file=PATH\).*HF_HUB_OFFLINE"
    with pytest.raises(OSError, match=route):
        timm.create_model("visattn_se_resnet50", pretrained=True)


@pytest.mark.parametrize(
    "tag", tiered([t.name for t in list_pretrained()], keep={"se_resnet50.a3_in1k"})
)
def test_declared_pool_size_is_the_feature_map_at_the_declared_input_size(tag: str) -> None:
    model = timm.create_model(f"visattn_{tag}").eval()
    cfg = model.pretrained_cfg
    with torch.no_grad():
        features = model.forward_features(torch.randn(1, *cfg["input_size"]))
    assert tuple(features.shape[-2:]) == tuple(cfg["pool_size"]), (tag, cfg["input_size"])


def test_no_connection_fails_at_once_without_trying_the_hub(monkeypatch) -> None:
    """Trial of round 7: the README's timm line took 78 s offline (the hub's retries) before
    its message. A host that does not answer within the probe's few seconds fails at once, and
    timm's download is never started."""
    from visattn.models import timm_bridge

    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.setattr(timm_bridge, "online", lambda host, port=443: False)
    monkeypatch.setattr(timm_bridge, "_cached", lambda tag: False)

    def no_download(*args, **kwargs):
        raise AssertionError("timm's download was started")

    monkeypatch.setattr(timm_bridge, "build_model_with_cfg", no_download)
    with pytest.raises(OSError, match=r"no connection to huggingface\.co.*file=PATH"):
        timm.create_model("visattn_se_resnet50.ra2_in1k", pretrained=True)


def test_the_probe_says_offline_at_once_under_hf_hub_offline(monkeypatch) -> None:
    from visattn.models import timm_bridge

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    assert timm_bridge.online("huggingface.co") is False
