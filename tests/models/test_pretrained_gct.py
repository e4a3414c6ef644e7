"""The authors' released GCT-ResNet-50 (z-x-yang/GCT, PyTorch): a reference network written here
from reading their ``PyTorch/GCT.py`` and ``PyTorch/resnet.py`` (a GCT wrapped with every conv
as ``nn.Sequential(GCT, conv)``, the stem under ``stem``, the stride on a downsampling
bottleneck's first 1x1 conv), saved with random weights as their ``main.py`` saves it (under
``state_dict``, DDP's ``module.`` prefix), converted and loaded into ``gct_resnet50_official``:
outputs equal. The failures common to every authors' file (a plain ResNet's file, a truncated
file, a wrong checksum) are in test_pretrained_loading.py."""

from __future__ import annotations

from pathlib import Path

import pytest
import timm
import torch
import torch.nn as nn
import torch.nn.functional as F
from helpers.weights import assert_same_outputs, randomize

import visattn
from visattn.models.pretrained import load_pretrained

X = torch.randn(2, 3, 64, 64, generator=torch.Generator().manual_seed(0), dtype=torch.float64)


class _Gct(nn.Module):
    """The authors' GCT, l2 mode: ``eps`` inside the l2 norm of each channel and inside the root
    of the channels' mean square; gate ``1 + tanh``."""

    eps = 1e-5

    def __init__(self, c: int) -> None:
        super().__init__()
        self.alpha = nn.Parameter(torch.ones(1, c, 1, 1))
        self.gamma = nn.Parameter(torch.zeros(1, c, 1, 1))
        self.beta = nn.Parameter(torch.zeros(1, c, 1, 1))

    def forward(self, x):
        emb = self.alpha * torch.sqrt(x.square().sum((2, 3), keepdim=True) + self.eps)
        scale = self.gamma / torch.sqrt(emb.square().mean(1, keepdim=True) + self.eps)
        return x * (1 + torch.tanh(emb * scale + self.beta))


def _gct_conv(cin: int, cout: int, k: int, stride: int = 1) -> nn.Sequential:
    return nn.Sequential(_Gct(cin), nn.Conv2d(cin, cout, k, stride, k // 2, bias=False))


class _Stem(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv1 = _gct_conv(3, 64, 7, 2)
        self.bn1 = nn.BatchNorm2d(64)

    def forward(self, x):
        return F.max_pool2d(F.relu(self.bn1(self.conv1(x))), 3, 2, 1)


class _Bottleneck(nn.Module):
    """maskrcnn-benchmark's bottleneck with ``stride_in_1x1=True``, as the authors' file has it;
    a shortcut conv wherever the channels change."""

    def __init__(self, cin: int, width: int, cout: int, stride: int) -> None:
        super().__init__()
        self.downsample = None
        if cin != cout:
            self.downsample = nn.Sequential(
                _Gct(cin), nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout)
            )
        self.conv1, self.bn1 = _gct_conv(cin, width, 1, stride), nn.BatchNorm2d(width)
        self.conv2, self.bn2 = _gct_conv(width, width, 3), nn.BatchNorm2d(width)
        self.conv3, self.bn3 = _gct_conv(width, cout, 1), nn.BatchNorm2d(cout)

    def forward(self, x):
        out = F.relu(self.bn1(self.conv1(x)))
        out = F.relu(self.bn2(self.conv2(out)))
        out = self.bn3(self.conv3(out))
        short = x if self.downsample is None else self.downsample(x)
        return F.relu(out + short)


class _RefGctResNet50(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.stem = _Stem()
        cin = 64
        for i, n in enumerate((3, 4, 6, 3)):
            width = 64 * 2**i
            blocks = [
                _Bottleneck(cin if j == 0 else width * 4, width, width * 4, 2 if i and not j else 1)
                for j in range(n)
            ]
            cin = width * 4
            setattr(self, f"layer{i + 1}", nn.Sequential(*blocks))
        self.fc = nn.Linear(2048, 1000)

    def forward(self, x):
        x = self.stem(x)
        for i in range(1, 5):
            x = getattr(self, f"layer{i}")(x)
        return self.fc(torch.flatten(F.adaptive_avg_pool2d(x, 1), 1))


@torch.no_grad()
def _authors_file(path: Path, seed: int = 3) -> tuple[nn.Module, Path]:
    """The reference with random weights (every GCT's alpha, gamma and beta of order 1, so that
    no gate is the identity), saved as the authors' ``main.py`` saves a DDP model."""
    ref = randomize(_RefGctResNet50(), seed, norms_only=True)
    gen = torch.Generator().manual_seed(seed)
    for m in ref.modules():
        if isinstance(m, _Gct):
            m.alpha.copy_(torch.rand(m.alpha.shape, generator=gen) + 0.5)
            m.gamma.copy_(torch.randn(m.gamma.shape, generator=gen))
            m.beta.copy_(torch.randn(m.beta.shape, generator=gen) * 0.5)
    state = {f"module.{k}": v for k, v in ref.state_dict().items()}
    torch.save({"epoch": 100, "arch": "resnet50", "state_dict": state, "best_acc1": 77.2}, path)
    return ref.double().eval(), path


def test_authors_gct_resnet50_converts_to_equal_outputs(tmp_path: Path):
    ref, path = _authors_file(tmp_path / "gct_resnet50.pth.tar")
    ours = load_pretrained(
        visattn.create_model("gct_resnet50_official"), path, source="gct_official"
    )
    assert_same_outputs(ours, ref, X)
    with visattn.capture_attention(ours) as maps, torch.no_grad():
        ours(X)
    assert len(maps) == 53  # the stem conv, 3 convs in each of 16 blocks, 4 downsample convs
    assert all((g - 1).abs().max() > 0.05 for g in maps.values())  # no gate left at 1


def test_authors_gct_tag_loads_through_timm(tmp_path: Path):
    ref, path = _authors_file(tmp_path / "gct_resnet50.pth.tar")
    ours = timm.create_model(
        "visattn_gct_resnet50_official.in1k",
        pretrained=True,
        pretrained_cfg_overlay={"file": str(path)},
    )
    assert_same_outputs(ours, ref, X)


def test_the_named_model_places_gct_on_every_conv_the_authors_do():
    """A GCT on the input of exactly the convs that have one in the authors' code; their stride
    on the first 1x1 conv; the official parameter count."""
    model = visattn.create_model("gct_resnet50_official")
    convs = {p for p, m in model.named_modules() if isinstance(m, nn.Conv2d)}
    assert set(model.attention_paths) == {f"{p}.attn_before" for p in convs}
    blocks = [f"layer{i + 1}.{j}" for i, n in enumerate((3, 4, 6, 3)) for j in range(n)]
    authors = {"conv1", *(f"{b}.conv{k}" for b in blocks for k in (1, 2, 3))}
    authors |= {f"layer{i}.0.downsample.0" for i in (1, 2, 3, 4)}
    assert convs == authors
    assert model.layer2[0].conv1.stride == (2, 2) and model.layer2[0].conv2.stride == (1, 1)
    assert sum(p.numel() for p in model.parameters()) == 25_624_625
    assert all(model.get_submodule(p).official for p in model.attention_paths)


def test_a_gct_file_is_refused_by_another_gct_network(tmp_path: Path):
    """visattn's two-slot gct_resnet50 (torchvision's strides), the same hooks with torchvision's
    strides or with the paper's normalisation: each named, nothing loaded."""
    _, path = _authors_file(tmp_path / "gct.pth.tar")
    with pytest.raises(ValueError, match=r"strides its 3x3 .*build gct_resnet50_official"):
        load_pretrained(visattn.create_model("gct_resnet50"), path, source="gct_official")
    hooked = {"name": "gct", "before": "Conv2d", "args": {"norm": "official"}}
    tv_strides = visattn.create_model("resnet50", attention=hooked)
    with pytest.raises(ValueError, match=r"strides its 3x3"):
        load_pretrained(tv_strides, path, source="gct_official")
    paper = visattn.create_model(
        "resnet50", attention={"name": "gct", "before": "Conv2d"}, stride_in_1x1=True
    )
    before = {k: v.clone() for k, v in paper.state_dict().items()}
    with pytest.raises(ValueError, match=r"channel mean; .* at conv1\.attn_before, layer1\.0"):
        load_pretrained(paper, path, source="gct_official")
    assert all(torch.equal(before[k], v) for k, v in paper.state_dict().items())
    official = {"norm": "official"}
    slots = visattn.create_model(
        "resnet50",
        attention=[{"name": "gct", "position": pos, "args": official} for pos in ("pre", "inner")],
        stride_in_1x1=True,
    )
    with pytest.raises(ValueError, match=r"missing key\(s\): layer1\.0\.attn_pre\.alpha"):
        load_pretrained(slots, path, source="gct_official")
