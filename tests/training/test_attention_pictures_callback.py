"""``visattn.visualize.maps.logger_pictures`` (what ``AttentionPictures`` logs): one picture per map
kind with the images side by side, pixels in [0, 1], the network left as it was; the callback
refuses impossible settings."""

from __future__ import annotations

import pytest
import torch

pytest.importorskip("lightning")
pytest.importorskip("matplotlib")

import visattn
from visattn.training.callbacks import AttentionPictures
from visattn.visualize.maps import _overlay, logger_pictures


def _net() -> torch.nn.Module:
    placements = [
        {"name": "cbam", "stages": [2]},
        {"name": "se", "position": "post", "stages": [3]},
    ]
    return visattn.create_model("resnet20_cifar", num_classes=5, attention=placements)


def test_logger_pictures_hold_every_map_kind_side_by_side() -> None:
    pytest.importorskip("pytorch_grad_cam")
    net = _net().train()
    before = {k: v.clone() for k, v in net.state_dict().items()}
    images = torch.randn(3, 3, 16, 16)
    display = torch.rand(3, 3, 16, 16)
    pictures = logger_pictures(net, images, display, labels=[0, 1, 2], min_size=48)
    with visattn.capture_attention(net.eval()) as maps:
        net(images)
    spatial = sorted(p for p, m in maps.items() if m.shape[-1] * m.shape[-2] > 1)
    assert spatial and all(p.startswith("layer2.") for p in spatial)
    assert sorted(pictures) == sorted(
        ["gradcam/layer3", "channels/layer3", *(f"attention/{p}" for p in spatial)]
    )
    for tag, pic in pictures.items():
        assert pic.dim() == 3 and pic.shape[0] == 3, tag
        assert float(pic.min()) >= 0.0 and float(pic.max()) <= 1.0, tag
    # 16 px images enlarged 3x to 48 px, three in a row with make_grid's 2 px padding
    assert tuple(pictures["gradcam/layer3"].shape) == (3, 48 + 4, 3 * (48 + 2) + 2)
    net.train()
    assert net.training
    assert all(torch.equal(before[k], v) for k, v in net.state_dict().items())


def test_logger_pictures_overlay_follows_the_map() -> None:
    """A map that is high on the left half only reddens the left half (jet: high = red)."""
    display = torch.zeros(1, 3, 8, 8)
    maps = torch.zeros(1, 8, 8)
    maps[:, :, :4] = 1.0
    over = _overlay(display, maps)
    assert float(over[0, 0, :, :4].mean()) > float(over[0, 0, :, 4:].mean())
    assert float(over[0, 2, :, 4:].mean()) > float(over[0, 2, :, :4].mean())


@pytest.mark.parametrize("kwargs", [{"every_n_epochs": 0}, {"num_images": 0}])
def test_attention_pictures_refuse_impossible_settings(kwargs: dict) -> None:
    with pytest.raises(ValueError, match=next(iter(kwargs))):
        AttentionPictures(**kwargs)
