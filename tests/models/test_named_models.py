"""The model zoo: every registered model runs, parameter counts and multiply-accumulates match
the papers / torchvision, torchvision weights load, the factory's names, options and errors,
and timm registration."""

from __future__ import annotations

import warnings

import pytest
import timm
import timm.data
import torch
import torchvision
from helpers.tiers import kept_model, tiered

import visattn
from visattn.__main__ import main
from visattn.models import ResNet, get_model_spec
from visattn.profile import count_macs, count_params

REQUIRED = [
    "resnet20_cifar",
    "resnet32_cifar",
    "resnet44_cifar",
    "resnet56_cifar",
    "resnet110_cifar",
    "preresnet164_cifar",
    "resnet18",
    "resnet34",
    "resnet50",
    "resnet101",
    "resnet152",
    "attention56",
    "attention92",
    "attention56_cifar",
    "attention92_cifar",
    "se_resnet20_cifar",
    "se_resnet56_cifar",
    "se_resnet110_cifar",
    "se_resnet50",
    "se_resnet101",
    "cbam_resnet50",
    "bam_resnet50",
    "eca_resnet50",
    "gsop_resnet50",
    "gc_resnet50",
]

# named models whose blocks hold weights shaped by the feature-map size (GE-theta-plus's global
# depthwise gather), so they run at their default input size only
FIXED_INPUT_SIZE = {"ge_resnet50"}


def _is_cifar(name: str) -> bool:
    return get_model_spec(name).dataset == "cifar"


def _slow_at_default_size(name: str) -> bool:
    """Forward and backward at 224x224 take 2-7 s per ImageNet model on 2 CPU cores."""
    return not _is_cifar(name) and name != "resnet18"


# every model also runs forward and backward at an odd size (65x65 or 31x31) in the default run,
# and its default_input_size is checked there; at 224x224 the default run keeps a
# channel-attention ResNet-50, a conv-replacing one, a Residual Attention Network and
# GE-theta-plus, whose gather weights fit 224x224 only (it runs at no other size); the other slow
# ones are heavy
KEPT_AT_DEFAULT_SIZE = {"se_resnet50", "botnet50", "attention56", "ge_resnet50"}


def _run(name: str, size: int | None = None) -> None:
    model = visattn.create_model(name, num_classes=7)
    assert model.default_input_size == ((3, 32, 32) if _is_cifar(name) else (3, 224, 224))
    if size is None:
        size = model.default_input_size[1]
    x = torch.randn(2, 3, size, size)
    out = model(x)
    assert out.shape == (2, 7)
    out.sum().backward()
    assert all(p.grad is not None for p in model.parameters() if p.requires_grad)


def test_list_models_has_the_required_names_sorted_and_filters():
    names = visattn.list_models()
    assert names == sorted(names)
    assert set(REQUIRED) <= set(names)
    assert {f"{b}_resnet56_cifar" for b in visattn.list_blocks()} <= set(names)
    assert visattn.list_models("se_resnet*") == [
        "se_resnet101",
        "se_resnet110_cifar",
        "se_resnet20_cifar",
        "se_resnet50",
        "se_resnet56_cifar",
    ]
    assert all(n.endswith("_cifar") for n in visattn.list_models("*cifar*"))


@pytest.mark.parametrize(
    "name",
    tiered(
        visattn.list_models(),
        keep=lambda n: not _slow_at_default_size(n) or n in KEPT_AT_DEFAULT_SIZE,
    ),
)
def test_forward_backward_at_default_input_size(name):
    _run(name)


@pytest.mark.parametrize("name", tiered(visattn.list_models(), keep=kept_model))
def test_forward_backward_at_an_odd_input_size(name):
    if name in FIXED_INPUT_SIZE:  # built for 224x224: another size is a clear error
        with pytest.raises(ValueError, match=r"built for \d+x\d+"):
            _run(name, 65)
        return
    _run(name, 31 if _is_cifar(name) else 65)


# ----------------------------------------------------------------------------- sizes


@pytest.mark.parametrize("depth", [18, 34, 50, 101, 152])
def test_imagenet_resnets_match_torchvision_parameters_and_names(depth):
    ours = visattn.create_model(f"resnet{depth}")
    theirs = getattr(torchvision.models, f"resnet{depth}")(weights=None)
    assert [(k, v.shape) for k, v in ours.state_dict().items()] == [
        (k, v.shape) for k, v in theirs.state_dict().items()
    ]
    assert count_params(ours) == count_params(theirs)


def test_resnet50_has_exactly_torchvisions_parameter_count():
    assert count_params(visattn.create_model("resnet50")) == 25_557_032


@pytest.mark.parametrize(
    ("name", "paper", "tol"),
    [
        # He et al., CVPR 2016, Table 6 (rounded to 2 digits)
        ("resnet20_cifar", 0.27e6, 0.02),
        ("resnet32_cifar", 0.46e6, 0.02),
        ("resnet44_cifar", 0.66e6, 0.02),
        ("resnet56_cifar", 0.85e6, 0.02),
        ("resnet110_cifar", 1.7e6, 0.02),
        ("preresnet164_cifar", 1.7e6, 0.02),  # He et al., ECCV 2016, Table 3
        ("se_resnet50", 28.09e6, 0.001),  # Hu et al., Table 2
        ("se_resnet101", 49.33e6, 0.001),
        ("cbam_resnet50", 28.09e6, 0.001),  # Woo et al., Table 2
        ("bam_resnet50", 25.92e6, 0.001),  # Park et al., Table 4
        ("attention56", 31.9e6, 0.10),  # Wang et al., Table 4
        ("attention92", 51.3e6, 0.10),
        # no architecture table for CIFAR in the paper: our reconstruction on ResNet-164's widths
        # has 2.26M against the paper's 1.9M (see visattn/models/residual_attention.py)
        ("attention92_cifar", 1.9e6, 0.20),
    ],
)
def test_parameter_counts_match_the_papers(name, paper, tol):
    n = count_params(visattn.create_model(name, num_classes=get_model_spec(name).num_classes))
    assert abs(n - paper) / paper <= tol, f"{name}: {n:,} vs paper {paper:,.0f}"


def test_se_resnet50_adds_one_se_block_with_biases_per_bottleneck():
    extra = 0
    for blocks, c in zip((3, 4, 6, 3), (256, 512, 1024, 2048)):
        h = c // 16
        extra += blocks * (c * h + h + h * c + c)  # two 1x1 convs with bias
    assert count_params(visattn.create_model("se_resnet50")) == 25_557_032 + extra == 28_088_024


def test_cifar_shortcut_b_adds_the_projections():
    a = count_params(visattn.create_model("resnet20_cifar", num_classes=10))
    b = count_params(visattn.create_model("resnet20_cifar", num_classes=10, shortcut="B"))
    assert b - a == (16 * 32 + 2 * 32) + (32 * 64 + 2 * 64)  # 1x1 conv + BN, stages 2 and 3


@pytest.mark.parametrize(("name", "published"), [("resnet50", 4.09e9), ("resnet18", 1.81e9)])
def test_macs_match_torchvisions_published_figures(name, published):
    macs = count_macs(visattn.create_model(name), (1, 3, 224, 224))
    assert abs(macs - published) / published <= 0.02, f"{name}: {macs / 1e9:.3f} G"


# ----------------------------------------------------------------------------- weights


@pytest.fixture(scope="module")
def torchvision_resnet50_file(tmp_path_factory):
    torch.manual_seed(0)
    tv = torchvision.models.resnet50(weights=None)
    path = tmp_path_factory.mktemp("weights") / "resnet50_torchvision.pth"
    torch.save(tv.state_dict(), path)
    return tv.eval(), path


def test_torchvision_weights_load_strictly_and_give_torchvisions_outputs(torchvision_resnet50_file):
    tv, path = torchvision_resnet50_file
    ours = visattn.create_model("resnet50")
    ours.load_state_dict(torch.load(path), strict=True)
    from_file = visattn.create_model("resnet50", checkpoint_path=path)
    assert from_file.checkpoint_report.new_keys == []
    x = torch.randn(2, 3, 64, 64)
    with torch.no_grad():
        expected = tv(x)
        torch.testing.assert_close(ours.eval()(x), expected, rtol=0, atol=0)
        torch.testing.assert_close(from_file.eval()(x), expected, rtol=0, atol=0)


def test_torchvision_weights_load_into_se_resnet50_with_a_report(torchvision_resnet50_file):
    tv, path = torchvision_resnet50_file
    with pytest.warns(UserWarning, match="no weights for 64 attention tensor"):
        model = visattn.create_model("se_resnet50", checkpoint_path=path)
    report = model.checkpoint_report
    expected_new = sorted(k for k in model.state_dict() if ".attn_standard." in k)
    assert sorted(report.new_keys) == expected_new and len(expected_new) == 16 * 4
    assert report.loaded == len(tv.state_dict())
    torch.testing.assert_close(model.layer3[2].conv2.weight, tv.layer3[2].conv2.weight)


def test_timm_pretrained_se_resnet50_from_a_local_torchvision_file(torchvision_resnet50_file):
    """The call detection users write: timm's ``pretrained=True`` with a local file."""
    tv, path = torchvision_resnet50_file
    with pytest.warns(UserWarning, match="attention tensor"):
        m = timm.create_model(
            "visattn_se_resnet50", pretrained=True, pretrained_cfg_overlay={"file": str(path)}
        )
    assert len(m.checkpoint_report.new_keys) == 16 * 4  # two convs with bias per SE block
    torch.testing.assert_close(m.layer4[2].conv3.weight, tv.layer4[2].conv3.weight)
    torch.testing.assert_close(m.fc.weight, tv.fc.weight)


def test_lightning_checkpoint_with_net_prefix_loads(tmp_path):
    src = visattn.create_model("resnet20_cifar", num_classes=10)
    ckpt = {
        "pytorch-lightning_version": "2.6.6",
        "epoch": 3,
        "state_dict": {
            **{f"net.{k}": v for k, v in src.state_dict().items()},
            "criterion.weight": torch.ones(10),
        },
    }
    torch.save(ckpt, tmp_path / "last.ckpt")
    model = visattn.create_model(
        "resnet20_cifar", num_classes=10, checkpoint_path=tmp_path / "last.ckpt"
    )
    assert model.checkpoint_report.ignored_keys == ["criterion.weight"]
    torch.testing.assert_close(model.fc.weight, src.fc.weight)


def test_checkpoint_mismatches_raise(tmp_path, torchvision_resnet50_file):
    _, path = torchvision_resnet50_file
    with pytest.raises(
        ValueError,
        match=r"shape mismatch.*fc.weight: file \(1000, 2048\) vs "
        r"model \(10, 2048\).*num_classes",
    ):
        visattn.create_model("resnet50", num_classes=10, checkpoint_path=path)
    state = torch.load(path)
    del state["layer2.0.bn1.running_mean"]
    torch.save(state, tmp_path / "broken.pth")
    with pytest.raises(ValueError, match=r"1 missing key.*layer2\.0\.bn1\.running_mean"):
        visattn.create_model("resnet50", checkpoint_path=tmp_path / "broken.pth")
    torch.save(visattn.create_model("se_resnet20_cifar").state_dict(), tmp_path / "se.pth")
    with pytest.raises(ValueError, match=r"unexpected key.*layer1.0.attn_standard.fc1"):
        visattn.create_model("resnet20_cifar", checkpoint_path=tmp_path / "se.pth")
    with pytest.raises(FileNotFoundError, match="does not exist"):
        visattn.create_model("resnet20_cifar", checkpoint_path=tmp_path / "nope.pth")


# ----------------------------------------------------------------------------- factory


def test_models_carry_the_attributes_users_rely_on():
    m = visattn.create_model("resnet56_cifar", num_classes=10, in_chans=1)
    assert m.num_classes == 10 and m.default_input_size == (1, 32, 32)
    assert m.conv1.in_channels == 1 and m.attention_paths == []
    assert m.forward_features(torch.randn(2, 1, 32, 32)).shape == (2, 64, 8, 8)
    m.reset_classifier(5)
    assert m(torch.randn(2, 1, 32, 32)).shape == (2, 5)


def test_registered_combination_equals_backbone_plus_placement():
    named = visattn.create_model("se_resnet56_cifar", num_classes=10)
    composed = visattn.create_model(
        "resnet56_cifar", num_classes=10, attention={"name": "se", "args": {"reduction": 16}}
    )
    assert named.attention_paths == composed.attention_paths
    assert count_params(named) == count_params(composed)


def test_block_backbone_names_compose_any_block_with_any_resnet():
    m = visattn.create_model("cbam_resnet18")
    assert m.attention_paths == [
        f"layer{s}.{b}.attn_standard" for s in range(1, 5) for b in range(2)
    ]
    assert type(m.layer1[0].attn_standard) is visattn.block_info("cbam").cls


def test_paper_placements_of_registered_models():
    assert visattn.create_model("bam_resnet50").attention_paths == [
        "layer1.attn_stage",
        "layer2.attn_stage",
        "layer3.attn_stage",
    ]
    assert visattn.create_model("gsop_resnet50").attention_paths == [
        "layer1.2.attn_standard",
        "layer2.3.attn_standard",
        "layer3.5.attn_standard",
        "layer4.2.attn_standard",
    ]


# ----------------------------------------------------------------------------- fidelity


def test_gc_resnet50_follows_the_official_configs_stages_2_to_4():
    """Every official GCNet config has ``stage_with_gcb=(False, True, True, True)``."""
    m = visattn.create_model("gc_resnet50")
    assert {p.split(".")[0] for p in m.attention_paths} == {"layer2", "layer3", "layer4"}
    assert len(m.attention_paths) == 4 + 6 + 3
    assert count_params(m) == 28_078_773


def test_gsop_resnet50_keeps_layer4_at_stride_1_by_default_with_the_old_layout_as_an_option():
    """GSoP-Net1's official code: layer4 stride 1 (14x14 final map at 224x224)."""
    x = torch.randn(1, 3, 64, 64)
    official = visattn.create_model("gsop_resnet50", num_classes=3)
    old = visattn.create_model("gsop_resnet50", num_classes=3, last_stride=2)
    with torch.no_grad():
        assert official.forward_features(x).shape == (1, 2048, 4, 4)
        assert old.forward_features(x).shape == (1, 2048, 2, 2)
    assert official.layer4[0].conv2.stride == (1, 1) and official.layer4[0].downsample[
        0
    ].stride == (
        1,
        1,
    )
    assert count_params(official) == count_params(old)


def test_gsop_resnet50_multiply_accumulates_official_vs_old_layout():
    official = count_macs(visattn.create_model("gsop_resnet50"), (1, 3, 224, 224))
    old = count_macs(visattn.create_model("gsop_resnet50", last_stride=2), (1, 3, 224, 224))
    assert 6.4e9 < official < 6.6e9 and 4.3e9 < old < 4.4e9  # measured 6.51G and 4.35G


def _eca_kernels(model) -> list[int]:
    return [
        model.get_submodule(p).kernel_size
        for p in model.attention_paths
        if p.endswith(".0.attn_standard")
    ]


def test_eca_resnet50_uses_the_released_checkpoints_kernel_sizes():
    """ECA-Net50's released weights have k = 3, 5, 5, 7; the adaptive formula gives 5, 5, 5, 7."""
    from visattn.models import eca_placements

    assert _eca_kernels(visattn.create_model("eca_resnet50")) == [3, 5, 5, 7]
    formula = visattn.create_model("resnet50", attention=eca_placements(None))
    assert _eca_kernels(formula) == [5, 5, 5, 7]
    custom = visattn.create_model("resnet50", attention=eca_placements((3, 3, 5, 5)))
    assert _eca_kernels(custom) == [3, 3, 5, 5]
    assert (
        count_params(visattn.create_model("eca_resnet50"))
        == 25_557_032 + 3 * 3 + 4 * 5 + 6 * 5 + 3 * 7
    )


def test_attention56_matches_the_official_prototxt_with_the_old_head_as_an_option():
    """No bias on the mask head's last 1x1 conv and corner-aligned up-sampling (Caffe
    ``Interp``): 31,810,728 parameters, the official count; the earlier head adds 3 biases."""
    m = visattn.create_model("attention56")
    assert count_params(m) == 31_810_728
    ra = [mod for mod in m.modules() if type(mod).__name__ == "ResidualAttention"]
    assert all(r.align_corners and r.mask_head[-1].bias is None for r in ra)
    old = visattn.create_model("attention56", mask_bias=True, align_corners=False)
    assert count_params(old) == 31_812_520
    ra = [mod for mod in old.modules() if type(mod).__name__ == "ResidualAttention"]
    assert all(not r.align_corners and r.mask_head[-1].bias is not None for r in ra)


def test_attention_on_a_registered_combination_composes():
    m = visattn.create_model(
        "se_resnet20_cifar",
        num_classes=10,
        attention={"name": "bam", "position": "stage", "stages": [1]},
    )
    assert m.attention_paths[-1] == "layer1.attn_stage" and len(m.attention_paths) == 10
    with pytest.raises(ValueError, match=r"both target layer1\.0\.attn_standard"):
        visattn.create_model("se_resnet20_cifar", attention={"name": "cbam"})


def test_residual_attention_options_pass_through():
    m = visattn.create_model("attention56_cifar", num_classes=10, learning="nal", mask="spatial")
    ra = [mod for mod in m.modules() if type(mod).__name__ == "ResidualAttention"]
    assert len(ra) == 3 and all(r.learning == "nal" and r.mask == "spatial" for r in ra)
    m92 = visattn.create_model("attention92", learning="arl", mask="channel")
    assert sum(type(mod).__name__ == "ResidualAttention" for mod in m92.modules()) == 6


@pytest.mark.parametrize(
    ("call", "error", "message"),
    [
        (
            lambda: visattn.create_model("resnet56cifar"),
            KeyError,
            r"unknown model 'resnet56cifar'; did you mean 'resnet56_cifar'",
        ),
        (lambda: visattn.create_model("sw_resnet50"), KeyError, "unknown model 'sw_resnet50'"),
        (
            lambda: visattn.create_model("resnet20_cifar", depth=56),
            ValueError,
            r"depth=56 conflicts with the model's depth=20",
        ),
        (
            lambda: visattn.create_model("attention56_cifar", dataset="imagenet"),
            ValueError,
            r"dataset='imagenet' conflicts with the model's dataset='cifar'",
        ),
        (
            lambda: visattn.create_model("resnet20_cifar", shortcutt="B"),
            TypeError,
            r"unknown option 'shortcutt' \(did you mean 'shortcut'\?\)",
        ),
        (
            lambda: visattn.create_model("resnet20_cifar", atention={"name": "se"}),
            TypeError,  # one of create_model's own, suggested and listed apart from the model's
            r"unknown option 'atention' \(did you mean 'attention'\?\); the model's options: "
            r"shortcut, .*; create_model's own: num_classes, in_chans, global_pool, attention",
        ),
        (
            lambda: visattn.create_model("resnet20_cifar", shortcut="C"),
            ValueError,
            "shortcut must be 'A'",
        ),
        (
            lambda: visattn.create_model("attention56", attention={"name": "se"}),
            ValueError,
            "Residual Attention Network has no ResNet slots",
        ),
        (
            lambda: visattn.create_model("resnet20_cifar", attention={"name": "se", "stages": [4]}),
            ValueError,
            "stage 4 does not exist",
        ),
    ],
)
def test_factory_errors_name_the_problem(call, error, message):
    with pytest.raises(error, match=message):
        call()


def test_repeating_a_fixed_option_is_not_a_conflict():
    assert count_params(visattn.create_model("resnet20_cifar", depth=20)) == count_params(
        visattn.create_model("resnet20_cifar")
    )


@pytest.mark.parametrize("bad", (-1, 2.5, True))
def test_create_model_refuses_an_impossible_num_classes(bad) -> None:
    with pytest.raises(ValueError, match=r"num_classes must be an int >= 0"):
        visattn.create_model("resnet20_cifar", num_classes=bad)


# ----------------------------------------------------------------------------- timm, CLI


def test_every_model_is_a_timm_model():
    timm_names = set(timm.list_models("visattn_*"))
    assert {f"visattn_{n}" for n in visattn.list_models()} <= timm_names
    # unlisted compositions: composed on demand by visattn, and through attention= in timm
    assert "visattn_cbam_resnet18" not in timm_names
    composed = timm.create_model("visattn_resnet18", attention={"name": "cbam"})
    assert composed.attention_paths == visattn.create_model("cbam_resnet18").attention_paths
    m = timm.create_model("visattn_se_resnet56_cifar", num_classes=10)
    assert isinstance(m, ResNet) and m.attention_paths
    cfg = timm.data.resolve_data_config({}, model=m)
    assert cfg["input_size"] == (3, 32, 32) and cfg["mean"] == (0.4914, 0.4822, 0.4465)
    assert m(torch.randn(2, 3, 32, 32)).shape == (2, 10)
    with pytest.raises(ValueError, match="no pretrained weights"):
        timm.create_model("visattn_resnet50", pretrained=True)


def test_timm_create_model_passes_timm_train_options():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        m = timm.create_model(
            "visattn_resnet20_cifar",
            num_classes=10,
            drop_rate=0.0,
            drop_path_rate=0.1,
            global_pool=None,
        )
    assert m.num_classes == 10


def test_models_command_prints_params_and_macs(capsys):
    assert main(["models", "resnet20_cifar"]) == 0
    out = capsys.readouterr().out
    assert "resnet20_cifar" in out and "0.270M" in out and "40.55M" in out


def test_timm_weights_load_and_give_timms_outputs(tmp_path):
    theirs = timm.create_model("resnet18", pretrained=False).eval()
    torch.save(theirs.state_dict(), tmp_path / "timm_resnet18.pth")
    ours = visattn.create_model("resnet18", checkpoint_path=tmp_path / "timm_resnet18.pth").eval()
    x = torch.randn(2, 3, 48, 48)
    with torch.no_grad():
        torch.testing.assert_close(ours(x), theirs(x))


# ----------------------------------------------------------------------------- one home


def test_list_models_and_timm_agree_at_import_without_lightning_and_without_fake_modules():
    """One listing policy: timm registers exactly ``list_models()``; the entrypoints live in a
    real module; models and the normalisation statistics import without lightning."""
    import subprocess
    import sys

    code = (
        "import sys, timm, visattn\n"
        "from visattn.constants import STATS\n"
        "ours = {'visattn_' + n for n in visattn.list_models()}\n"
        "theirs = set(timm.list_models('visattn_*'))\n"
        "assert ours == theirs, sorted(ours ^ theirs)[:5]\n"
        "from timm.models._registry import model_entrypoint\n"
        "fn = model_entrypoint('visattn_se_resnet50')\n"
        "mod = sys.modules[fn.__module__]\n"
        "assert mod.__name__ == 'visattn.models.timm_entrypoints' and mod.__file__, mod\n"
        "assert not any(m.split('.')[0] == 'lightning' for m in sys.modules)\n"
        "print(len(ours))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr[-2000:]
    assert int(out.stdout) == len(visattn.list_models())


def test_model_spec_takes_keyword_fields_and_an_explicit_placeable():
    from visattn.models import ModelSpec
    from visattn.models.builders import resnet_cifar

    with pytest.raises(TypeError):
        ModelSpec("x", resnet_cifar, True)  # positional fields are refused
    with pytest.raises(TypeError):
        ModelSpec(name="x", builder=resnet_cifar)  # placeable must be said
    spec = ModelSpec(name="x", builder=resnet_cifar, placeable=True, dataset="cifar")
    assert spec.num_classes == 10 and spec.input_size == (3, 32, 32)
    assert not get_model_spec("attention56").placeable and get_model_spec("resnet50").placeable
    with pytest.raises(ValueError, match="dataset"):
        ModelSpec(name="x", builder=resnet_cifar, placeable=True, dataset="mnist")


def test_one_home_for_normalisation_statistics_and_cifar100_models_get_cifar100_stats():
    from visattn.constants import STATS
    from visattn.data import STATS as DATA_STATS

    assert DATA_STATS is STATS
    c100 = visattn.create_model("resnet20_cifar", num_classes=100).pretrained_cfg
    c10 = visattn.create_model("resnet20_cifar", num_classes=10).pretrained_cfg
    assert (c100["mean"], c100["std"]) == STATS["cifar100"]
    assert (c10["mean"], c10["std"]) == STATS["cifar10"]
    t100 = timm.create_model("visattn_se_resnet20_cifar", num_classes=100)
    assert timm.data.resolve_data_config({}, model=t100)["mean"] == STATS["cifar100"][0]
    assert visattn.create_model("resnet18").pretrained_cfg["mean"] == STATS["imagenet"][0]


def test_a_checkpoint_with_other_key_names_is_refused_naming_both_sides(tmp_path):
    """No key is renamed silently: a projection saved as ``shortcut`` where the model has
    ``downsample`` is reported as missing and unexpected keys."""
    m = visattn.create_model("attention56_cifar", num_classes=10)
    old = {k.replace(".downsample.", ".shortcut."): v for k, v in m.state_dict().items()}
    assert any(".shortcut." in k for k in old)
    torch.save(old, tmp_path / "old.pth")
    with pytest.raises(
        ValueError,
        match=r"3 missing key\(s\): stages\.0\.0\.downsample\.weight.*"
        r"3 unexpected key\(s\): stages\.0\.0\.shortcut\.weight",
    ):
        visattn.create_model(
            "attention56_cifar", num_classes=10, checkpoint_path=tmp_path / "old.pth"
        )


def test_the_command_help_names_every_subcommand_in_plain_text(capsys):
    with pytest.raises(SystemExit) as done:
        main(["--help"])
    out = capsys.readouterr().out
    assert done.value.code == 0 and "``" not in out  # the docstring's markup stays in the docs
    assert all(f"python -m visattn {c}" in out for c in ("blocks", "models", "export", "ablate"))
