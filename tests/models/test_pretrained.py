"""Released weights: pretrained tags and converters, proven offline.

* timm's tags: timm's own network with random weights, saved in timm's layout, loaded through
  the visattn tag with a local file, gives timm's outputs.
* the authors' layouts: a small reference network per layout, written here from reading the
  authors' released model code (their parameter names, nesting and forward), saved with random
  weights as they save it, converted and loaded: outputs equal.
* failures: another architecture, a truncated file, a wrong checksum, an unknown source.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import timm
import torch
import torch.nn as nn
import torch.nn.functional as F
from helpers.paths import REPO
from helpers.weights import randomize

import visattn
from visattn.models.pretrained import (
    check_sha256,
    get_pretrained,
    list_converters,
    list_pretrained,
    load_pretrained,
)

X = torch.randn(2, 3, 64, 64, generator=torch.Generator().manual_seed(0), dtype=torch.float64)


def _same_outputs(ours: nn.Module, ref: nn.Module) -> None:
    ours, ref = ours.double().eval(), ref.double().eval()
    with torch.no_grad():
        torch.testing.assert_close(ours(X), ref(X), rtol=1e-10, atol=1e-10)


def _save(state: dict, path: Path, *, nest: str | None = None, prefix: str = "") -> Path:
    state = {prefix + k: v for k, v in state.items()}
    torch.save({nest: state, "epoch": 100} if nest else state, path)
    return path


# --------------------------------------------------------------------------- timm's tags


@pytest.mark.parametrize(
    ("tag", "timm_name"),
    [("se_resnet50.ra2_in1k", "seresnet50"), ("sk_resnet18.ra_in1k", "skresnet18")],
)
def test_timm_tag_loads_timm_layout_and_equals_timm(tmp_path: Path, tag: str, timm_name: str):
    ref = randomize(timm.create_model(timm_name), 1, norms_only=True)
    path = _save(ref.state_dict(), tmp_path / "w.pth")
    ours = timm.create_model(
        f"visattn_{tag}", pretrained=True, pretrained_cfg_overlay={"file": str(path)}
    )
    _same_outputs(ours, ref)


def test_timm_tag_carries_the_eval_transform():
    m = timm.create_model("visattn_se_resnet50.ra2_in1k")
    cfg = timm.data.resolve_data_config({}, model=m)
    assert cfg["interpolation"] == "bicubic" and cfg["crop_pct"] == 0.875
    assert m.pretrained_cfg["hf_hub_id"] == "timm/seresnet50.ra2_in1k"
    assert m.pretrained_cfg["test_input_size"] == (3, 288, 288)
    a3 = timm.create_model("visattn_se_resnet50.a3_in1k").pretrained_cfg
    assert a3["input_size"] == (3, 160, 160) and a3["crop_pct"] == 0.95


def test_every_tag_is_a_timm_name_and_the_downloadable_ones_are_pretrained():
    """timm lists as pretrained what it can download (a hub id or a URL); the authors' files
    behind download pages are tagged names all the same."""
    tagged = set(timm.list_models("visattn_*", include_tags=True))
    assert {f"visattn_{t.name}" for t in list_pretrained()} <= tagged
    downloadable = {f"visattn_{t.name}" for t in list_pretrained() if t.downloadable}
    assert downloadable and downloadable <= set(timm.list_pretrained("visattn_*"))
    assert all(t.source in list_converters() for t in list_pretrained())


def test_sk_resnet34_converter_covers_every_key():
    ref = timm.create_model("skresnet34")
    ours = visattn.create_model("sk_resnet34")
    from visattn.models.pretrained import convert_state_dict

    assert set(convert_state_dict(ref.state_dict(), ours, "timm")) == set(ours.state_dict())


# --------------------------------------------------------------------------- reference nets


class _RefBottleneck(nn.Module):
    """torchvision's Bottleneck as the authors' repos write it, with an attention module
    ``attn_name`` after bn3 (CBAM, ECA, triplet) or wrapped with conv2 (SimAM)."""

    def __init__(self, cin: int, planes: int, stride: int, attn_name: str, make_attn) -> None:
        super().__init__()
        cout = planes * 4
        self.conv1 = nn.Conv2d(cin, planes, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(planes)
        self.conv2 = nn.Conv2d(planes, planes, 3, stride, 1, bias=False)
        self.bn2 = nn.BatchNorm2d(planes)
        self.conv3 = nn.Conv2d(planes, cout, 1, bias=False)
        self.bn3 = nn.BatchNorm2d(cout)
        self.attn_name = attn_name
        setattr(self, attn_name, make_attn(cout))
        self.downsample = None
        if stride != 1 or cin != cout:
            self.downsample = nn.Sequential(
                nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout)
            )

    def forward(self, x):
        out = F.relu(self.bn1(self.conv1(x)))
        out = F.relu(self.bn2(self.conv2(out)))
        out = getattr(self, self.attn_name)(self.bn3(self.conv3(out)))
        short = x if self.downsample is None else self.downsample(x)
        return F.relu(out + short)


def _stage_maker(make_attn, stage: int):
    def make(channels: int) -> nn.Module:
        return make_attn(channels, stage)

    return make


class _RefResNet50(nn.Module):
    def __init__(self, attn_name: str, make_attn) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(3, 64, 7, 2, 3, bias=False)
        self.bn1 = nn.BatchNorm2d(64)
        cin, layers = 64, []
        for i, (planes, n) in enumerate(zip((64, 128, 256, 512), (3, 4, 6, 3))):
            blocks = []
            for j in range(n):
                stride = 2 if (i > 0 and j == 0) else 1
                blocks.append(
                    _RefBottleneck(cin, planes, stride, attn_name, _stage_maker(make_attn, i))
                )
                cin = planes * 4
            layers.append(nn.Sequential(*blocks))
        self.layer1, self.layer2, self.layer3, self.layer4 = layers
        self.fc = nn.Linear(2048, 1000)

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.bn1(self.conv1(x))), 3, 2, 1)
        x = self.layer4(self.layer3(self.layer2(self.layer1(x))))
        return self.fc(torch.flatten(F.adaptive_avg_pool2d(x, 1), 1))


class _BasicConv(nn.Module):  # the authors' conv + BN without activation (no conv bias)
    def __init__(self, cin: int, cout: int, k: int) -> None:
        super().__init__()
        self.conv = nn.Conv2d(cin, cout, k, padding=k // 2, bias=False)
        self.bn = nn.BatchNorm2d(cout, eps=1e-5, momentum=0.01)

    def forward(self, x):
        return self.bn(self.conv(x))


def _max_mean(x: torch.Tensor) -> torch.Tensor:  # the authors' ChannelPool: [max; mean]
    return torch.cat((x.amax(1, keepdim=True), x.mean(1, keepdim=True)), 1)


class _RefSpatialGate(nn.Module):  # the authors' SpatialGate (CBAM's, and each triplet branch)
    def __init__(self) -> None:
        super().__init__()
        self.spatial = _BasicConv(2, 1, 7)

    def forward(self, x):
        return x * torch.sigmoid(self.spatial(_max_mean(x)))


class _RefCBAM(nn.Module):
    class _Channel(nn.Module):
        def __init__(self, c: int) -> None:
            super().__init__()
            self.mlp = nn.Sequential(
                nn.Flatten(), nn.Linear(c, c // 16), nn.ReLU(), nn.Linear(c // 16, c)
            )

        def forward(self, x):
            s = self.mlp(F.adaptive_avg_pool2d(x, 1)) + self.mlp(F.adaptive_max_pool2d(x, 1))
            return x * torch.sigmoid(s)[:, :, None, None]

    def __init__(self, c: int, stage: int) -> None:
        super().__init__()
        self.ChannelGate = self._Channel(c)
        self.SpatialGate = _RefSpatialGate()

    def forward(self, x):
        return self.SpatialGate(self.ChannelGate(x))


class _RefECA(nn.Module):
    KERNELS = (3, 5, 5, 7)  # the released ECA-Net50 (k3557)

    def __init__(self, c: int, stage: int) -> None:
        super().__init__()
        k = self.KERNELS[stage]
        self.conv = nn.Conv1d(1, 1, k, padding=(k - 1) // 2, bias=False)

    def forward(self, x):
        y = F.adaptive_avg_pool2d(x, 1)
        y = self.conv(y.squeeze(-1).transpose(-1, -2)).transpose(-1, -2).unsqueeze(-1)
        return x * torch.sigmoid(y)


class _RefTriplet(nn.Module):
    def __init__(self, c: int, stage: int) -> None:
        super().__init__()
        self.ChannelGateH = _RefSpatialGate()
        self.ChannelGateW = _RefSpatialGate()
        self.SpatialGate = _RefSpatialGate()

    def forward(self, x):
        a = self.ChannelGateH(x.permute(0, 2, 1, 3)).permute(0, 2, 1, 3)
        b = self.ChannelGateW(x.permute(0, 3, 2, 1)).permute(0, 3, 2, 1)
        return (self.SpatialGate(x) + a + b) / 3


_DP_NESTED = {"nest": "state_dict", "prefix": "module."}  # DataParallel, under 'state_dict'
AUTHORS = {
    # source: (model name, reference attention, its attribute name, how they save the file)
    "cbam_official": ("cbam_resnet50", _RefCBAM, "cbam", _DP_NESTED),
    "eca_official": ("eca_resnet50", _RefECA, "eca", _DP_NESTED),
    "triplet_official": (
        "triplet_resnet50",
        _RefTriplet,
        "triplet_attention",
        {"prefix": "module."},
    ),
}


@pytest.mark.parametrize("source", sorted(AUTHORS))
def test_authors_layout_converts_to_equal_outputs(tmp_path: Path, source: str):
    name, attn, attr, saving = AUTHORS[source]
    ref = randomize(_RefResNet50(attr, attn), 2, norms_only=True)  # no zeroed norms
    path = _save(ref.state_dict(), tmp_path / "authors.pth", **saving)
    ours = load_pretrained(visattn.create_model(name), path, source=source)
    _same_outputs(ours, ref)


@pytest.mark.parametrize("source", sorted(AUTHORS))
def test_authors_tag_loads_through_timm(tmp_path: Path, source: str):
    name, attn, attr, saving = AUTHORS[source]
    (tag,) = [t for t in list_pretrained(f"{name}.*") if t.source == source]
    ref = randomize(_RefResNet50(attr, attn), 2, norms_only=True)  # no zeroed norms
    path = _save(ref.state_dict(), tmp_path / "authors.pth", **saving)
    ours = timm.create_model(
        f"visattn_{tag.name}", pretrained=True, pretrained_cfg_overlay={"file": str(path)}
    )
    _same_outputs(ours, ref)


# --------------------------------------------------------------------------- failures


def test_another_architecture_is_refused_naming_keys(tmp_path: Path):
    path = _save(timm.create_model("resnet50").state_dict(), tmp_path / "plain.pth")
    model = visattn.create_model("se_resnet50")
    before = {k: v.clone() for k, v in model.state_dict().items()}
    with pytest.raises(ValueError, match=r"missing key\(s\): layer1\.0\.attn_standard\.fc1"):
        load_pretrained(model, path, source="timm")
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())


def test_unconsumed_checkpoint_tensors_are_named(tmp_path: Path):
    state = timm.create_model("seresnet50").state_dict()
    state["extra.weight"] = torch.zeros(3)
    path = _save(state, tmp_path / "extra.pth")
    with pytest.raises(ValueError, match=r"unexpected key\(s\): extra\.weight"):
        load_pretrained(visattn.create_model("se_resnet50"), path, source="timm")


def test_wrong_kernel_sizes_are_a_shape_mismatch(tmp_path: Path):
    ref = _RefResNet50("eca", _RefECA)
    path = _save(ref.state_dict(), tmp_path / "eca.pth")
    k3 = {"name": "eca", "args": {"kernel_size": 3}}
    uniform = visattn.create_model("resnet50", attention=k3)
    with pytest.raises(ValueError, match=r"shape mismatch.*layer2\.0\.attn_standard\.conv\.weight"):
        load_pretrained(uniform, path, source="eca_official")


def test_truncated_file_gives_a_clear_error(tmp_path: Path):
    path = _save(timm.create_model("seresnet50").state_dict(), tmp_path / "w.pth")
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 3])
    with pytest.raises(ValueError, match=r"is damaged \(truncated or corrupted"):
        load_pretrained(visattn.create_model("se_resnet50"), path, source="timm")
    empty = tmp_path / "empty.pth"
    empty.write_bytes(b"")
    with pytest.raises(ValueError, match="is empty"):
        load_pretrained(visattn.create_model("se_resnet50"), empty, source="timm")


def test_checksum_is_checked(tmp_path: Path):
    path = _save({"a": torch.ones(2)}, tmp_path / "w.pth")
    import hashlib

    digest = hashlib.sha256(path.read_bytes()).hexdigest()
    check_sha256(path, digest[:8])
    check_sha256(path, digest)
    with pytest.raises(ValueError, match="checksum mismatch"):
        check_sha256(path, "deadbeef")
    with pytest.raises(ValueError, match="checksum mismatch"):
        load_pretrained(visattn.create_model("se_resnet50"), path, source="timm", sha256="00ff00ff")


def test_unknown_source_and_tag_name_the_known_ones(tmp_path: Path):
    path = _save({"a": torch.ones(2)}, tmp_path / "w.pth")
    with pytest.raises(ValueError, match="cbam_official"):
        load_pretrained(visattn.create_model("se_resnet50"), path, source="cbam")
    with pytest.raises(KeyError, match=r"se_resnet50\.ra2_in1k"):
        get_pretrained("se_resnet50.ra9_in1k")
    with pytest.raises(ValueError, match="is a directory"):
        load_pretrained(visattn.create_model("se_resnet50"), tmp_path, source="timm")


# --------------------------------------------------------------------------- listing, hubs


def test_the_weights_page_agrees_with_list_pretrained():
    section = (REPO / "docs" / "guides" / "weights.md").read_text()
    rows = re.findall(r"^\| `([\w.]+)` \| (\w+) \| ([\d.]+) \|", section, flags=re.M)
    assert {(n, s, float(t)) for n, s, t in rows} == {
        (t.name, t.source, t.top1) for t in list_pretrained()
    }


def test_list_pretrained_filters_and_is_public():
    assert visattn.list_pretrained is list_pretrained
    names = [t.name for t in visattn.list_pretrained("se_resnet50.*")]
    assert names == sorted(names) and "se_resnet50.ra2_in1k" in names
    assert all(t.top1 > 50 for t in visattn.list_pretrained())


def test_hubconf_loads_a_tag_offline(tmp_path: Path):
    ref = randomize(timm.create_model("seresnet50"), 4, norms_only=True)
    path = _save(ref.state_dict(), tmp_path / "w.pth")
    model = torch.hub.load(
        str(REPO), "se_resnet50", source="local", pretrained=True, file=str(path)
    )
    _same_outputs(model, ref)
    plain = torch.hub.load(str(REPO), "resnet56_cifar", source="local", num_classes=10)
    assert plain.num_classes == 10


def test_save_for_hf_round_trips_offline(tmp_path: Path):
    model = randomize(visattn.create_model("se_resnet50"), 5, norms_only=True).eval()
    timm.models.save_for_hf(model, tmp_path / "hf")
    again = timm.create_model(f"local-dir:{tmp_path / 'hf'}", pretrained=True)
    _same_outputs(again, model)
