"""Released weights: pretrained tags and converters, proven offline.

* timm's tags: timm's own network with random weights, saved in timm's layout, loaded through
  the visattn tag with a local file, gives timm's outputs.
* the authors' layouts: a small reference network per layout, written here from reading the
  authors' released model code (their parameter names, nesting and forward), saved with random
  weights as they save it, converted and loaded: outputs equal.
* failures: another architecture, a truncated file, a wrong checksum, an unknown source.
"""

from __future__ import annotations

import math
import re
from pathlib import Path

import pytest
import timm
import torch
import torch.nn as nn
import torch.nn.functional as F
from helpers.paths import REPO
from helpers.weights import assert_same_outputs, randomize

import visattn
from visattn.models.pretrained import (
    check_sha256,
    get_pretrained,
    list_converters,
    list_pretrained,
    load_pretrained,
    read_tag_table,
)
from visattn.models.zoo import fca_placements

X = torch.randn(2, 3, 64, 64, generator=torch.Generator().manual_seed(0), dtype=torch.float64)


#: FcaNet's files hold their DCT filters in float32, visattn computes them in float64: outputs
#: agree to float32's rounding of the filters (measured: 4e-9 absolute at most)
TOLERANCE = {"fca_official": 1e-7}


def _save(state: dict, path: Path, *, nest: str | None = None, prefix: str = "") -> Path:
    state = {prefix + k: v for k, v in state.items()}
    torch.save({nest: state, "epoch": 100} if nest else state, path)
    return path


# --------------------------------------------------------------------------- timm's tags


@pytest.mark.parametrize(
    ("tag", "timm_name"),
    [
        ("se_resnet50.ra2_in1k", "seresnet50"),
        ("sk_resnet18.ra_in1k", "skresnet18"),
        ("legacy_se_resnet50.in1k", "legacy_seresnet50"),
    ],
)
def test_timm_tag_loads_timm_layout_and_equals_timm(tmp_path: Path, tag: str, timm_name: str):
    ref = randomize(timm.create_model(timm_name), 1, norms_only=True)
    path = _save(ref.state_dict(), tmp_path / "w.pth")
    ours = timm.create_model(
        f"visattn_{tag}", pretrained=True, pretrained_cfg_overlay={"file": str(path)}
    )
    assert_same_outputs(ours, ref, X)


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


LAYOUTS = {
    18: (2, 2, 2, 2),
    34: (3, 4, 6, 3),
    50: (3, 4, 6, 3),
    101: (3, 4, 23, 3),
    152: (3, 8, 36, 3),
}


class _RefBlock(nn.Module):
    """torchvision's BasicBlock (depth < 50) or Bottleneck as the authors' repos write it, with
    an attention module ``attn_name`` after the last BN (CBAM, ECA, triplet, FcaNet) or, for
    ``attn_name="conv2"``, wrapped with the last 3x3 as ``nn.Sequential(conv2, attn)`` before
    bn2 (SimAM's ``networks/imagenet/resnet.py``); ``None``: no attention in the block."""

    def __init__(self, cin: int, planes: int, stride: int, bottleneck: bool, attn_name, make):
        super().__init__()
        widths = (
            [(cin, planes, 1, 1), (planes, planes, 3, stride), (planes, planes * 4, 1, 1)]
            if bottleneck
            else [(cin, planes, 3, stride), (planes, planes, 3, 1)]
        )
        for i, (a, b, k, st) in enumerate(widths, 1):
            setattr(self, f"conv{i}", nn.Conv2d(a, b, k, st, k // 2, bias=False))
            setattr(self, f"bn{i}", nn.BatchNorm2d(b))
        self.n, cout = len(widths), widths[-1][1]
        self.attn_name = attn_name
        if attn_name == "conv2":
            self.conv2 = nn.Sequential(self.conv2, make(planes))
        elif attn_name is not None:
            setattr(self, attn_name, make(cout))
        self.downsample = None
        if stride != 1 or cin != cout:
            self.downsample = nn.Sequential(
                nn.Conv2d(cin, cout, 1, stride, bias=False), nn.BatchNorm2d(cout)
            )

    def forward(self, x):
        out = x
        for i in range(1, self.n + 1):
            out = getattr(self, f"bn{i}")(getattr(self, f"conv{i}")(out))
            out = F.relu(out) if i < self.n else out
        if self.attn_name not in (None, "conv2"):
            out = getattr(self, self.attn_name)(out)
        short = x if self.downsample is None else self.downsample(x)
        return F.relu(out + short)


def _stage_maker(make_attn, stage: int):
    def make(channels: int) -> nn.Module:
        return make_attn(channels, stage)

    return make


class _RefResNet(nn.Module):
    """An ImageNet ResNet of ``depth`` with ``make_attn(channels, stage)`` in every block under
    ``attn_name`` (see :class:`_RefBlock`), or ``None`` and ``make_stage(channels)`` as
    ``bam1``..``bam3`` after layer1..layer3 (BAM's ``MODELS/model_resnet.py``)."""

    def __init__(self, attn_name, make_attn, depth: int = 50, make_stage=None) -> None:
        super().__init__()
        bottleneck = depth >= 50
        self.conv1 = nn.Conv2d(3, 64, 7, 2, 3, bias=False)
        self.bn1 = nn.BatchNorm2d(64)
        cin = 64
        for i, (planes, n) in enumerate(zip((64, 128, 256, 512), LAYOUTS[depth])):
            blocks = []
            for j in range(n):
                stride = 2 if (i > 0 and j == 0) else 1
                make = _stage_maker(make_attn, i) if make_attn else None
                blocks.append(_RefBlock(cin, planes, stride, bottleneck, attn_name, make))
                cin = planes * (4 if bottleneck else 1)
            setattr(self, f"layer{i + 1}", nn.Sequential(*blocks))
            if make_stage is not None and i < 3:
                setattr(self, f"bam{i + 1}", make_stage(cin))
        self.fc = nn.Linear(cin, 1000)

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.bn1(self.conv1(x))), 3, 2, 1)
        for i in range(1, 5):
            x = getattr(self, f"layer{i}")(x)
            x = getattr(self, f"bam{i}", nn.Identity())(x)
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


class _RefSimAM(nn.Module):  # parameter-free: 3-D weights from each channel's energy
    def __init__(self, c: int, stage: int, lam: float = 0.1) -> None:
        super().__init__()
        self.lam = lam

    def forward(self, x):
        d = (x - x.mean((2, 3), keepdim=True)) ** 2
        var = d.sum((2, 3), keepdim=True) / (x.shape[2] * x.shape[3] - 1)
        return x * torch.sigmoid(d / (4 * (var + self.lam)) + 0.5)


# FcaNet's frequencies "top16" on the 7x7 grid, as the authors list them (u along H, v along W)
_TOP16_U = (0, 0, 6, 0, 0, 1, 1, 4, 5, 1, 3, 0, 0, 0, 3, 2)
_TOP16_V = (0, 1, 0, 5, 2, 0, 2, 0, 0, 6, 0, 4, 6, 3, 5, 2)


def _dct_filters(c: int, size: int) -> torch.Tensor:
    """The authors' fixed filters: channel part k holds the orthonormal 2-D DCT-II basis of
    frequency (u_k, v_k) scaled to ``size`` points (``u * size // 7``)."""
    pos = torch.arange(size, dtype=torch.float64) + 0.5

    def basis(f: int) -> torch.Tensor:
        return torch.cos(math.pi * f * pos / size) * math.sqrt((1 if f == 0 else 2) / size)

    part, out = c // 16, torch.zeros(c, size, size, dtype=torch.float64)
    for k, (u, v) in enumerate(zip(_TOP16_U, _TOP16_V)):
        f_u, f_v = u * (size // 7), v * (size // 7)
        out[k * part : (k + 1) * part] = basis(f_u)[:, None] * basis(f_v)[None, :]
    return out.float()


class _RefFca(nn.Module):
    SIZES = (56, 28, 14, 7)  # per stage, fixed whatever the input size

    class _Dct(nn.Module):
        def __init__(self, c: int, size: int) -> None:
            super().__init__()
            self.register_buffer("weight", _dct_filters(c, size))  # saved in the file

    def __init__(self, c: int, stage: int) -> None:
        super().__init__()
        self.size = self.SIZES[stage]
        self.dct_layer = self._Dct(c, self.size)
        self.fc = nn.Sequential(
            nn.Linear(c, c // 16, bias=False), nn.ReLU(), nn.Linear(c // 16, c, bias=False)
        )

    def forward(self, x):
        pooled = F.adaptive_avg_pool2d(x, self.size) if x.shape[-1] != self.size else x
        y = (pooled * self.dct_layer.weight.to(x.dtype)).sum((2, 3))
        return x * torch.sigmoid(self.fc(y))[:, :, None, None]


class _RefBAM(nn.Module):
    """BAM as the authors' ``MODELS/bam.py`` builds it: ``(1 + sigmoid(M_c * M_s)) * x`` with a
    Linear-BN1d-ReLU-Linear channel gate and a biased 1x1 - two dilated 3x3 (BN + ReLU after
    each) - 1x1 spatial gate, no BN on either output."""

    def __init__(self, c: int) -> None:
        super().__init__()
        r = c // 16
        self.channel_att = nn.Module()
        self.channel_att.gate_c = nn.Sequential()
        gate_c = self.channel_att.gate_c
        gate_c.add_module("flatten", nn.Flatten())
        gate_c.add_module("gate_c_fc_0", nn.Linear(c, r))
        gate_c.add_module("gate_c_bn_1", nn.BatchNorm1d(r))
        gate_c.add_module("gate_c_relu_1", nn.ReLU())
        gate_c.add_module("gate_c_fc_final", nn.Linear(r, c))
        self.spatial_att = nn.Module()
        self.spatial_att.gate_s = nn.Sequential()
        gate_s = self.spatial_att.gate_s
        gate_s.add_module("gate_s_conv_reduce0", nn.Conv2d(c, r, 1))
        gate_s.add_module("gate_s_bn_reduce0", nn.BatchNorm2d(r))
        gate_s.add_module("gate_s_relu_reduce0", nn.ReLU())
        for i in range(2):
            gate_s.add_module(f"gate_s_conv_di_{i}", nn.Conv2d(r, r, 3, padding=4, dilation=4))
            gate_s.add_module(f"gate_s_bn_di_{i}", nn.BatchNorm2d(r))
            gate_s.add_module(f"gate_s_relu_di_{i}", nn.ReLU())
        gate_s.add_module("gate_s_conv_final", nn.Conv2d(r, 1, 1))

    def forward(self, x):
        m_c = self.channel_att.gate_c(x.mean((2, 3)))[:, :, None, None]
        m_s = self.spatial_att.gate_s(x)
        return (1 + torch.sigmoid(m_c * m_s)) * x


_DP_NESTED = {"nest": "state_dict", "prefix": "module."}  # DataParallel, under 'state_dict'
AUTHORS = {
    # source: (model name, reference attention, its attribute name, how they save the file,
    # ResNet depth, stage attention)
    "cbam_official": ("cbam_resnet50", _RefCBAM, "cbam", _DP_NESTED, 50, None),
    "eca_official": ("eca_resnet50", _RefECA, "eca", _DP_NESTED, 50, None),
    "triplet_official": (
        "triplet_resnet50",
        _RefTriplet,
        "triplet_attention",
        {"prefix": "module."},
        50,
        None,
    ),
    "simam_official": ("simam_resnet18", _RefSimAM, "conv2", _DP_NESTED, 18, None),
    "fca_official": ("fca_resnet34", _RefFca, "att", {}, 34, None),  # torch.hub: plain keys
    "bam_official": ("bam_resnet50_official", None, None, _DP_NESTED, 50, _RefBAM),
}


def _authors_reference(source: str) -> nn.Module:
    _, attn, attr, _, depth, stage = AUTHORS[source]
    return randomize(_RefResNet(attr, attn, depth, stage), 2, norms_only=True)  # no zeroed norms


@pytest.mark.parametrize("source", sorted(AUTHORS))
def test_authors_layout_converts_to_equal_outputs(tmp_path: Path, source: str):
    name, *_, saving, _, _ = AUTHORS[source]
    ref = _authors_reference(source)
    path = _save(ref.state_dict(), tmp_path / "authors.pth", **saving)
    ours = load_pretrained(visattn.create_model(name), path, source=source)
    assert_same_outputs(ours, ref, X, TOLERANCE.get(source, 1e-10))


@pytest.mark.parametrize("source", sorted(AUTHORS))
def test_authors_tag_loads_through_timm(tmp_path: Path, source: str):
    name, *_, saving, _, _ = AUTHORS[source]
    (tag,) = [t for t in list_pretrained(f"{name}.*") if t.source == source]
    ref = _authors_reference(source)
    path = _save(ref.state_dict(), tmp_path / "authors.pth", **saving)
    ours = timm.create_model(
        f"visattn_{tag.name}", pretrained=True, pretrained_cfg_overlay={"file": str(path)}
    )
    assert_same_outputs(ours, ref, X, TOLERANCE.get(source, 1e-10))


@pytest.mark.parametrize(
    ("source", "depth"),
    [
        ("simam_official", 50),
        ("simam_official", 34),
        ("simam_official", 101),
        ("fca_official", 50),
        ("fca_official", 101),
        ("fca_official", 152),
    ],
)
def test_authors_layout_of_other_depths(tmp_path: Path, source: str, depth: int):
    """SimAM wraps a Bottleneck's 3x3 as it wraps a BasicBlock's second conv; FcaNet's filters
    follow the stage, not the block type."""
    name, attn, attr, saving, _, _ = AUTHORS[source]
    ref = randomize(_RefResNet(attr, attn, depth), depth, norms_only=True)
    path = _save(ref.state_dict(), tmp_path / "authors.pth", **saving)
    model_name = name.rstrip("0123456789") + str(depth)
    ours = load_pretrained(visattn.create_model(model_name), path, source=source)
    assert_same_outputs(ours, ref, X, TOLERANCE.get(source, 1e-10))


def test_fca_filters_of_other_frequencies_are_named(tmp_path: Path):
    ref = _authors_reference("fca_official")
    path = _save(ref.state_dict(), tmp_path / "fca.pth")
    low = {"name": "fca", "args": {"freq_sel": "low16", "dct_size": 56}, "stages": [1]}
    other = visattn.create_model("resnet34", attention=[low, *fca_placements()[1:]])
    with pytest.raises(ValueError, match=r"DCT filters differ .*layer1\.0\.att\.dct_layer"):
        load_pretrained(other, path, source="fca_official")


def test_bam_official_layout_has_the_closed_form_parameter_count():
    for c in (64, 256, 1024):
        r = c // 16
        blk = visattn.create_block("bam", c, layout="official")
        assert sum(p.numel() for p in blk.parameters()) == 3 * c * r + 18 * r * r + 13 * r + c + 1


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
    ref = _RefResNet("eca", _RefECA)
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


def _between(text: str, name: str) -> str:
    return text.split(f"<!-- {name}:start -->\n", 1)[1].split(f"\n<!-- {name}:end -->", 1)[0]


def test_the_weights_page_is_the_tag_table_as_the_command_prints_it():
    from visattn.__main__ import weights_proofs, weights_table

    section = (REPO / "docs" / "guides" / "weights.md").read_text()
    assert _between(section, "weights") == weights_table()
    assert _between(section, "proofs") == weights_proofs()
    rows = re.findall(r"^\| `([\w.]+)` +\| (\w+) +\| ([\d.]+) +\|", section, flags=re.M)
    assert {(n, s, float(t)) for n, s, t in rows} == {
        (t.name, t.source, t.top1) for t in list_pretrained()
    }


def test_the_tag_table_is_data_read_into_typed_tags():
    """tags.toml is the one source of the released tags: every row becomes a PretrainedTag,
    in the file's order (a model's first row is its default tag), and a row with a misspelt
    or missing field is refused naming the row."""
    text = (REPO / "visattn" / "models" / "weights" / "tags.toml").read_text()
    tags = read_tag_table(text)
    assert sorted(t.name for t in tags) == [t.name for t in list_pretrained()]
    assert all(get_pretrained(t.name) == t for t in tags)
    assert isinstance(tags[0].input_size, tuple) and isinstance(tags[0].mean, tuple)
    bad = '[[tag]]\nmodel = "se_resnet50"\ntag = "x"\nsource = "timm"\ntop1 = 1.0\ntop_1 = 2.0\n'
    with pytest.raises(
        ValueError, match=r"tag row 1 \(se_resnet50\.x\): unknown fields \['top_1'\]"
    ):
        read_tag_table(bad)
    with pytest.raises(ValueError, match=r"tag row 1 .*top1"):
        read_tag_table('[[tag]]\nmodel = "se_resnet50"\ntag = "x"\nsource = "timm"\n')
    assert "def _register" not in (REPO / "visattn" / "models" / "pretrained.py").read_text()


def test_python_m_visattn_weights_lists_the_tags(capsys: pytest.CaptureFixture[str]):
    from visattn.__main__ import main

    assert main(["weights", "eca_*"]) == 0
    out = capsys.readouterr().out
    assert out.count("eca_official") == 5 and "se_resnet50" not in out
    assert main(["weights", "--proofs", "se_resnet50.*"]) == 0
    assert "timm's own network with random weights" in capsys.readouterr().out


def test_a_listing_pattern_that_matches_nothing_says_so_with_close_names(capsys):
    """An empty table would look like a zoo without those models: exit 1, close names or
    parts of names as patterns."""
    from visattn.__main__ import main

    assert main(["models", "simma*"]) == 1
    assert capsys.readouterr().err == "error: no model matches 'simma*'; did you mean '*simam*'?\n"
    assert main(["weights", "cbma_*"]) == 1
    assert "did you mean '*cbam*'" in capsys.readouterr().err
    assert main(["models", "resnet20_cifarr"]) == 1
    assert "did you mean 'resnet20_cifar'" in capsys.readouterr().err
    assert main(["weights", "zzz"]) == 1
    assert capsys.readouterr().err == "error: no tag matches 'zzz'\n"


def test_the_readme_counts_the_tags_of_list_pretrained():
    readme = (REPO / "README.md").read_text()
    (count,) = re.findall(r"^\| \*\*Released weights\*\* \| (\d+) tags: ", readme, flags=re.M)
    assert int(count) == len(list_pretrained())
    assert "(docs/guides/weights.md)" in readme.split("**Released weights**", 1)[1].split("\n")[0]


def test_list_pretrained_filters_and_is_public():
    assert visattn.list_pretrained is list_pretrained
    names = [t.name for t in visattn.list_pretrained("se_resnet50.*")]
    assert names == sorted(names) and "se_resnet50.ra2_in1k" in names
    assert all(t.top1 > 50 for t in visattn.list_pretrained())


@pytest.mark.parametrize(
    ("name", "tag", "timm_name"),
    [("se_resnet50", None, "seresnet50"), ("legacy_se_resnet50", "in1k", "legacy_seresnet50")],
)
def test_hubconf_loads_a_tag_offline(tmp_path: Path, name: str, tag: str | None, timm_name: str):
    ref = randomize(timm.create_model(timm_name), 4, norms_only=True)
    path = _save(ref.state_dict(), tmp_path / "w.pth")
    model = torch.hub.load(
        str(REPO), name, source="local", pretrained=True, tag=tag, file=str(path)
    )
    assert model.pretrained_cfg["tag"] == (tag or list_pretrained(f"{name}.*")[0].tag)
    assert_same_outputs(model, ref, X)


def test_hubconf_builds_without_weights_and_names_the_tags(tmp_path: Path):
    model = torch.hub.load(str(REPO), "se_resnet50", source="local", pretrained=False)
    assert model.model_name == "se_resnet50" and model.fc.out_features == 1000
    plain = torch.hub.load(str(REPO), "resnet56_cifar", source="local", num_classes=10)
    assert plain.num_classes == 10
    with pytest.raises(ValueError, match=r"has no tag 'ra9_in1k'; it has .*a1_in1k"):
        torch.hub.load(str(REPO), "se_resnet50", source="local", pretrained=True, tag="ra9_in1k")
    with pytest.raises(ValueError, match="has no released weights"):
        torch.hub.load(str(REPO), "resnet56_cifar", source="local", pretrained=True)


def test_save_for_hf_round_trips_offline(tmp_path: Path):
    model = randomize(visattn.create_model("se_resnet50"), 5, norms_only=True).eval()
    timm.models.save_for_hf(model, tmp_path / "hf")
    again = timm.create_model(f"local-dir:{tmp_path / 'hf'}", pretrained=True)
    assert_same_outputs(again, model, X)
