"""Attention placement: the config schema, which slots a placement fills (paths and channels),
what each position computes, and the errors."""

from __future__ import annotations

import dataclasses

import pytest
import torch
import torch.nn as nn
import yaml
from helpers.paths import REPO
from helpers.weights import randomize

import visattn
from visattn.blocks import is_block
from visattn.models import normalize_placements
from visattn.models.placement import Placement, PlacementError

BLOCK_POSITIONS = ["pre", "prenorm", "inner", "standard", "identity", "post", "output"]


# ----------------------------------------------------------------------------- normalize


def test_normalize_fills_api_defaults():
    (p,) = normalize_placements({"name": "se"})
    assert isinstance(p, Placement)
    assert p.to_dict() == {
        "name": "se",
        "args": {},
        "stages": "all",
        "blocks": "all",
        "position": "standard",
        "init": "default",
    }


def test_normalize_accepts_lists_ints_and_none():
    out = normalize_placements(
        [
            {"name": "se", "stages": 2, "blocks": -1},
            {"name": "bam", "position": "stage", "stages": [3, 1], "init": "identity"},
        ]
    )
    assert out[0].stages == (2,) and out[0].blocks == (-1,)
    assert out[1].to_dict() == {
        "name": "bam",
        "args": {},
        "stages": [1, 3],
        "blocks": None,
        "position": "stage",
        "init": "identity",
    }
    assert normalize_placements(None) == []
    assert normalize_placements({"name": "se", "args": None})[0].args == {}


def test_normalize_passes_placements_through_unchanged():
    once = normalize_placements(
        [{"name": "eca", "blocks": "last"}, {"name": "bam", "position": "stage"}]
    )
    again = normalize_placements(once)
    assert again == once and all(a is b for a, b in zip(again, once))
    assert normalize_placements(once[0]) == [once[0]]


def test_placement_round_trips_through_a_plain_dict_and_yaml():
    p = Placement("cbam", args={"reduction": 8}, stages=[4, 2], blocks=[0, -1], position="pre")
    d = p.to_dict()
    assert d["stages"] == [2, 4] and d["blocks"] == [0, -1]
    assert Placement.from_config(d) == p
    assert Placement.from_config(yaml.safe_load(yaml.safe_dump(d))) == p
    assert Placement(**d) == p


def test_placement_is_frozen_and_validated_when_built_directly():
    p = Placement("se")
    with pytest.raises(dataclasses.FrozenInstanceError):
        p.name = "eca"
    with pytest.raises(ValueError, match=r"attention placement \('se'\): unknown position 'side'"):
        Placement("se", position="side")
    with pytest.raises(ValueError, match=r"'init' must be one of \['default', 'identity'\]"):
        Placement("se", init="zero")
    with pytest.raises(ValueError, match="'init' is a placement key, not a block option"):
        Placement("se", args={"init": "identity"})


def test_create_model_accepts_placement_objects_and_mappings_alike():
    a = visattn.create_model("resnet20_cifar", num_classes=10, attention=Placement("se", stages=2))
    b = visattn.create_model(
        "resnet20_cifar", num_classes=10, attention={"name": "se", "stages": 2}
    )
    assert a.attention_paths == b.attention_paths == [f"layer2.{j}.attn_standard" for j in range(3)]


@pytest.mark.parametrize(
    ("placement", "message"),
    [
        (
            {"name": "se", "stage": [1]},
            r"unknown key 'stage' \(did you mean 'stages'\?\).*valid keys",
        ),
        (
            {"name": "se", "position": "after"},
            r"unknown position 'after'.*valid positions: \['standard', 'pre', 'post', 'identity', "
            r"'inner', 'stage', 'conv', 'output', 'prenorm'\]",
        ),
        (
            {"name": "bam", "position": "stage", "blocks": "all"},
            "'blocks' does not apply to position 'stage'",
        ),
        ({"name": "se", "stages": [0]}, "1-based stage indices"),
        ({"name": "se", "stages": "2"}, "'stages' must be 'all' or a non-empty list"),
        ({"name": "se", "stages": [2, 2]}, "lists a stage twice"),
        (
            {"name": "se", "blocks": "middle"},
            r"'blocks' must be one of \['all', 'first', 'last', 'odd'\]",
        ),
        ({"name": "se", "blocks": []}, "non-empty list of 0-based block indices"),
        ({"name": "se", "args": [16]}, "'args' must be a mapping"),
        ({"args": {}}, "'name' .* is required"),
        (b"se", "must be a block name, a placement mapping, a list of them, or None"),
        (16, "must be a block name, a placement mapping, a list of them, or None"),
        (["se"], "placement #0: must be a mapping"),
        ([{"name": "se"}, {"name": "se", "blocks": "x"}], r"placement #1 \('se'\): 'blocks'"),
    ],
)
def test_normalize_rejects_malformed_placements(placement, message):
    with pytest.raises(ValueError, match=message):
        normalize_placements(placement)


def test_unknown_block_name_raises_registry_keyerror_with_close_match():
    with pytest.raises(KeyError, match="unknown block 'cbma'; did you mean 'cbam'"):
        normalize_placements({"name": "cbma"})


# ----------------------------------------------------------------------------- where blocks go

L = "layer"


@pytest.mark.parametrize(
    ("model", "attention", "paths"),
    [
        (
            "resnet20_cifar",
            {"name": "se"},
            [f"layer{s}.{b}.attn_standard" for s in (1, 2, 3) for b in range(3)],
        ),
        (
            "resnet20_cifar",
            {"name": "se", "stages": [2], "blocks": "first", "position": "pre"},
            ["layer2.0.attn_pre"],
        ),
        (
            "resnet20_cifar",
            {"name": "cbam", "stages": 3, "blocks": [-1, 0], "position": "inner"},
            ["layer3.0.attn_inner", "layer3.2.attn_inner"],
        ),
        (
            "resnet50",
            {"name": "eca", "blocks": "last", "position": "post"},
            [
                "layer1.2.attn_post",
                "layer2.3.attn_post",
                "layer3.5.attn_post",
                "layer4.2.attn_post",
            ],
        ),
        (
            "resnet50",
            {"name": "bam", "position": "stage", "stages": [1, 2, 3]},
            ["layer1.attn_stage", "layer2.attn_stage", "layer3.attn_stage"],
        ),
        (
            "resnet50",
            {"name": "se", "stages": [3], "blocks": [0, -1], "position": "identity"},
            ["layer3.0.attn_identity", "layer3.5.attn_identity"],
        ),
        (
            "resnet18",
            [{"name": "se"}, {"name": "bam", "position": "stage", "stages": [1, 2, 3]}],
            [f"layer{s}.{b}.attn_standard" for s in (1, 2, 3, 4) for b in (0, 1)]
            + ["layer1.attn_stage", "layer2.attn_stage", "layer3.attn_stage"],
        ),
        (
            "resnet18",
            [
                {"name": "se", "position": "post", "stages": [4]},
                {"name": "eca", "position": "pre", "stages": [4], "blocks": "last"},
            ],
            ["layer4.0.attn_post", "layer4.1.attn_post", "layer4.1.attn_pre"],
        ),
        (
            "preresnet164_cifar",
            {"name": "se", "position": "inner"},
            [f"layer{s}.{b}.attn_inner" for s in (1, 2, 3) for b in range(18)],
        ),
    ],
)
def test_placement_fills_exactly_the_predicted_slots(model, attention, paths):
    m = visattn.create_model(model, num_classes=10, attention=attention)
    assert m.attention_paths == paths
    placed = sorted(p for p, mod in m.named_modules() if is_block(mod))
    assert placed == sorted(paths)
    for p in paths:
        assert m.get_submodule(p).block_name in {a.name for a in normalize_placements(attention)}


@pytest.mark.parametrize(
    ("model", "stage", "expected"),
    [
        # (block input, middle conv output, block output): stage 2 block 0 changes the width
        (
            "resnet20_cifar",
            2,
            {
                "pre": 16,
                "prenorm": 32,
                "inner": 32,
                "standard": 32,
                "identity": 32,
                "post": 32,
                "output": 32,
                "stage": 32,
            },
        ),
        (
            "resnet18",
            3,
            {
                "pre": 128,
                "prenorm": 256,
                "inner": 256,
                "standard": 256,
                "identity": 256,
                "post": 256,
                "output": 256,
                "stage": 256,
            },
        ),
        (
            "resnet50",
            2,
            {
                "pre": 256,
                "prenorm": 128,
                "inner": 128,
                "standard": 512,
                "identity": 512,
                "post": 512,
                "output": 512,
                "stage": 512,
            },
        ),
        (
            "preresnet164_cifar",
            1,
            {
                "pre": 16,
                "prenorm": 16,
                "inner": 16,
                "standard": 64,
                "identity": 64,
                "post": 64,
                "output": 64,
                "stage": 64,
            },
        ),
    ],
)
def test_block_channels_match_the_tensor_at_each_position(model, stage, expected):
    for position, channels in expected.items():
        placement = {
            "name": "se",
            "args": {"reduction": 4},
            "stages": [stage],
            "position": position,
        }
        if position != "stage":
            placement["blocks"] = [0]
        m = visattn.create_model(model, num_classes=10, attention=placement)
        (path,) = m.attention_paths
        assert m.get_submodule(path).fc1.in_channels == channels, (model, position)


def test_placed_blocks_follow_the_model_dtype():
    m = visattn.create_model("resnet20_cifar", num_classes=10).double()
    visattn.inject(m, {"name": "se", "stages": [1]})
    assert m.layer1[0].attn_standard.fc1.weight.dtype == torch.float64
    assert m(torch.randn(2, 3, 16, 16, dtype=torch.float64)).dtype == torch.float64


# ------------------------------------------------------------------ what positions compute


class _Recorder:
    """Forward hooks that keep copies of inputs / outputs of named submodules of one block."""

    def __init__(self, block: nn.Module, names: list[str]) -> None:
        self.inp: dict[str, torch.Tensor] = {}
        self.out: dict[str, torch.Tensor] = {}
        self.handles = []
        for name in names:
            mod = block if name == "" else block.get_submodule(name)
            self.handles.append(mod.register_forward_hook(self._hook(name)))

    def _hook(self, name: str):
        def hook(mod, args, output):
            self.inp[name] = args[0].detach().clone()
            self.out[name] = output.detach().clone()

        return hook


def _shortcut(rec: _Recorder, block: nn.Module) -> torch.Tensor:
    return rec.inp[""] if block.downsample is None else rec.out["downsample"]


# the last norm (post-activation) or conv (pre-activation) of the residual branch
_BRANCH_END = {"BasicBlock": "bn2", "Bottleneck": "bn3", "PreActBottleneck": "conv3"}
_MIDDLE = {"BasicBlock": "bn1", "Bottleneck": "bn2", "PreActBottleneck": "conv2"}
_NORM_AFTER_3X3 = {"BasicBlock": "bn2", "Bottleneck": "bn2", "PreActBottleneck": "bn3"}


@pytest.mark.parametrize("model", ["resnet20_cifar", "resnet50", "preresnet164_cifar"])
@pytest.mark.parametrize("position", BLOCK_POSITIONS)
def test_each_block_position_computes_what_the_api_says(model, position):
    stage = 2 if model != "preresnet164_cifar" else 1  # block 0: a shortcut with projection/pad
    m = visattn.create_model(
        model,
        num_classes=10,
        attention={
            "name": "se",
            "args": {"reduction": 4},
            "stages": [stage],
            "blocks": [0],
            "position": position,
        },
    )
    m.eval()
    block = getattr(m, f"layer{stage}")[0]
    kind = type(block).__name__
    preact = kind == "PreActBottleneck"
    slot = f"attn_{position}"
    names = ["", slot, "conv1", "bn1", _MIDDLE[kind], _BRANCH_END[kind], "downsample", "conv2"]
    names.append(_NORM_AFTER_3X3[kind])
    rec = _Recorder(block, list(dict.fromkeys(names)))
    block(torch.randn(2, block.in_channels, 9, 9))
    seen, made = rec.inp[slot], rec.out[slot]
    assert not torch.allclose(seen, made), "the test block must change its input"
    x, out = rec.inp[""], rec.out[""]
    act = (lambda t: t) if preact else torch.relu
    end, shortcut = rec.out[_BRANCH_END[kind]], _shortcut(rec, block)
    if position == "pre":  # the residual branch's input, right before its first conv
        expected = torch.relu(rec.out["bn1"]) if preact else x
        torch.testing.assert_close(seen, expected)
        torch.testing.assert_close(rec.inp["conv1"], made)
    elif position == "prenorm":  # the last 3x3 conv's output, right before its norm
        torch.testing.assert_close(seen, rec.out["conv2"])
        torch.testing.assert_close(rec.inp[_NORM_AFTER_3X3[kind]], made)
    elif position == "inner":  # the middle conv's output (after its norm + act if post-act)
        mid = rec.out[_MIDDLE[kind]]
        torch.testing.assert_close(seen, mid if preact else torch.relu(mid))
    elif position == "standard":  # the residual branch's output, before the sum
        torch.testing.assert_close(seen, end)
        torch.testing.assert_close(out, act(made + shortcut))
    elif position == "identity":  # the shortcut's output, in parallel with the branch
        torch.testing.assert_close(seen, shortcut)
        torch.testing.assert_close(out, act(end + made))
    elif position == "post":  # the sum
        torch.testing.assert_close(seen, end + shortcut)
        torch.testing.assert_close(out, act(made))
    elif position == "output":  # the block's output, after its final activation
        torch.testing.assert_close(seen, act(end + shortcut))
        torch.testing.assert_close(out, made)


@pytest.mark.parametrize("model", ["resnet20_cifar", "preresnet164_cifar"])
def test_stage_position_sees_the_stage_output(model):
    m = visattn.create_model(
        model,
        num_classes=10,
        attention={"name": "se", "args": {"reduction": 4}, "position": "stage", "stages": [2]},
    )
    m.eval()
    last = m.layer2[-1]
    rec_last = _Recorder(last, [""])
    rec_slot = _Recorder(m.layer2, ["attn_stage"])
    rec_next = _Recorder(m.layer3, [""])
    m(torch.randn(2, 3, 16, 16))
    torch.testing.assert_close(rec_slot.inp["attn_stage"], rec_last.out[""])
    torch.testing.assert_close(rec_next.inp[""], rec_slot.out["attn_stage"])
    assert not torch.allclose(rec_slot.inp["attn_stage"], rec_slot.out["attn_stage"])


def test_capture_attention_reports_every_placed_block_by_path():
    m = visattn.create_model(
        "resnet20_cifar",
        num_classes=10,
        attention=[
            {"name": "se", "stages": [1]},
            {"name": "spatial", "position": "stage", "stages": [3]},
        ],
    )
    with visattn.capture_attention(m) as maps:
        m(torch.randn(2, 3, 32, 32))
        assert sorted(maps) == sorted(m.attention_paths)
        assert maps["layer3.attn_stage"].shape == (2, 1, 8, 8)


# ----------------------------------------------------------------------------- errors


@pytest.mark.parametrize(
    ("model", "attention", "error", "message"),
    [
        (
            "resnet20_cifar",
            {"name": "se", "blocks": [5]},
            PlacementError,
            r"block index 5 matches no block of stage layer1 \(3 blocks: indices 0..2 or -3..-1\)",
        ),
        (
            "resnet50",
            {"name": "se", "blocks": [5]},
            PlacementError,  # fits stage 3 only: still an error
            "block index 5 matches no block of stage layer1",
        ),
        (
            "resnet56_cifar",
            {"name": "se", "stages": [4]},
            PlacementError,
            r"stage 4 does not exist; resnet56_cifar has stages 1..3",
        ),
        (
            "resnet18",
            {"name": "bam", "position": "stage", "stages": [5]},
            PlacementError,
            "stage 5 does not exist; resnet18 has stages 1..4",
        ),
        (
            "resnet20_cifar",
            [{"name": "se"}, {"name": "eca", "stages": [2]}],
            ValueError,
            r"placements #0 \('se'\) and #1 \('eca'\) both target layer2.0.attn_standard",
        ),
        (
            "resnet20_cifar",
            {"name": "se", "args": {"reduction": 32}},
            ValueError,
            r"placement #0 at layer1.0.attn_standard \(16 channels\): block 'se'",
        ),
        (
            "resnet20_cifar",
            {"name": "se", "args": {"reductio": 4}},
            TypeError,
            r"block 'se': unknown option 'reductio' \(did you mean 'reduction'\?\)",
        ),
        (
            "resnet20_cifar",
            {"name": "se", "position": "sideways"},
            PlacementError,
            "unknown position 'sideways'",
        ),
    ],
)
def test_placement_errors_name_the_problem(model, attention, error, message):
    with pytest.raises(error, match=message):
        visattn.create_model(model, num_classes=10, attention=attention)


def test_a_placement_that_cannot_apply_is_a_placement_error_naming_it():
    """Raised deep in the pattern or slot code, the error still names the placement's index and
    block (one wording, one type to catch)."""
    net = visattn.create_model("resnet20_cifar", num_classes=10)
    with pytest.raises(PlacementError) as err:
        visattn.inject(net, [{"name": "eca"}, {"name": "se", "after": "BottleNeck"}])
    assert (err.value.index, err.value.name) == (1, "se")
    assert str(err.value).startswith("attention placement #1 ('se'): after pattern 'BottleNeck'")
    assert err.value.naming("cbam", 7) is not err.value  # filled only where missing
    assert (err.value.naming("cbam", 7).name, err.value.naming("cbam", 7).index) == ("se", 1)


def test_failed_placement_leaves_the_model_untouched():
    m = visattn.create_model("resnet20_cifar", num_classes=10)
    before = [(p, type(mod)) for p, mod in m.named_modules()]
    with pytest.raises(ValueError):  # the 2nd placement's block cannot be built for 16 channels
        visattn.inject(
            m, [{"name": "eca"}, {"name": "se", "position": "pre", "args": {"reduction": 64}}]
        )
    assert [(p, type(mod)) for p, mod in m.named_modules()] == before


def test_filled_slot_cannot_be_filled_again():
    m = visattn.create_model("se_resnet20_cifar", num_classes=10)
    with pytest.raises(
        ValueError, match=r"slot layer1\.0\.attn_standard already holds a SqueezeExcite"
    ):
        visattn.inject(m, {"name": "eca"})


# ------------------------------------------------------------------ position conv


@pytest.mark.parametrize(
    ("model", "path", "shape"),
    [
        # (path replaced, (in, out, stride)): stage 2 block 0 strides and changes the width
        ("resnet50", "layer2.0.conv2", (128, 128, 2)),
        ("resnet18", "layer2.0.conv1", (64, 128, 2)),
        ("resnet20_cifar", "layer2.0.conv1", (16, 32, 2)),
        ("preresnet164_cifar", "layer2.0.conv2", (32, 32, 2)),
    ],
)
def test_conv_position_replaces_the_middle_conv_keeping_channels_and_stride(
    conv_block, model, path, shape
):
    plain = visattn.create_model(model, num_classes=10)
    m = visattn.create_model(
        model,
        num_classes=10,
        attention={"name": conv_block, "position": "conv", "stages": [2], "blocks": [0]},
    )
    assert m.attention_paths == [path]
    old, new = plain.get_submodule(path), m.get_submodule(path)
    assert isinstance(old, nn.Conv2d) and new.block_name == conv_block
    assert (new.in_channels, new.out_channels, new.stride) == shape
    assert (old.in_channels, old.out_channels, old.stride[0]) == shape
    # the conv's own weight is gone, the block's weights sit under the conv's name
    keys = set(m.state_dict())
    assert f"{path}.weight" not in keys and f"{path}.conv.weight" in keys
    assert m(torch.randn(2, 3, 32, 32)).shape == (2, 10)


def test_conv_position_computes_the_conv_it_replaces_when_given_its_weights(conv_block):
    """With the conv's weights and no gate, the block is that conv: the network is unchanged,
    so the block sits exactly where the conv was, with the norm after it kept."""
    plain = randomize(visattn.create_model("resnet50", num_classes=10), 0, norms_only=True).eval()
    m = visattn.create_model(
        "resnet50",
        num_classes=10,
        attention=[
            {"name": conv_block, "position": "conv", "args": {"gate": False}, "stages": [1, 2]},
            {"name": conv_block, "position": "conv", "args": {"gate": False}, "stages": [4]},
        ],
    ).eval()
    state = plain.state_dict()
    state.update({f"{p}.conv.weight": state.pop(f"{p}.weight") for p in m.attention_paths})
    m.load_state_dict(state)
    assert isinstance(m.layer2[0].bn2, nn.BatchNorm2d)
    x = torch.randn(2, 3, 64, 64)
    with torch.no_grad():
        torch.testing.assert_close(m(x), plain(x), rtol=0, atol=0)


def test_conv_and_inner_positions_fill_one_block_together(conv_block):
    m = visattn.create_model(
        "resnet18",
        num_classes=10,
        attention=[
            {"name": conv_block, "position": "conv", "stages": [3]},
            {"name": "se", "position": "inner", "stages": [3]},
        ],
    )
    assert m.attention_paths == [
        "layer3.0.conv1",
        "layer3.1.conv1",
        "layer3.0.attn_inner",
        "layer3.1.attn_inner",
    ]
    m(torch.randn(2, 3, 32, 32)).sum().backward()


@pytest.mark.parametrize(
    ("attention", "message"),
    [
        (
            {"name": "se", "position": "conv"},
            r"placement #0 \('se'\): block 'se' cannot replace a conv \(position 'conv'\); blocks "
            r"that can: '_test_conv'",
        ),
        (
            {"name": "_test_conv", "position": "conv", "args": {"stride": 2}},
            "position 'conv' takes 'stride' from the conv it replaces; remove it from 'args'",
        ),
        (
            {"name": "_test_conv", "position": "conv", "init": "identity"},
            "init 'identity' does not apply to position 'conv'",
        ),
        (
            [
                {"name": "_test_conv", "position": "conv", "stages": [1]},
                {"name": "_test_conv", "position": "conv", "blocks": "first"},
            ],
            r"placements #0 \('_test_conv'\) and #1 \('_test_conv'\) both target layer1.0.conv1",
        ),
    ],
)
def test_conv_position_errors_name_the_problem(conv_block, attention, message):
    with pytest.raises(ValueError, match=message):
        visattn.create_model("resnet18", num_classes=10, attention=attention)


def test_conv_position_without_conv_blocks_says_none_is_registered():
    if any(visattn.block_info(n).replaces_conv for n in visattn.list_blocks()):
        pytest.skip("a conv-replacing block is registered")
    with pytest.raises(ValueError, match="blocks that can: none is registered"):
        normalize_placements({"name": "se", "position": "conv"})


def test_replaced_conv_cannot_be_replaced_again(conv_block):
    m = visattn.create_model(
        "resnet18", num_classes=10, attention={"name": conv_block, "position": "conv"}
    )
    with pytest.raises(ValueError, match=r"slot layer1\.0\.conv1 already holds a TestConvBlock"):
        visattn.inject(m, {"name": conv_block, "position": "conv", "stages": [1]})


# ----------------------------------------------------------------------------- the CLI


def test_the_cli_types_model_attention_as_placements():
    """LightningCLI parses ``model.attention`` as ``Placement | list[Placement] | None``:
    command-line strings become typed values, and a bad placement fails at parse time."""
    cli = pytest.importorskip("visattn.training.cli")

    def build(*args):
        quick = ["--config", str(REPO / "configs/quickstart.yaml"), *args]
        return cli.VisattnCLI(args=quick, run=False, parser_kwargs={"exit_on_error": False})

    built = build("--model.attention.name=se", "--model.attention.args.reduction=4")
    hp = built.model.hparams.attention  # what the CLI parsed: a plain mapping, values typed
    assert Placement.from_config(hp) == Placement("se", args={"reduction": 4})
    assert built.model.net.layer1[0].attn_standard.fc1.out_channels == 16 // 4
    built = build(
        '--model.attention=[{"name": "se", "stages": 2}, {"name": "bam", "position": "stage"}]'
    )
    assert [p["name"] for p in built.model.hparams.attention] == ["se", "bam"]
    with pytest.raises(Exception, match="unknown position 'sideways'"):
        build("--model.attention.name=se", "--model.attention.position=sideways")


def test_block_names_are_case_insensitive_and_a_name_alone_is_a_placement() -> None:
    """As timm's attention strings: ``CBAM`` is ``cbam``, recorded by its own name; and
    ``attention="cbam"`` is ``{"name": "cbam"}``."""
    torch.manual_seed(0)
    by_name = visattn.create_model("resnet20_cifar", attention="CBAM")
    torch.manual_seed(0)
    by_map = visattn.create_model("resnet20_cifar", attention={"name": "cbam"})
    assert by_name.attention_paths == by_map.attention_paths
    x = torch.randn(2, 3, 32, 32)
    assert torch.equal(by_name.eval()(x), by_map.eval()(x))
    assert normalize_placements("Se")[0].name == "se"
    assert type(visattn.create_block("ECA", 64)) is type(visattn.create_block("eca", 64))
    with pytest.raises(KeyError, match="did you mean"):
        visattn.create_block("CBMA", 64)


def test_blocks_odd_selects_every_second_block_of_each_stage():
    """``blocks: odd`` is BAT's authors' pattern (indices 1, 3, 5, ... of each stage); a stage of
    one block gets none, and the placement still matches the stages that have a second block."""
    net = visattn.create_model("resnet20_cifar", attention={"name": "se", "blocks": "odd"})
    placed = [
        (s, i)
        for s, stage in enumerate((net.layer1, net.layer2, net.layer3), start=1)
        for i, b in enumerate(stage)
        if is_block(b.attn_standard)
    ]
    assert placed == [(s, 1) for s in (1, 2, 3)]
    assert Placement("se", blocks="odd").blocks == "odd"
