"""The released ECA-Nets of every depth (BangguWu/ECANet): a reference network written here from
reading the authors' ``models/eca_resnet.py`` (ECA after the last BN of a basic or bottleneck
block, one Conv1d kernel per stage), saved with random weights the way their training script
saves it (under ``state_dict``, ``module.`` prefix), loads through the tag with equal outputs."""

from __future__ import annotations

from pathlib import Path

import pytest
import timm
import torch
import torch.nn as nn
import torch.nn.functional as F
from helpers.weights import assert_same_outputs, randomize

import visattn
from visattn.models.pretrained import get_pretrained, load_pretrained
from visattn.models.zoo import ECA_RELEASED_KERNELS

X = torch.randn(2, 3, 64, 64, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
LAYOUTS = {18: (2, 2, 2, 2), 34: (3, 4, 6, 3), 101: (3, 4, 23, 3), 152: (3, 8, 36, 3)}


class _Eca(nn.Module):  # the authors' layer: mean over H, W, a Conv1d across channels, sigmoid
    def __init__(self, k: int) -> None:
        super().__init__()
        self.conv = nn.Conv1d(1, 1, k, padding=k // 2, bias=False)

    def forward(self, x):
        w = self.conv(x.mean((2, 3))[:, None, :])  # (N, 1, C)
        return x * torch.sigmoid(w)[:, 0, :, None, None]


class _Block(nn.Module):
    """A basic (two 3x3) or bottleneck (1x1, 3x3, 1x1, x4) block with ECA after its last BN."""

    def __init__(self, cin: int, planes: int, stride: int, k: int, bottleneck: bool) -> None:
        super().__init__()
        widths = (
            [(cin, planes, 1, 1), (planes, planes, 3, stride), (planes, planes * 4, 1, 1)]
            if bottleneck
            else [(cin, planes, 3, stride), (planes, planes, 3, 1)]
        )
        for i, (a, b, ks, s) in enumerate(widths, 1):
            setattr(self, f"conv{i}", nn.Conv2d(a, b, ks, s, ks // 2, bias=False))
            setattr(self, f"bn{i}", nn.BatchNorm2d(b))
        self.n = len(widths)
        cout = widths[-1][1]
        self.eca = _Eca(k)
        self.downsample = None
        if stride != 1 or cin != cout:
            self.downsample = nn.Sequential(
                nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout)
            )

    def forward(self, x):
        out = x
        for i in range(1, self.n + 1):
            out = getattr(self, f"bn{i}")(getattr(self, f"conv{i}")(out))
            if i < self.n:
                out = F.relu(out)
        short = x if self.downsample is None else self.downsample(x)
        return F.relu(self.eca(out) + short)


class _RefEcaResNet(nn.Module):
    def __init__(self, depth: int) -> None:
        super().__init__()
        bottleneck = depth >= 50
        self.conv1 = nn.Conv2d(3, 64, 7, 2, 3, bias=False)
        self.bn1 = nn.BatchNorm2d(64)
        cin = 64
        for i, (planes, n) in enumerate(zip((64, 128, 256, 512), LAYOUTS[depth])):
            blocks = []
            for j in range(n):
                stride = 2 if i > 0 and j == 0 else 1
                k = ECA_RELEASED_KERNELS[depth][i]
                blocks.append(_Block(cin, planes, stride, k, bottleneck))
                cin = planes * (4 if bottleneck else 1)
            setattr(self, f"layer{i + 1}", nn.Sequential(*blocks))
        self.fc = nn.Linear(cin, 1000)

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.bn1(self.conv1(x))), 3, 2, 1)
        for i in range(1, 5):
            x = getattr(self, f"layer{i}")(x)
        return self.fc(x.mean((2, 3)))


def _authors_file(depth: int, path: Path) -> tuple[nn.Module, Path]:
    torch.manual_seed(depth)
    ref = randomize(_RefEcaResNet(depth), depth, norms_only=True)
    torch.save({"state_dict": {f"module.{k}": v for k, v in ref.state_dict().items()}}, path)
    return ref, path


@pytest.mark.parametrize(
    "depth",
    [18, 34, 101, 152],
)
def test_released_eca_net_loads_through_its_tag_with_equal_outputs(tmp_path: Path, depth: int):
    ref, path = _authors_file(depth, tmp_path / f"eca_resnet{depth}.pth.tar")
    tag = get_pretrained(f"eca_resnet{depth}.official_in1k")
    ours = timm.create_model(
        f"visattn_{tag.name}", pretrained=True, pretrained_cfg_overlay={"file": str(path)}
    )
    assert_same_outputs(ours, ref, X)


def test_eca_kernels_of_each_named_model_are_the_released_ones():
    for depth, kernels in ECA_RELEASED_KERNELS.items():
        model = visattn.create_model(f"eca_resnet{depth}")
        got = [
            m.conv.kernel_size[0]
            for name, m in model.named_modules()
            if name.endswith("attn_standard") and name.split(".")[1] == "0"
        ]
        assert tuple(got) == kernels, depth


def test_an_eca_file_of_another_depth_is_refused_naming_the_keys(tmp_path: Path):
    _, path = _authors_file(18, tmp_path / "eca18.pth.tar")
    model = visattn.create_model("eca_resnet34")
    before = {k: v.clone() for k, v in model.state_dict().items()}
    with pytest.raises(ValueError, match=r"missing key\(s\): layer1\.2\.conv1\.weight"):
        load_pretrained(model, path, source="eca_official")
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())


def test_a_tag_published_for_download_by_hand_says_where(tmp_path: Path):
    with pytest.raises(ValueError, match=r"download it, then pass pretrained_cfg_overlay"):
        timm.create_model("visattn_eca_resnet18.official_in1k", pretrained=True)
