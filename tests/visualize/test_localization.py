"""Localization scores on hand-made maps, and score_model on a network with known attention."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn as nn

import visattn
from visattn.visualize.localization import energy_in_box, pointing_game, score_model


def _box(x0: float, y0: float, x1: float, y1: float, n: int = 1) -> torch.Tensor:
    return torch.tensor([[x0, y0, x1, y1]] * n, dtype=torch.float32)


def test_energy_is_one_when_all_mass_lies_in_the_box() -> None:
    m = torch.zeros(1, 8, 8)
    m[0, 2:5, 3:6] = torch.rand(3, 3) + 0.1  # cells rows 2..4, cols 3..5 -> pixels 12..23 / 8..19
    e = energy_in_box(m, _box(12, 8, 24, 20), image_size=32)
    assert e.item() == pytest.approx(1.0, abs=1e-6)


def test_energy_is_zero_when_no_mass_lies_in_the_box() -> None:
    m = torch.zeros(1, 8, 8)
    m[0, 6:, 6:] = 1.0  # bottom-right corner: pixels 24..31
    e = energy_in_box(m, _box(0, 0, 16, 16), image_size=32)
    assert e.item() == 0.0


def test_pointing_game_hits_inside_and_misses_outside() -> None:
    m = torch.zeros(2, 8, 8)
    m[0, 3, 4] = 1.0  # cell covering pixels x 16..19, y 12..15
    m[1, 0, 0] = 1.0
    hits = pointing_game(m, _box(14, 10, 22, 18, n=2), image_size=32)
    assert hits.tolist() == [1.0, 0.0]


def test_energy_counts_the_part_of_a_cell_inside_the_box() -> None:
    # a uniform 4x4 map on a 32x32 image: the share equals the box's area fraction, even when the
    # box cuts through cells (independent of how the cells are laid out)
    m = torch.ones(3, 4, 4)
    boxes = torch.tensor([[0, 0, 16, 16], [4, 0, 12, 32], [3.0, 5.0, 13.5, 30.0]])
    expected = [(16 * 16) / 1024, (8 * 32) / 1024, (10.5 * 25) / 1024]
    assert energy_in_box(m, boxes, image_size=(32, 32)).tolist() == pytest.approx(expected)


def test_channel_axis_is_averaged_and_negative_mass_ignored() -> None:
    m = torch.zeros(1, 2, 4, 4)
    m[0, 0, 0, 0] = 3.0  # inside box (0, 0, 8, 8) at map size 4 -> image 16
    m[0, 1, 3, 3] = 1.0  # outside
    m[0, 1, 2, 2] = -5.0  # negative: clamped after the channel mean
    e = energy_in_box(m, _box(0, 0, 8, 8), image_size=16)
    # channel mean: 1.5 inside, 0.5 outside, -2.5 dropped
    assert e.item() == pytest.approx(1.5 / 2.0)


def test_empty_map_gives_nan_energy() -> None:
    assert math.isnan(energy_in_box(torch.zeros(1, 4, 4), _box(0, 0, 2, 2)).item())


def test_pointing_tolerance_counts_near_misses() -> None:
    m = torch.zeros(1, 32, 32)
    m[0, 10, 20] = 1.0  # pixel centre (20.5, 10.5)
    box = _box(0, 0, 18, 18)
    assert pointing_game(m, box).item() == 0.0
    assert pointing_game(m, box, tolerance=3).item() == 1.0


def test_channel_maps_without_extent_are_refused() -> None:
    with pytest.raises(ValueError, match="no spatial extent"):
        energy_in_box(torch.rand(2, 16, 1, 1), _box(0, 0, 4, 4, n=2))
    with pytest.raises(ValueError, match=r"boxes must have shape \(N, 4\)"):
        pointing_game(torch.rand(2, 4, 4), _box(0, 0, 4, 4, n=3))


class _Images(torch.utils.data.Dataset):
    """Black images with one white square per image at a known box."""

    def __init__(self, n: int = 10, size: int = 16, side: int = 4) -> None:
        g = torch.Generator().manual_seed(0)
        self.images = torch.zeros(n, 3, size, size)
        self.boxes = torch.zeros(n, 4)
        for i in range(n):
            x, y = torch.randint(0, size - side + 1, (2,), generator=g).tolist()
            self.images[i, :, y : y + side, x : x + side] = 1.0
            self.boxes[i] = torch.tensor([x, y, x + side, y + side])

    def __len__(self) -> int:
        return len(self.images)

    def __getitem__(self, i: int) -> tuple[torch.Tensor, int]:
        return self.images[i], 0


def test_score_model_scores_spatial_blocks_and_skips_channel_ones() -> None:
    spatial = visattn.create_block("spatial", 3, kernel_size=3)
    with torch.no_grad():  # map = sigmoid(10 * max_c(x) - 5): high exactly on the white square
        spatial.spatial.conv.weight.zero_()
        spatial.spatial.conv.weight[0, 1, 1, 1] = 10.0
        spatial.spatial.conv.bias.fill_(-5.0)
    net = nn.Sequential(spatial, visattn.create_block("se", 3, reduction=1))
    data = _Images()
    scores = score_model(net, data, data.boxes, batch_size=4)
    assert list(scores) == ["0"]  # the SE block (channel family) is not scored
    assert scores["0"]["pointing"] == 1.0
    assert scores["0"]["images"] == len(data)
    # 16 box pixels at ~0.993 against 240 background pixels at ~0.0067
    on, off = torch.sigmoid(torch.tensor(5.0)), torch.sigmoid(torch.tensor(-5.0))
    assert scores["0"]["energy"] == pytest.approx(float(16 * on / (16 * on + 240 * off)), rel=1e-4)


def test_score_model_returns_nothing_without_spatial_blocks() -> None:
    net = nn.Sequential(visattn.create_block("se", 3, reduction=1))
    data = _Images(n=2)
    assert score_model(net, data, data.boxes) == {}


# --------------------------------------------------------------------------- Grad-CAM


class _Known(nn.Module):
    """A network whose Grad-CAM is known in closed form: the last stage is a 1x1 conv with weight
    1 (its activation A is the image), then global average pooling and a linear layer with
    weights (+1, -1). For class 0, alpha = +1/(HW) > 0, so Grad-CAM = ReLU(A) / max = the image
    scaled to [0, 1]; for class 1 every weighted activation is negative and the map is zero."""

    def __init__(self) -> None:
        super().__init__()
        self.stage_names = ("layer1",)
        self.layer1 = nn.Conv2d(1, 1, 1, bias=False)
        self.fc = nn.Linear(1, 2, bias=False)
        with torch.no_grad():
            self.layer1.weight.fill_(1.0)
            self.fc.weight.copy_(torch.tensor([[1.0], [-1.0]]))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc(self.layer1(x).mean((2, 3)))


class _Pairs(torch.utils.data.Dataset):
    def __init__(self, images: torch.Tensor, labels: list[int]) -> None:
        self.images, self.labels = images, labels

    def __len__(self) -> int:
        return len(self.labels)

    def __getitem__(self, i: int) -> tuple[torch.Tensor, int]:
        return self.images[i], self.labels[i]


def _known_images() -> tuple[torch.Tensor, torch.Tensor]:
    images = torch.zeros(2, 1, 32, 32)
    # image 0: 1.0 on the 8x8 box (mass 64) and 0.5 on a 4x8 patch outside (mass 16)
    images[0, 0, 8:16, 8:16] = 1.0
    images[0, 0, 24:28, 0:8] = 0.5
    # image 1: 0.25 on the box (mass 16), its maximum 1.0 on a 4x4 patch outside (mass 16)
    images[1, 0, 8:16, 8:16] = 0.25
    images[1, 0, 26:30, 26:30] = 1.0
    boxes = torch.tensor([[8.0, 8.0, 16.0, 16.0]] * 2)
    return images, boxes


def test_gradcam_of_a_network_with_a_known_answer_is_the_image() -> None:
    from visattn._nets import last_stage
    from visattn.visualize.localization import gradcam

    net = _Known()
    images, _ = _known_images()
    assert last_stage(net)[0] == "layer1"
    maps = gradcam(net, images, [0, 0])
    assert maps.shape == (2, 32, 32)
    torch.testing.assert_close(maps[0], images[0, 0])  # max 1 already: min-max leaves it
    torch.testing.assert_close(maps[1], images[1, 0])
    assert gradcam(net, images, [1, 1]).abs().max() == 0  # negative evidence only: empty map


def test_score_gradcam_on_the_known_network_gives_the_closed_form_scores() -> None:
    from visattn.visualize.localization import score_gradcam

    images, boxes = _known_images()
    scores = score_gradcam(_Known(), _Pairs(images, [0, 0]), boxes, batch_size=1)
    # pointing: image 0's maximum is in the box, image 1's is not; energy: 64/80 and 16/32
    assert scores == pytest.approx({"pointing": 0.5, "energy": (0.8 + 0.5) / 2, "images": 2})
    # explaining class 1 gives empty maps: energy undefined, not a fake 0
    empty = score_gradcam(_Known(), _Pairs(images, [1, 1]), boxes)
    assert math.isnan(empty["energy"])


def test_gradcam_runs_on_a_zoo_resnet_at_its_last_stage() -> None:
    from visattn._nets import last_stage
    from visattn.visualize.localization import gradcam

    net = visattn.create_model("resnet20_cifar", num_classes=3).train()
    assert last_stage(net)[0] == "layer3"
    maps = gradcam(net, torch.rand(2, 3, 16, 16), [0, 2])
    assert maps.shape == (2, 16, 16) and 0.0 <= float(maps.min()) <= float(maps.max()) <= 1.0
    assert net.training  # the mode is restored
    assert all(p.grad is None for p in net.parameters())
