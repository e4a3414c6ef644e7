"""timm's model attributes and config on every named model: ``num_features``,
``head_hidden_size``, ``num_classes``, ``pretrained_cfg`` (``first_conv`` and
``classifier`` naming real modules, ``input_size``, ``mean``/``std`` of the model's dataset,
``pool_size``, ``crop_pct``), ``reset_classifier(0)`` and ``forward_head(pre_logits=True)``."""

from __future__ import annotations

import pytest
import timm
import timm.data
import torch
import torch.nn as nn
from helpers.tiers import kept_model, tiered

import visattn
from visattn.constants import STATS
from visattn.models import get_model_spec
from visattn.models.pretrained import list_pretrained
from visattn.models.registry import registered_models

NAMED = registered_models()
SMALL = 64  # ImageNet models run at 64x64 here; the 224x224 check is marked slow


def _size(name: str) -> int:
    spec = get_model_spec(name)
    if name == "ge_resnet50":  # its global gathers are built for 224x224 (the official model)
        return spec.input_size[1]
    return 32 if spec.dataset == "cifar" else SMALL


def _plain(v):
    return tuple(v) if isinstance(v, (list, tuple)) else v


@pytest.mark.parametrize("name", tiered(NAMED, keep=kept_model))
def test_timm_attributes_and_config_name_real_things(name):
    spec = get_model_spec(name)
    m = visattn.create_model(name).eval()
    cfg = m.pretrained_cfg
    assert m.num_classes == spec.num_classes == cfg["num_classes"] == m.fc.out_features
    assert m.head_hidden_size == m.num_features == m.fc.in_features == m.feature_info[-1]["num_chs"]
    first = m.get_submodule(cfg["first_conv"])
    assert isinstance(first, nn.Conv2d) and first.in_channels == cfg["input_size"][0] == 3
    assert m.get_submodule(cfg["classifier"]) is m.get_classifier() is m.fc
    assert cfg["input_size"] == m.default_input_size == spec.input_size
    dataset = "cifar10" if spec.dataset == "cifar" else "imagenet"
    assert (cfg["mean"], cfg["std"]) == STATS[dataset]
    assert cfg["crop_pct"] == (1.0 if spec.dataset == "cifar" else 0.875)
    side = cfg["input_size"][1] // m.feature_info[-1]["reduction"]
    assert cfg["pool_size"] == (side, side)
    assert len(m.feature_info) == spec.feature_levels
    # the same config through timm
    t = timm.create_model(f"visattn_{name}")
    tags = list_pretrained(f"{name}.*")
    if tags:  # as timm's own models: timm's config is the default tag's (test_timm_tags.py)
        assert t.pretrained_cfg["tag"] == tags[0].tag
        assert t.pretrained_cfg["input_size"] == tags[0].input_size
    keys = ("input_size", "pool_size", "crop_pct", "mean", "std") if not tags else ()
    for key in (*keys, "first_conv", "classifier"):
        assert _plain(t.pretrained_cfg[key]) == _plain(cfg[key]), key
    if not tags:
        assert timm.data.resolve_data_config({}, model=t)["input_size"] == cfg["input_size"]

    x = torch.randn(2, 3, _size(name), _size(name))
    with torch.no_grad():
        feats = m.forward_features(x)
        pooled = m.forward_head(feats, pre_logits=True)
        logits = m(x)
        assert pooled.shape == (2, m.num_features) and logits.shape == (2, m.num_classes)
        m.reset_classifier(0)
        assert m.num_classes == 0 and m.pretrained_cfg["num_classes"] == 0
        torch.testing.assert_close(m(x), pooled)  # pooled features of size num_features
    m.reset_classifier(7)
    assert m(x).shape == (2, 7) and m.get_classifier().out_features == 7


def test_cifar100_models_report_cifar100_statistics():
    m = visattn.create_model("attention92_cifar", num_classes=100)
    assert (m.pretrained_cfg["mean"], m.pretrained_cfg["std"]) == STATS["cifar100"]


@pytest.mark.parametrize(
    "name",
    tiered(
        [n for n in NAMED if get_model_spec(n).dataset == "imagenet"],
        keep=kept_model,
    ),
)
def test_pool_size_is_the_final_map_at_the_default_input_size(name):
    m = visattn.create_model(name).eval()
    with torch.no_grad():
        feats = m.forward_features(torch.randn(1, *m.pretrained_cfg["input_size"]))
    assert tuple(feats.shape[-2:]) == m.pretrained_cfg["pool_size"]
