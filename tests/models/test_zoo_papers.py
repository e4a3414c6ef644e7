"""Named models from attention papers (issue 10, section 4): each follows its authors' released
code, has the parameter count of the paper (or timm, or the official definition where the paper
gives none we could confirm), runs at a small input size, and is listed by visattn and timm."""

from __future__ import annotations

import pytest
import timm
import torch

import visattn
from visattn.models import get_model_spec
from visattn.models.zoo import bot50_placements, fca_placements, ge_placements
from visattn.profile import count_params

RESNET50 = 25_557_032  # torchvision's resnet50
# (blocks, width, output channels) of ResNet-50's four stages
STAGES = ((3, 64, 256), (4, 128, 512), (6, 256, 1024), (3, 512, 2048))
FEATURE_SIDES_224 = (56, 28, 14, 7)

PAPER_MODELS = [
    "ge_resnet50",
    "srm_resnet50",
    "fca_resnet50",
    "simam_resnet50",
    "triplet_resnet50",
    "gct_resnet50",
    "botnet50",
    "lambda_resnet50",
    "bat_resnet50",
    "sk_resnet18",
    "sk_resnet34",
]


def _per_block(f) -> int:
    """Sum of ``f(width, out_channels, side at 224)`` over ResNet-50's 16 Bottlenecks."""
    return sum(n * f(w, c, s) for (n, w, c), s in zip(STAGES, FEATURE_SIDES_224, strict=True))


def _block_inputs() -> list[int]:
    """Input channels of each of ResNet-50's 16 Bottlenecks."""
    ins, prev = [], 64
    for n, _, c in STAGES:
        ins += [prev] + [c] * (n - 1)
        prev = c
    return ins


def _params(name: str) -> int:
    return count_params(visattn.create_model(name))


# ----------------------------------------------------------------------------- parameter counts


@pytest.mark.parametrize(
    ("name", "published", "tol"),
    [
        # Lee et al., ICCV 2019, ImageNet table: 25.62M
        ("srm_resnet50", 25.62e6, 0.0002),
        # Qin et al., ICCV 2021, ImageNet table: 28.07M
        ("fca_resnet50", 28.07e6, 0.0002),
        # Yang et al., ICML 2021, ImageNet table: 25.56M
        ("simam_resnet50", 25.56e6, 0.0002),
        # Misra et al., WACV 2021, ImageNet table: 25.56M
        ("triplet_resnet50", 25.56e6, 0.0002),
    ],
)
def test_parameter_count_matches_the_paper_to_its_rounding(name, published, tol):
    """Papers print millions with two decimals: the tolerance is that rounding (0.005M)."""
    n = _params(name)
    assert abs(n - published) / published <= tol, f"{name}: {n:,} vs paper {published:,.0f}"


def test_srm_fca_simam_triplet_parameter_counts_have_their_closed_forms():
    """SRM 4C per block (w: 2C, BN: 2C); FCA SE's 2 C C/16 without FC biases; SimAM none."""
    assert _params("srm_resnet50") == RESNET50 + _per_block(lambda w, c, s: 4 * c)
    assert _params("fca_resnet50") == RESNET50 + _per_block(lambda w, c, s: 2 * c * (c // 16))
    assert _params("simam_resnet50") == RESNET50
    # three branches, each a 7x7 conv 2 -> 1 (no bias) and a one-channel BN
    assert _params("triplet_resnet50") == RESNET50 + 16 * 3 * (2 * 49 + 2)


def test_ge_resnet50_has_the_official_ge_theta_plus_prototxt_count():
    """RN50-GEPP.prototxt: per block a depthwise conv with a whole-map kernel (no bias), its BN,
    and the excite MLP C -> C/16 -> C with biases."""

    def ge_plus(w: int, c: int, s: int) -> int:
        r = c // 16
        return s * s * c + 2 * c + (c * r + r) + (r * c + c)

    assert _params("ge_resnet50") == RESNET50 + _per_block(ge_plus) == 33_637_592


def _gct_before_every_conv(model: torch.nn.Module) -> torch.nn.Module:
    """The official GCT-ResNet-50 layout, by hand: a GCT on the input of every conv."""
    for name, child in list(model.named_children()):
        if isinstance(child, torch.nn.Conv2d):
            gct = visattn.create_block("gct", child.in_channels)
            setattr(model, name, torch.nn.Sequential(gct, child))
        else:
            _gct_before_every_conv(child)
    return model


def test_gct_resnet50_counts_the_two_slots_and_documents_the_official_difference():
    """GCT (3C parameters) before conv1 (``pre``) and before conv3 (``inner``) of every block;
    the official GCT-ResNet-50 puts one before every conv, which its meta records: a GCT before
    each conv2 (3 x width per block), before the stem conv (3 x 3) and before the four
    downsample convs (3 x (64 + 256 + 512 + 1024))."""
    widths = [w for n, w, _ in STAGES for _ in range(n)]
    expected = RESNET50 + 3 * sum(_block_inputs()) + 3 * sum(widths)
    assert _params("gct_resnet50") == expected == 25_607_720
    official = count_params(_gct_before_every_conv(visattn.create_model("resnet50")))
    extra = 3 * sum(widths) + 3 * 3 + 3 * (64 + 256 + 512 + 1024)
    assert official == expected + extra == get_model_spec("gct_resnet50").meta["official_params"]


@pytest.mark.parametrize(
    ("name", "timm_name"), [("sk_resnet18", "skresnet18"), ("sk_resnet34", "skresnet34")]
)
def test_sk_resnets_have_exactly_timms_parameter_count(name, timm_name):
    assert _params(name) == count_params(timm.create_model(timm_name))


def test_sk_resnets_replace_each_first_conv_and_drop_its_norm_like_timm():
    model = visattn.create_model("sk_resnet18")
    assert model.attention_paths == [f"layer{s}.{j}.conv1" for s in (1, 2, 3, 4) for j in (0, 1)]
    assert all(
        isinstance(b.bn1, torch.nn.Identity)
        for s in (1, 2, 3, 4)
        for b in getattr(model, f"layer{s}")
    )
    # the generic placement keeps bn1: 2 parameters per channel of each replaced conv more
    generic = visattn.create_model(
        "resnet18",
        attention={
            "name": "sk",
            "position": "conv",
            "args": {"reduction": 8, "min_rd_channels": 16, "split_input": True},
        },
    )
    assert count_params(generic) - _params("sk_resnet18") == 2 * 2 * (64 + 128 + 256 + 512)


def _mhsa(c: int, feat: int) -> int:
    """BoTNet MHSA, C -> C, 4 heads of depth C/4: ``C (2 h d + C) + (2 (2 H_f - 1)) d``."""
    d = c // 4
    return c * (2 * 4 * d + c) + 2 * (2 * feat - 1) * d


def _lambda(w: int) -> int:
    """Lambda layer w -> w, |h| = 4, |k| = 16, scope 23: ``C d + 2 |h| |k| + 2 C/|h| + |k| r^2``."""
    d = 16 * 5 + w // 4
    return w * d + 2 * 4 * 16 + 2 * w // 4 + 16 * 23 * 23


def test_botnet50_and_lambda_resnet50_match_their_closed_forms_and_papers():
    """BoT50: 20.8M (Srinivas et al., CVPR 2021); LambdaResNet-50: 15.0M (Bello, ICLR 2021,
    Table 3). Both papers print three digits. BoT50 measures 20.85M: the published figure if
    the paper truncates (0.05M over if it rounds), so the tolerance is 0.06M."""
    bot = RESNET50 - 3 * 512 * 512 * 9 + _mhsa(512, 14) + 2 * _mhsa(512, 7)
    assert _params("botnet50") == bot == 20_852_008
    assert abs(bot - 20.8e6) < 0.06e6
    lam = RESNET50 + _per_block(lambda w, c, s: _lambda(w) - w * w * 9)
    assert _params("lambda_resnet50") == lam
    assert abs(lam - 15.0e6) < 0.005e6  # rounding of 15.0M


# ----------------------------------------------------------------------------- provenance


def _blocks(model) -> list[torch.nn.Module]:
    return [model.get_submodule(p) for p in model.attention_paths]


def test_models_place_the_official_configuration():
    srm = visattn.create_model("srm_resnet50")
    assert len(srm.attention_paths) == 16
    assert all(p.endswith("attn_standard") for p in srm.attention_paths)
    assert all(b.unbiased for b in _blocks(srm))

    simam = visattn.create_model("simam_resnet50")
    assert all(p.endswith("attn_prenorm") for p in simam.attention_paths)
    assert {(b.e_lambda, b.unbiased) for b in _blocks(simam)} == {(0.1, True)}

    gct = visattn.create_model("gct_resnet50")
    assert sorted({p.rsplit(".", 1)[1] for p in gct.attention_paths}) == [
        "attn_inner",
        "attn_pre",
    ]
    assert len(gct.attention_paths) == 32

    fca = visattn.create_model("fca_resnet50")
    first = [fca.get_submodule(f"layer{i}.0.attn_standard") for i in (1, 2, 3, 4)]
    assert [tuple(b.dct_size) for b in first] == [(s, s) for s in FEATURE_SIDES_224]

    ge = visattn.create_model("ge_resnet50")
    first = [ge.get_submodule(f"layer{i}.0.attn_standard") for i in (1, 2, 3, 4)]
    assert [b.feat_size for b in first] == [(s, s) for s in FEATURE_SIDES_224]
    assert {(b.variant, b.extent) for b in first} == {("plus", 0)}


def test_botnet50_places_mhsa_in_layer4_only_the_first_strided_by_a_pool():
    model = visattn.create_model("botnet50")
    assert model.attention_paths == [f"layer4.{j}.conv2" for j in (0, 1, 2)]
    assert [b.stride for b in (model.layer4[j].conv2 for j in (0, 1, 2))] == [2, 1, 1]
    assert [p["args"]["feat_size"] for p in bot50_placements(14)] == [14, 7]
    with torch.no_grad():
        assert model.eval().forward_features(torch.randn(1, 3, 64, 64)).shape == (1, 2048, 2, 2)


def test_lambda_resnet50_replaces_every_3x3_conv():
    model = visattn.create_model("lambda_resnet50")
    assert len(model.attention_paths) == 16
    assert all(p.endswith(".conv2") for p in model.attention_paths)


def test_placement_helpers_build_other_sizes_and_the_papers_form():
    assert [p["args"]["feat_size"] for p in ge_placements(64)] == [(16, 16), (8, 8), (4, 4), (2, 2)]
    assert [p["args"]["feat_size"][0] for p in ge_placements(224)] == list(FEATURE_SIDES_224)
    assert fca_placements(None) == ({"name": "fca"},)
    with pytest.raises(ValueError, match="input_size"):
        ge_placements(16)


# ----------------------------------------------------------------------------- forward passes


@pytest.mark.parametrize("name", [n for n in PAPER_MODELS if n != "ge_resnet50"])
def test_forward_at_64x64(name):
    model = visattn.create_model(name, num_classes=5).eval()
    with torch.no_grad():
        assert model(torch.randn(2, 3, 64, 64)).shape == (2, 5)


def test_ge_theta_plus_runs_at_64x64_when_built_for_it_and_ge_resnet50_refuses_it():
    model = visattn.create_model("resnet50", num_classes=5, attention=ge_placements(64)).eval()
    assert model.layer1[0].attn_standard.gather[0].weight.shape == (256, 1, 16, 16)
    with torch.no_grad():
        assert model(torch.randn(2, 3, 64, 64)).shape == (2, 5)
        with pytest.raises(ValueError, match="block 'ge': built for 56x56"):
            visattn.create_model("ge_resnet50", num_classes=5).eval()(torch.randn(1, 3, 64, 64))


@pytest.mark.parametrize("name", PAPER_MODELS)
def test_forward_at_224x224(name):
    model = visattn.create_model(name).eval()
    with torch.no_grad():
        assert model(torch.randn(1, 3, 224, 224)).shape == (1, 1000)


# ----------------------------------------------------------------------------- listing


def test_paper_models_are_listed_by_visattn_and_timm():
    listed = set(visattn.list_models())
    timm_names = set(timm.list_models("visattn_*"))
    for name in PAPER_MODELS:
        assert name in listed
        assert f"visattn_{name}" in timm_names
