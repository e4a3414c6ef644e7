"""PyTorch program transforms over the whole zoo: ``torch.fx.symbolic_trace``, torchvision's
``create_feature_extractor`` and ``torch.jit.script`` give the eager outputs for every registered
block and every named model (parametrized over the registries, so new blocks and models are
covered the moment they are registered). ONNX is in ``tests/export/test_onnx_export.py``;
``torch.export`` and ``torch.compile`` of blocks in ``tests/blocks/test_block_contract.py``."""

from __future__ import annotations

import copy
import io

import pytest
import torch
import torch.nn as nn
from helpers.reference import assert_within_rounding
from helpers.tiers import REPRESENTATIVE_MODELS, tiered
from helpers.weights import randomize
from torchvision.models.feature_extraction import create_feature_extractor, get_graph_node_names

import visattn
from visattn.profile import calibrate_batch_norm

# Blocks or models that cannot be scripted, with the reason (shown in the README too). Empty.
SCRIPT_EXCLUDED: dict[str, str] = {}

OPTION_CASES = [  # options that take other code paths than the defaults
    ("nonlocal", {"score": "additive", "heads": 2}),
    ("nonlocal", {"selection": "topk", "k": 3, "window": 3, "subsample": 2}),
    ("nonlocal", {"score": "gaussian", "record": "full"}),
    ("cbam", {"order": "parallel", "pool_types": ["max"]}),
    ("residual_attention", {"depth": 3, "mask": "spatial"}),
    ("se", {"pool": "max"}),
    ("scse", {"combine": "max"}),
]


def _block(name: str, **kwargs) -> nn.Module:
    return randomize(visattn.create_block(name, 16, **kwargs), 1).eval()


def _script(module: nn.Module, name: str) -> torch.jit.ScriptModule:
    if name in SCRIPT_EXCLUDED:
        pytest.skip(f"{name} cannot be scripted: {SCRIPT_EXCLUDED[name]}")
    return torch.jit.script(module)


BLOCK_CASES = [(n, {}) for n in visattn.list_blocks()] + OPTION_CASES
BLOCK_IDS = [n + "".join(f"-{k}={v}" for k, v in kw.items()) for n, kw in BLOCK_CASES]


@pytest.mark.parametrize(("name", "kwargs"), BLOCK_CASES, ids=BLOCK_IDS)
def test_block_traces_with_torch_fx(name: str, kwargs: dict) -> None:
    blk = _block(name, **kwargs)
    gm = torch.fx.symbolic_trace(blk)
    for shape in [(2, 16, 9, 11), (3, 16, 6, 6)]:  # the graph is not tied to the traced size
        x = torch.randn(shape)
        with torch.no_grad():
            torch.testing.assert_close(gm(x), blk(x), rtol=0, atol=0)


@pytest.mark.parametrize(("name", "kwargs"), BLOCK_CASES, ids=BLOCK_IDS)
def test_block_compiles_with_torchscript_and_matches_eager(name: str, kwargs: dict) -> None:
    blk = _block(name, **kwargs)
    scripted = _script(blk, name)
    x = torch.randn(2, 16, 9, 11)
    with torch.no_grad():
        torch.testing.assert_close(scripted(x), blk(x), rtol=1e-6, atol=1e-6)
    # scripting leaves the eager block as it was: it still records its map
    with visattn.capture_attention(blk) as maps, torch.no_grad():
        blk(x)
    assert list(maps) == [""]


def test_the_registered_class_scripts_and_its_scripted_copy_records_nothing() -> None:
    info = visattn.block_info("cbam")
    blk = info.cls(16).eval()  # the class as registered (its __init__ wrapped by the registry)
    scripted = torch.jit.script(blk)
    model = nn.Sequential(scripted)
    with (
        pytest.raises(ValueError, match="no registered attention block"),
        visattn.capture_attention(model),
    ):
        pass


def test_gsop_covariance_stays_float32_in_a_traced_graph_under_autocast() -> None:
    """The fx graph calls the covariance as one node, so its autocast-off region survives."""
    blk = _block("gsop")
    gm = torch.fx.symbolic_trace(blk)
    assert any(
        n.op == "call_function" and n.target.__name__ == "_covariance_fp32" for n in gm.graph.nodes
    )
    x = torch.randn(2, 16, 7, 7)
    with torch.autocast("cpu", dtype=torch.bfloat16), torch.no_grad():
        torch.testing.assert_close(gm(x), blk(x), rtol=0, atol=0)


def _models() -> list:
    # SE-ResNet-50 traces and scripts through the graphs of the blocks' own checks (SE among
    # them), SE-ResNet-56 and BoTNet-50's ImageNet ResNet; at about 15 CPU-seconds for the two
    # checks on the 2-core AVX2 host it goes to heavy with the other ImageNet models
    return tiered(visattn.list_models(), keep=REPRESENTATIVE_MODELS - {"se_resnet50"})


def _model(name: str) -> tuple[nn.Module, torch.Tensor]:
    """The model with random weights and batch-norm statistics calibrated on random batches
    (random statistics let 56 layers of lambda, halo, MHSA, LSK or BAT blocks overflow to
    NaN, which no comparison can check), and an input; its output is finite."""
    model = randomize(visattn.create_model(name, num_classes=10), 1)
    c, h, w = model.default_input_size
    calibrate_batch_norm(model, (8, c, h, w))
    x = torch.randn(2, c, h, w)
    with torch.no_grad():
        assert torch.isfinite(model(x)).all(), f"{name}: the calibrated model is not finite"
    return model, x


def _stages(model: nn.Module) -> list[str]:
    names = getattr(model, "stage_names", None)
    if names is not None:
        return list(names)
    return [f"stages.{i}" for i in range(len(model.stages))]  # ResidualAttentionNet


@pytest.mark.parametrize("name", _models())
def test_named_model_traces_and_feature_extraction_works(name: str) -> None:
    """symbolic_trace gives the eager logits; create_feature_extractor returns every stage's
    output (the last graph node inside each stage) equal to the stage module's output."""
    model, x = _model(name)
    gm = torch.fx.symbolic_trace(model)
    nodes = get_graph_node_names(model)[1]
    stages = _stages(model)
    last = {s: [n for n in nodes if n == s or n.startswith(s + ".")][-1] for s in stages}
    extractor = create_feature_extractor(
        model, return_nodes={**{last[s]: s for s in stages}, nodes[-1]: "out"}
    )
    seen: dict[str, torch.Tensor] = {}
    hooks = [
        model.get_submodule(s).register_forward_hook(lambda m, i, o, s=s: seen.__setitem__(s, o))
        for s in stages
    ]
    with torch.no_grad():
        ref = model(x)
        for h in hooks:
            h.remove()
        torch.testing.assert_close(gm(x), ref, rtol=0, atol=0)
        feats = extractor(x)
    torch.testing.assert_close(feats["out"], ref, rtol=0, atol=0)
    for s in stages:
        torch.testing.assert_close(feats[s], seen[s], rtol=0, atol=0)


@pytest.mark.parametrize("name", _models())
def test_named_model_compiles_with_torchscript_and_matches_eager(name: str) -> None:
    model, x = _model(name)
    scripted = _script(model, name)
    with torch.no_grad():
        got, ref = scripted(x), model(x)
        if not torch.allclose(got, ref, rtol=1e-5, atol=1e-5):
            # other float32 kernels through 27 attention blocks of random weights (halo: 1e-2,
            # MHSA: 8e-4 on outputs of about 1): the rounding bound, the scripted model no
            # farther from a float64 run than twice the eager float32 result is
            exact = copy.deepcopy(model).double()(x.double())
            assert_within_rounding(got, ref, exact, 1e-5, f"{name} scripted")
    # scripting does not change the eager model's structure
    stage = getattr(model, "layer1", None)
    if stage is not None:
        assert len(stage) == len(list(stage)) and not isinstance(stage[-1], nn.Identity)


@pytest.mark.parametrize("source", ["torchvision", "timm"])
def test_injected_torchvision_and_timm_resnets_script_and_trace(source: str) -> None:
    if source == "torchvision":
        model = pytest.importorskip("torchvision.models").resnet18(num_classes=5)
    else:
        model = pytest.importorskip("timm").create_model("resnet18", num_classes=5)
    visattn.inject(
        model,
        [
            {"name": "cbam", "position": "inner"},
            {"name": "gsop", "position": "stage", "stages": [2]},
        ],
    )
    randomize(model, 1).eval()
    x = torch.randn(2, 3, 64, 64)
    with torch.no_grad():
        ref = model(x)
        torch.testing.assert_close(torch.jit.script(model)(x), ref, rtol=1e-5, atol=1e-5)
        torch.testing.assert_close(torch.fx.symbolic_trace(model)(x), ref, rtol=0, atol=0)
    assert len(model.layer2) == 2  # still the two residual blocks, slot aside


# Placements by pattern (forward hooks and pre-hooks that call the block, a child of the hooked
# module) in torchvision and timm networks: timm's EfficientNet mixes DepthwiseSeparableConv and
# InvertedResidual; CBAM goes through the channel-pooling path that tracing must not record as a
# Python call; `before` uses pre-hooks. (Open: timm's ConvNeXtBlock with `position: standard`, a
# pre-hook on its nn.Identity drop_path, is refused by torch.jit.script: "expected exactly 2
# inputs but it had 3"; an error, not a scripted model without its blocks.)
PATTERN_CASES = tiered(
    [
        (
            "tv:mobilenet_v3_small",
            {"name": "se", "after": ["InvertedResidual"], "position": "standard"},
        ),
        (
            "timm:efficientnet_b0",
            {
                "name": "cbam",
                "after": ["DepthwiseSeparableConv", "InvertedResidual"],
                "position": "standard",
            },
        ),
        ("tv:mobilenet_v3_small", {"name": "eca", "before": "features.*"}),
    ],
    keep=lambda case: case[0] == "tv:mobilenet_v3_small",
)


def _without_hooks(model: nn.Module) -> nn.Module:
    """A copy of ``model`` whose forward hooks and pre-hooks are gone: the host network alone,
    its blocks idle children."""
    bare = copy.deepcopy(model)
    for m in bare.modules():
        m._forward_hooks.clear()
        m._forward_pre_hooks.clear()
    return bare


def _reloaded(module: torch.jit.ScriptModule) -> torch.jit.ScriptModule:
    buf = io.BytesIO()
    torch.jit.save(module, buf)
    buf.seek(0)
    return torch.jit.load(buf)


@pytest.mark.parametrize(("name", "placement"), PATTERN_CASES, ids=lambda v: str(v)[:40])
def test_pattern_injected_network_scripts_and_traces_with_its_attention(
    name: str, placement: dict
) -> None:
    """torch.jit.script (which compiles the hooks), torch.jit.trace (with its own check that two
    traces agree) and torch.fx.symbolic_trace all give the injected model's output, not the host
    network's, and the compiled programs keep it through save and load."""
    model = visattn.create_model(name, num_classes=5, attention=placement, input_size=(3, 64, 64))
    randomize(model, 1).eval()
    x = torch.randn(2, 3, 64, 64)
    with torch.no_grad():
        ref = model(x)
        bare = _without_hooks(model)(x)
    assert (bare - ref).abs().max() > 1e-3  # the attention changes the output: it can be missed
    scripted = torch.jit.script(model)
    traced = torch.jit.trace(model, x)  # parameters require grad here, as in training
    gm = torch.fx.symbolic_trace(model)
    with torch.no_grad():
        for out in (scripted(x), traced(x), _reloaded(scripted)(x), _reloaded(traced)(x)):
            torch.testing.assert_close(out, ref, rtol=1e-5, atol=1e-5)
        torch.testing.assert_close(gm(x), ref, rtol=0, atol=0)
        y = torch.randn(3, 3, 48, 48)  # the scripted program is not tied to one input size
        torch.testing.assert_close(scripted(y), model(y), rtol=1e-5, atol=1e-5)
