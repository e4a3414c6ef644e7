"""``inject`` by module pattern (``after``, ``before``, ``replace``) on a non-ResNet CNN
(torchvision's MobileNetV3-small, built with random weights): identity at insertion, the host's
parameter names and module objects kept, ``dry_run``, the probe leaving nothing behind, the
errors (close matches, the model unchanged), pickling, deep copies and ``capture_attention``."""

from __future__ import annotations

import copy
import io
import pickle

import pytest
import torch
import torch.nn as nn
import torchvision
from helpers.weights import randomize

import visattn
from visattn.blocks.registry import registered_block
from visattn.models.placement import Placement, PlacementError
from visattn.models.sites import run_after, run_before

SIZE = (3, 64, 64)


def _mnv3() -> nn.Module:
    torch.manual_seed(0)
    return randomize(torchvision.models.mobilenet_v3_small(num_classes=9), 0, norms_only=True)


@pytest.fixture(scope="module")
def trained() -> nn.Module:
    return _mnv3().eval()


def _tree(model: nn.Module) -> list[tuple[str, type, int]]:
    return [(p, type(m), id(m)) for p, m in model.named_modules()]


def _hooks(model: nn.Module) -> int:
    """The hooks that run placed blocks (blocks have input checks of their own)."""
    hooks = [
        h
        for m in model.modules()
        for d in (m._forward_hooks, m._forward_pre_hooks)
        for h in d.values()
    ]
    return sum(h in (run_after, run_before) for h in hooks)


def _state(model: nn.Module) -> dict[str, torch.Tensor]:
    return {k: v.clone() for k, v in model.state_dict().items()}


@pytest.mark.parametrize("mode", ["eval", "train"])
@pytest.mark.parametrize(
    "placement",
    [
        {"name": "cbam", "after": ["InvertedResidual"], "init": "identity"},
        {"name": "se", "after": ["InvertedResidual"], "position": "standard", "init": "identity"},
        {"name": "eca", "before": "features.*", "init": "identity"},
    ],
    ids=["cbam-after-class", "se-standard", "eca-before-glob"],
)
def test_identity_insertion_keeps_the_logits(trained, placement, mode):
    original = copy.deepcopy(trained).train(mode == "train")
    model = copy.deepcopy(original)
    paths = visattn.inject(model, placement, input_size=SIZE)
    assert paths and all(model.get_submodule(p) is not None for p in paths)
    x = torch.randn(4, *SIZE)
    torch.manual_seed(1)
    expected = original(x)
    torch.manual_seed(1)
    out = model(x)
    torch.testing.assert_close(out, expected, rtol=1e-5, atol=1e-5)
    out.logsumexp(1).sum().backward()
    grads = [q.grad for p in paths for q in model.get_submodule(p).parameters()]
    assert grads and any(g is not None and g.abs().sum() > 0 for g in grads)
    # default init changes the function: the comparison above can fail
    other = copy.deepcopy(original)
    visattn.inject(other, {**placement, "init": "default"}, input_size=SIZE)
    torch.manual_seed(1)
    assert not torch.allclose(other(x), expected, atol=1e-3)


def test_the_standard_position_is_before_the_projection_after_se(trained):
    model = copy.deepcopy(trained)
    paths = visattn.inject(
        model,
        {"name": "se", "after": ["InvertedResidual"], "position": "standard"},
        input_size=SIZE,
    )
    blocks = [m for m in model.features if type(m).__name__ == "InvertedResidual"]
    assert paths == [
        # the projection is a Conv2dNormActivation (an nn.Sequential): before its conv
        f"features.{i}.block.{len(b.block) - 1}.0.attn_before"
        for i, b in enumerate(model.features)
        if b in blocks
    ]
    block = model.features[4]  # expand, depthwise, SE, projection
    seen = {}
    block.block[2].register_forward_hook(lambda m, a, o: seen.setdefault("se", o))
    block.block[3][0].attn_before.register_forward_hook(lambda m, a, o: seen.setdefault("in", a[0]))
    model(torch.randn(2, *SIZE))
    assert seen["in"] is seen["se"]


def test_names_and_module_objects_of_the_host_are_kept(trained):
    model = copy.deepcopy(trained)
    before = {p: m for p, m in model.named_modules()}
    model.features[3].f = -1  # as ultralytics' routing attributes on each layer
    state = _state(model)
    paths = visattn.inject(model, {"name": "cbam", "after": "features.3"}, input_size=SIZE)
    assert paths == ["features.3.attn_after"]
    assert all(model.get_submodule(p) is m for p, m in before.items())
    assert model.features[3].f == -1
    result = model.load_state_dict(state, strict=False)
    assert result.unexpected_keys == []
    new = [k for k in model.state_dict() if k.startswith("features.3.attn_after.")]
    assert new and sorted(result.missing_keys) == sorted(new)


def test_dry_run_plans_without_touching_the_model(trained):
    model = copy.deepcopy(trained).train()
    tree, state, hooks = _tree(model), _state(model), _hooks(model)
    placement = {"name": "eca", "after": ["features.**", "classifier.*"], "init": "identity"}
    plan = visattn.inject(model, placement, dry_run=True, input_size=SIZE)
    assert _tree(model) == tree and _hooks(model) == hooks and model.training
    assert all(m.training for m in model.modules())
    for k, v in model.state_dict().items():  # BN running stats and counters did not move
        torch.testing.assert_close(v, state[k], rtol=0, atol=0)
    assert plan.paths == visattn.inject(model, placement, input_size=SIZE)
    first = plan.blocks[0]
    assert (first.path, first.channels, first.spatial) == ("features.0.2.attn_after", 16, (32, 32))
    assert first.path in str(plan)
    reasons = dict(plan.skipped)
    assert "2-D tensor (1, 1024), not (N, C, H, W)" in reasons["classifier.0"]


def test_modules_that_cannot_take_a_block_are_skipped_or_refused():
    model = nn.Sequential(
        nn.Conv2d(3, 32, 3),
        nn.ReLU(),
        nn.AdaptiveAvgPool2d(1),
        nn.Flatten(),
        nn.Linear(32, 4),
        nn.Conv2d(3, 3, 1),  # never called (after the head)
    )
    model.forward = lambda x: model[4](model[3](model[2](model[1](model[0](x)))))
    plan = visattn.inject(model, {"name": "se", "after": "*"}, dry_run=True, input_size=SIZE)
    assert plan.paths == ["0.attn_after", "1.attn_after", "2.attn_after"]
    assert plan.blocks[2].spatial == (1, 1)
    skipped = dict(plan.skipped)
    assert "2-D tensor (1, 32), not (N, C, H, W)" in skipped["3"]
    assert "not called in a forward at input size (3, 64, 64)" in skipped["5"]
    tree = _tree(model)
    with pytest.raises(ValueError, match=r"4 cannot take a block after it: its output is a 2-D"):
        visattn.inject(model, {"name": "se", "after": "4"}, input_size=SIZE)
    assert _tree(model) == tree


def test_a_pattern_that_matches_nothing_names_the_closest_classes_and_paths(trained):
    model = copy.deepcopy(trained)
    tree, keys = _tree(model), list(model.state_dict())
    with pytest.raises(ValueError, match=r"'InvertedResidal' matches no module; closest: classes "):
        visattn.inject(model, {"name": "se", "after": ["InvertedResidal"]}, input_size=SIZE)
    with pytest.raises(ValueError, match=r"closest: paths 'features.4'"):
        visattn.inject(model, {"name": "se", "after": "featurs.4"}, input_size=SIZE)
    # a good pattern with a bad one: nothing is placed
    with pytest.raises(ValueError, match="'Conv2dNormActivaton' matches no module"):
        visattn.inject(
            model,
            [
                {"name": "se", "after": "features.1"},
                {"name": "se", "after": ["Conv2dNormActivaton"]},
            ],
            input_size=SIZE,
        )
    assert _tree(model) == tree and list(model.state_dict()) == keys and _hooks(model) == 0


class _ReflectGate(nn.Module):
    """``x * sigmoid(conv7x7(x))`` with reflect padding: maps smaller than 4x4 cannot be padded."""

    def __init__(self, channels: int) -> None:
        super().__init__()
        self.conv = nn.Conv2d(channels, 1, 7, padding=3, padding_mode="reflect")

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * torch.sigmoid(self.conv(x))


def test_a_block_too_large_for_the_map_is_refused_before_the_model_changes(trained):
    model = copy.deepcopy(trained)
    tree = _tree(model)
    with registered_block("_test_reflect", _ReflectGate, family="spatial", paper="test only"):
        # fine on the 16x16 map of features.1, refused on the 2x2 map of features.9
        placement = [
            {"name": "_test_reflect", "after": "features.1"},
            {"name": "_test_reflect", "after": "features.9"},
        ]
        with pytest.raises(
            PlacementError,
            match=r"#1 \('_test_reflect'\): at features\.9\.attn_after \(96 channels\): cannot "
            r"take the \(96, 2, 2\) tensor there \(RuntimeError: .*[Pp]adding",
        ):
            visattn.inject(model, placement, input_size=SIZE)
        assert _tree(model) == tree and _hooks(model) == 0
        assert visattn.inject(model, placement[:1], input_size=SIZE) == ["features.1.attn_after"]


class _HalfChannels(nn.Module):
    """Keeps the first half of the channels: not a shape-keeping block."""

    def __init__(self, channels: int) -> None:
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x[:, : x.shape[1] // 2]


def test_a_block_that_changes_the_shape_is_refused_before_the_model_changes(trained):
    model = copy.deepcopy(trained)
    tree = _tree(model)
    refused = pytest.raises(
        PlacementError,
        match=r"#0 \('_test_half'\): at features\.1\.attn_after \(16 channels\): maps "
        r"\(2, 16, 16, 16\) to \(2, 8, 16, 16\); a block placed by pattern must keep",
    )
    half = registered_block("_test_half", _HalfChannels, family="channel", paper="test only")
    with half, refused:
        visattn.inject(model, {"name": "_test_half", "after": "features.1"}, input_size=SIZE)
    assert _tree(model) == tree and _hooks(model) == 0


def test_placement_keys_are_validated():
    with pytest.raises(ValueError, match=r"give one of .* not 'after' and 'before'"):
        Placement("se", after="a", before="b")
    with pytest.raises(ValueError, match="'after' selects modules by pattern and 'stages'"):
        Placement("se", after="features.*", stages=[2])
    with pytest.raises(ValueError, match="with 'before' the block goes before the module"):
        Placement("se", before="features.*", position="standard")
    with pytest.raises(ValueError, match="'after' must be a class name"):
        Placement("se", after=[])
    p = Placement("se", after=["InvertedResidual", "features.*"], init="identity")
    d = p.to_dict()
    assert d == {
        "name": "se",
        "args": {},
        "position": None,
        "init": "identity",
        "after": ["InvertedResidual", "features.*"],
    }
    assert Placement.from_config(d) == p
    assert "after" not in Placement("se").to_dict()


def test_pickle_deepcopy_to_and_capture_attention(trained):
    model = copy.deepcopy(trained)
    paths = visattn.inject(
        model, {"name": "cbam", "after": ["InvertedResidual"], "init": "identity"}, input_size=SIZE
    )
    x = torch.randn(2, *SIZE)
    with torch.no_grad():
        expected = model(x)
    buf = io.BytesIO()
    torch.save(model, buf)
    buf.seek(0)
    loaded = torch.load(buf, weights_only=False)
    clone = copy.deepcopy(model)
    again = pickle.loads(pickle.dumps(model))
    for other in (loaded, clone, again):
        assert _hooks(other) == _hooks(model) == len(paths)
        with torch.no_grad():
            torch.testing.assert_close(other(x), expected, rtol=0, atol=0)
        assert other.get_submodule(paths[0]) is not model.get_submodule(paths[0])
    # each copy's hooks run that copy's blocks
    for other in (loaded, clone, again, model):
        calls = []
        other.get_submodule(paths[0]).register_forward_hook(lambda *a, c=calls: c.append(1))
        with torch.no_grad():
            other(x)
        assert calls == [1]
    with visattn.capture_attention(model.double()) as maps:
        model(x.double())
    assert maps and all(any(k.startswith(p + ".") or k == p for p in paths) for k in maps)
    assert {p for p in paths if any(k.startswith(p) for k in maps)} == set(paths)
