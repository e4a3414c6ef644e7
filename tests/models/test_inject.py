"""``visattn.inject`` on torchvision and timm ResNets: the same blocks as ``create_model``, the
original weights kept, and the positions computed as on visattn's own blocks."""

from __future__ import annotations

import copy

import pytest
import timm
import torch
import torch.nn as nn
import torchvision
from helpers.weights import randomize

import visattn
from visattn.blocks import is_block
from visattn.profile import count_params


def _torchvision(name: str) -> nn.Module:
    return getattr(torchvision.models, name)(weights=None)


def _timm(name: str) -> nn.Module:
    return timm.create_model(name, pretrained=False)


FOREIGN = [("torchvision", _torchvision), ("timm", _timm)]
PLACEMENTS = [
    {"name": "se"},
    [
        {"name": "cbam", "position": "pre", "stages": [2, 4], "blocks": "first"},
        {"name": "bam", "position": "stage", "stages": [1, 2, 3]},
    ],
    [
        {"name": "eca", "position": "identity", "blocks": [0, -1]},
        {"name": "se", "position": "inner", "stages": [3]},
        {"name": "se", "position": "post", "stages": [1], "args": {"reduction": 8}},
    ],
]


@pytest.mark.parametrize(
    ("library", "depth", "placement"),
    [
        pytest.param(lib, depth, p, id=f"{lib}-resnet{depth}-{pid}")
        for (i, p), pid in zip(enumerate(PLACEMENTS), ["se", "cbam_pre+bam", "mixed"])
        for lib, depth in [("torchvision", (18, 50)[i % 2]), ("timm", (50, 18)[i % 2])]
    ],
)
def test_inject_adds_the_same_blocks_as_create_model(library, depth, placement):
    foreign = dict(FOREIGN)[library](f"resnet{depth}")
    paths = visattn.inject(foreign, placement)
    own = visattn.create_model(f"resnet{depth}", attention=placement)
    assert paths == own.attention_paths
    assert sorted(p for p, m in foreign.named_modules() if is_block(m)) == sorted(paths)
    for p in paths:
        assert type(foreign.get_submodule(p)) is type(own.get_submodule(p))
    # same blocks with the same channels: identical parameter names, shapes and count
    assert {k: v.shape for k, v in foreign.state_dict().items()} == {
        k: v.shape for k, v in own.state_dict().items()
    }
    assert count_params(foreign) == count_params(own)
    out = foreign(torch.randn(2, 3, 33, 33))
    assert out.shape == (2, 1000)
    out.sum().backward()


@pytest.mark.parametrize(("library", "depth"), [("torchvision", 50), ("timm", 18)])
def test_injected_identity_blocks_leave_outputs_and_weights_unchanged(library, depth):
    """GC starts as the identity (zero-initialised last conv), so a model with GC injected at
    every position must compute exactly what the original did, with the original tensors."""
    original = randomize(dict(FOREIGN)[library](f"resnet{depth}"), 0, norms_only=True).eval()
    model = copy.deepcopy(original)
    conv = model.layer2[0].conv2.weight
    placement = [
        {"name": "gc", "position": p, "stages": [s]}
        for s, p in enumerate(["pre", "inner", "standard", "identity"], start=1)
    ]
    placement += [
        {"name": "gc", "position": "post", "stages": [1, 2]},
        {"name": "gc", "position": "stage"},
    ]
    paths = visattn.inject(model, placement)
    blocks = (2, 2, 2, 2) if depth == 18 else (3, 4, 6, 3)
    assert len(paths) == sum(blocks) + blocks[0] + blocks[1] + 4
    assert model.layer2[0].conv2.weight is conv  # layers are taken over, not copied
    x = torch.randn(2, 3, 40, 40)
    with torch.no_grad():
        torch.testing.assert_close(model(x), original(x), rtol=0, atol=0)


@pytest.mark.parametrize(("library", "build"), FOREIGN)
def test_original_weights_load_into_the_injected_model(library, build):
    model = build("resnet18")
    state = copy.deepcopy(model.state_dict())
    paths = visattn.inject(model, {"name": "se", "stages": [4]})
    result = model.load_state_dict(state, strict=False)
    assert result.unexpected_keys == []
    assert sorted({k.rsplit(".", 2)[0] for k in result.missing_keys}) == sorted(paths)


def test_inject_keeps_timms_own_attention_and_drop_path():
    model = timm.create_model("seresnet18", pretrained=False, drop_path_rate=0.1)
    own_se, own_drop = model.layer1[0].se, model.layer1[-1].drop_path
    assert own_drop is not None  # rates rise from 0 at the first block
    visattn.inject(model, {"name": "eca", "stages": [1]})
    assert model.layer1[0].se is own_se
    assert model.layer1[-1].drop_path is own_drop
    model.eval()
    rec = {}
    model.layer1[0].se.register_forward_hook(lambda m, a, o: rec.__setitem__("se", o.clone()))
    model.layer1[0].attn_standard.register_forward_hook(
        lambda m, a, o: rec.__setitem__("eca_in", a[0].clone())
    )
    model(torch.randn(2, 3, 33, 33))
    torch.testing.assert_close(rec["eca_in"], rec["se"])  # standard follows timm's se


@pytest.mark.parametrize("position", ["pre", "prenorm", "inner", "standard", "identity", "post"])
def test_positions_on_a_timm_bottleneck(position):
    model = _timm("resnet50").eval()
    visattn.inject(
        model,
        {
            "name": "se",
            "args": {"reduction": 4},
            "stages": [2],
            "blocks": [0],
            "position": position,
        },
    )
    block = model.layer2[0]
    rec: dict[str, torch.Tensor] = {}

    def keep(name):
        def hook(m, args, out):
            rec[name + ".in"], rec[name + ".out"] = args[0].clone(), out.clone()

        return hook

    for name in ["", f"attn_{position}", "bn2", "bn3", "downsample", "conv1", "conv2"]:
        (block if name == "" else block.get_submodule(name)).register_forward_hook(keep(name))
    block(torch.randn(2, 256, 9, 9))
    seen, made = rec[f"attn_{position}.in"], rec[f"attn_{position}.out"]
    shortcut, end = rec["downsample.out"], rec["bn3.out"]
    expected_in = {
        "pre": rec[".in"],
        "prenorm": rec["conv2.out"],
        "inner": torch.relu(rec["bn2.out"]),
        "standard": end,
        "identity": shortcut,
        "post": end + shortcut,
    }[position]
    torch.testing.assert_close(seen, expected_in)
    if position == "standard":
        torch.testing.assert_close(rec[".out"], torch.relu(made + shortcut))
    elif position == "identity":
        torch.testing.assert_close(rec[".out"], torch.relu(end + made))
    elif position == "post":
        torch.testing.assert_close(rec[".out"], torch.relu(made))
    elif position == "pre":
        torch.testing.assert_close(rec["conv1.in"], made)
    elif position == "prenorm":
        torch.testing.assert_close(rec["bn2.in"], made)


def test_injected_stage_still_indexes_like_torchvision():
    model = _torchvision("resnet18")
    last = model.layer4[-1]
    visattn.inject(model, {"name": "bam", "position": "stage", "stages": [4]})
    assert model.layer4[-1] is last and len(model.layer4) == 2
    assert [k for k in model.state_dict() if k.startswith("layer4.0.conv1")] == [
        "layer4.0.conv1.weight"
    ]


def test_inject_errors_leave_the_model_unchanged():
    model = _torchvision("resnet18")
    before = [(p, type(m)) for p, m in model.named_modules()]
    with pytest.raises(ValueError, match=r"stage 5 does not exist; ResNet has stages 1\.\.4"):
        visattn.inject(model, [{"name": "se"}, {"name": "se", "position": "post", "stages": [5]}])
    with pytest.raises(ValueError, match="block index 2 matches no block of stage layer1"):
        visattn.inject(model, {"name": "se", "blocks": [2]})
    assert [(p, type(m)) for p, m in model.named_modules()] == before


def test_inject_twice_into_the_same_slot_raises():
    model = _torchvision("resnet18")
    visattn.inject(model, {"name": "se", "stages": [1]})
    visattn.inject(model, {"name": "eca", "stages": [1], "position": "post"})  # another slot
    with pytest.raises(ValueError, match=r"slot layer1\.0\.attn_standard already holds"):
        visattn.inject(model, {"name": "cbam", "stages": [1]})


def test_inject_rejects_models_without_resnet_stages_and_empty_placements():
    with pytest.raises(TypeError, match="Sequential has no ResNet stages"):
        visattn.inject(nn.Sequential(nn.Conv2d(3, 8, 3)), {"name": "se"})
    with pytest.raises(ValueError, match="placement is None"):
        visattn.inject(_torchvision("resnet18"), None)
    with pytest.raises(ValueError, match="placement list is empty"):
        visattn.inject(_torchvision("resnet18"), [])


def test_inject_rejects_unsupported_residual_blocks():
    model = _torchvision("resnet18")
    model.layer1[0] = nn.Identity()
    with pytest.raises(
        TypeError,
        match=r"layer1.0 is a torch.nn.modules.linear.Identity, not a "
        "residual block",
    ):
        visattn.inject(model, {"name": "se", "stages": [1]})


# ------------------------------------------------------------------ position conv


@pytest.mark.parametrize(
    ("library", "depth", "conv"),
    [
        ("torchvision", 50, "conv2"),
        ("timm", 50, "conv2"),
        ("torchvision", 18, "conv1"),
        ("timm", 18, "conv1"),
    ],
)
def test_inject_conv_replaces_the_middle_conv_and_keeps_its_norm(conv_block, library, depth, conv):
    """The block takes the conv's channels and stride; given the conv's weights (and no gate) it
    is that conv, so the network computes what the original did."""
    original = randomize(dict(FOREIGN)[library](f"resnet{depth}"), 0, norms_only=True).eval()
    model = copy.deepcopy(original)
    norm = model.layer2[0].get_submodule(conv.replace("conv", "bn"))
    paths = visattn.inject(
        model,
        {"name": conv_block, "position": "conv", "args": {"gate": False}, "stages": [2, 3]},
    )
    blocks = (2, 2) if depth == 18 else (4, 6)
    assert paths == [f"layer{s}.{j}.{conv}" for s, n in zip((2, 3), blocks) for j in range(n)]
    for p in paths:
        old, new = original.get_submodule(p), model.get_submodule(p)
        assert (new.in_channels, new.out_channels, new.stride) == (
            old.in_channels,
            old.out_channels,
            old.stride[0],
        )
        new.conv.weight.data.copy_(old.weight)
    assert model.layer2[0].get_submodule(conv.replace("conv", "bn")) is norm
    x = torch.randn(2, 3, 64, 64)
    with torch.no_grad():
        torch.testing.assert_close(model(x), original(x), rtol=0, atol=0)
    with torch.no_grad():  # with its gate (sigmoid(0) = 1/2) the block changes the network
        model.layer2[0].get_submodule(conv).scale = nn.Parameter(torch.zeros(1, 1, 1))
    assert not torch.allclose(model(x), original(x))


def test_inject_conv_rejects_blocks_that_cannot_replace_a_conv(conv_block):
    model = _torchvision("resnet18")
    before = [(p, type(m)) for p, m in model.named_modules()]
    with pytest.raises(ValueError, match=r"block 'cbam' cannot replace a conv.*'_test_conv'"):
        visattn.inject(model, {"name": "cbam", "position": "conv"})
    assert [(p, type(m)) for p, m in model.named_modules()] == before


def test_inject_conv_into_an_anti_aliased_timm_resnet_keeps_its_pooling(conv_block):
    """timm's anti-aliased blocks put the stride in ``aa`` after a stride-1 conv: the block
    takes stride 1 and ``aa`` still downsamples."""
    original = randomize(
        timm.create_model("resnetaa34d", pretrained=False), 0, norms_only=True
    ).eval()
    model = copy.deepcopy(original)
    aa = model.layer2[0].aa
    (path,) = visattn.inject(
        model,
        {
            "name": conv_block,
            "position": "conv",
            "args": {"gate": False},
            "stages": [2],
            "blocks": [0],
        },
    )
    block = model.get_submodule(path)
    assert path == "layer2.0.conv1" and block.stride == 1 and model.layer2[0].aa is aa
    block.conv.weight.data.copy_(original.get_submodule(path).weight)
    x = torch.randn(2, 3, 64, 64)
    with torch.no_grad():
        torch.testing.assert_close(model(x), original(x), rtol=0, atol=0)
