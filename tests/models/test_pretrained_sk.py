"""Li's released SK-ResNet-50 (implus/PytorchInsight, "SK-ResNet50*"): a reference network written
here from reading their ``classification/models/imagenet/resnet_sk.py`` (a Bottleneck whose 3x3
is a dense path ``conv2``/``bn2`` and a 32-group path ``conv2g``/``bn2g``, fused by
``conv_fc1``/``bn_fc1`` and selected by ``conv_fc2`` with a softmax over the two), saved with
random weights as their ``imagenet.py`` saves a DataParallel model (under ``state_dict``, with
``module.``), converted and loaded into ``sk_resnet50``: outputs equal. The failures common to
every authors' file are in test_pretrained_loading.py."""

from __future__ import annotations

from pathlib import Path

import timm
import torch
import torch.nn as nn
import torch.nn.functional as F
from helpers.weights import assert_same_outputs, randomize

import visattn
from visattn.models.pretrained import load_pretrained

X = torch.randn(2, 3, 64, 64, generator=torch.Generator().manual_seed(0), dtype=torch.float64)


def _conv_bn(cin: int, cout: int, k: int, stride: int = 1, groups: int = 1) -> tuple:
    return nn.Conv2d(cin, cout, k, stride, k // 2, groups=groups, bias=False), nn.BatchNorm2d(cout)


class _SkBottleneck(nn.Module):
    def __init__(self, cin: int, planes: int, stride: int) -> None:
        super().__init__()
        self.conv1, self.bn1 = _conv_bn(cin, planes, 1)
        self.conv2, self.bn2 = _conv_bn(planes, planes, 3, stride)
        self.conv2g, self.bn2g = _conv_bn(planes, planes, 3, stride, groups=32)
        self.conv3, self.bn3 = _conv_bn(planes, planes * 4, 1)
        self.conv_fc1 = nn.Conv2d(planes, planes // 16, 1, bias=False)
        self.bn_fc1 = nn.BatchNorm2d(planes // 16)
        self.conv_fc2 = nn.Conv2d(planes // 16, 2 * planes, 1, bias=False)
        self.downsample = None
        if stride != 1 or cin != planes * 4:
            self.downsample = nn.Sequential(*_conv_bn(cin, planes * 4, 1, stride))

    def forward(self, x):
        out = F.relu(self.bn1(self.conv1(x)))
        d1 = F.relu(self.bn2(self.conv2(out)))
        d2 = F.relu(self.bn2g(self.conv2g(out)))
        pooled = F.adaptive_avg_pool2d(d1, 1) + F.adaptive_avg_pool2d(d2, 1)
        logits = self.conv_fc2(F.relu(self.bn_fc1(self.conv_fc1(pooled))))
        weights = logits.view(x.shape[0], 2, -1, 1, 1).softmax(1)  # (N, path, C, 1, 1)
        out = self.bn3(self.conv3(d1 * weights[:, 0] + d2 * weights[:, 1]))
        short = x if self.downsample is None else self.downsample(x)
        return F.relu(out + short)


class _RefSkResNet50(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv1, self.bn1 = _conv_bn(3, 64, 7, 2)
        cin = 64
        for i, n in enumerate((3, 4, 6, 3)):
            planes = 64 * 2**i
            blocks = []
            for j in range(n):
                blocks.append(_SkBottleneck(cin, planes, 2 if i and not j else 1))
                cin = planes * 4
            setattr(self, f"layer{i + 1}", nn.Sequential(*blocks))
        self.fc = nn.Linear(2048, 1000)

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.bn1(self.conv1(x))), 3, 2, 1)
        for i in range(1, 5):
            x = getattr(self, f"layer{i}")(x)
        return self.fc(torch.flatten(F.adaptive_avg_pool2d(x, 1), 1))


def _authors_file(path: Path, seed: int = 5) -> tuple[nn.Module, Path]:
    ref = randomize(_RefSkResNet50(), seed, norms_only=True)
    with torch.no_grad():  # selection logits of order 1, so that no path weight sits at 1/2
        for m in ref.modules():
            if isinstance(m, _SkBottleneck):
                m.conv_fc2.weight.mul_(4)
    state = {f"module.{k}": v for k, v in ref.state_dict().items()}
    torch.save({"epoch": 100, "state_dict": state, "best_acc": 77.538}, path)
    return ref.double().eval(), path


def test_authors_sk_resnet50_converts_to_equal_outputs(tmp_path: Path):
    ref, path = _authors_file(tmp_path / "sk_resnet50.pth.tar")
    model = visattn.create_model("sk_resnet50")
    ours = load_pretrained(model, path, source="sk_pytorchinsight")
    assert_same_outputs(ours, ref, X)
    with visattn.capture_attention(ours) as maps, torch.no_grad():
        ours(X)
    assert len(maps) == 16
    assert all((a - 0.5).abs().max() > 0.05 for a in maps.values())  # both paths matter


def test_authors_sk_tag_loads_through_timm(tmp_path: Path):
    ref, path = _authors_file(tmp_path / "sk_resnet50.pth.tar")
    ours = timm.create_model(
        "visattn_sk_resnet50.pytorchinsight_in1k",
        pretrained=True,
        pretrained_cfg_overlay={"file": str(path)},
    )
    assert_same_outputs(ours, ref, X)


def test_sk_resnet50_has_the_published_parameter_count_and_paths():
    """PytorchInsight's README prints 26.15M; a dense and a 32-group 3x3, no BN after SK."""
    model = visattn.create_model("sk_resnet50")
    assert sum(p.numel() for p in model.parameters()) == 26_154_496
    sk = model.layer2[0].conv2
    assert [p[0].groups for p in sk.paths] == [1, 32]
    assert [p[0].dilation for p in sk.paths] == [(1, 1), (1, 1)]
    assert [p[0].stride for p in sk.paths] == [(2, 2), (2, 2)] and sk.rd_channels == 128 // 16
    assert isinstance(model.layer2[0].bn2, nn.Identity)
