"""Grad-CAM's default layer on networks that are not ResNets: the last module of timm's
``feature_info`` or the last child of torchvision's ``features`` / ``trunk_output`` trunk, and
a clear refusal for a network with none of them."""

from __future__ import annotations

import pytest
import torch

import visattn
from visattn._nets import last_stage
from visattn.visualize.localization import gradcam


@pytest.mark.parametrize(
    "name, path",
    [
        ("tv:mobilenet_v3_small", "features.12"),
        ("tv:regnet_x_400mf", "trunk_output.block4"),
        ("timm:mobilenetv3_small_050", "blocks.5"),
    ],
)
def test_last_stage_of_other_families_is_their_last_feature_module(name: str, path: str) -> None:
    net = visattn.create_model(name, num_classes=9)
    assert last_stage(net)[0] == path
    assert last_stage(net)[1] is net.get_submodule(path)
    maps = gradcam(net, torch.randn(2, 3, 64, 64))
    assert maps.shape == (2, 64, 64) and torch.isfinite(maps).all()


def test_a_network_without_stages_is_refused_by_name() -> None:
    with pytest.raises(ValueError, match="Linear has no recognisable last stage"):
        last_stage(torch.nn.Linear(2, 2))
