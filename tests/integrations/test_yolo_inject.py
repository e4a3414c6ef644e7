"""``visattn.inject`` into Ultralytics ``DetectionModel``s built offline from the bundled
yolov8n / yolo11n files: by class (C2f, C3k2, SPPF, C2PSA) or by layer path (``model.4``),
identity at insertion (eval and train-mode head outputs), ultralytics' routing attributes kept,
loss backward, ``fuse()``, save / reload through ``YOLO(path)`` and ONNX export."""

from __future__ import annotations

import copy

import pytest
import torch
from helpers.yolo import head_outputs

pytest.importorskip("ultralytics")

from helpers.weights import randomize
from ultralytics import YOLO
from ultralytics.cfg import get_cfg
from ultralytics.nn.modules import Conv
from ultralytics.nn.tasks import DetectionModel, yaml_model_load

import visattn
from visattn.models.sites import run_after

pytestmark = pytest.mark.xdist_group("yolo")
SIZE = 64
INPUT = (3, SIZE, SIZE)
#: the block classes of each file users name (yolo11's C2PSA holds attention of its own)
CLASSES = {"yolov8n.yaml": ["C2f", "SPPF"], "yolo11n.yaml": ["C3k2", "SPPF", "C2PSA"]}


def _trained(file: str) -> DetectionModel:
    """The bundled model with random (not initial) norm weights and statistics."""
    torch.manual_seed(0)
    return randomize(DetectionModel(yaml_model_load(file), verbose=False), 0, norms_only=True)


@pytest.fixture(scope="module")
def trained() -> dict[str, DetectionModel]:
    return {file: _trained(file) for file in CLASSES}


def _routing(model: DetectionModel) -> list[tuple]:
    return [(m.i, m.f, m.type, m.np, id(m)) for m in model.model]


PLACEMENTS = [
    ("yolov8n.yaml", {"name": "cbam", "after": CLASSES["yolov8n.yaml"]}),
    ("yolo11n.yaml", {"name": "cbam", "after": CLASSES["yolo11n.yaml"]}),
    ("yolov8n.yaml", {"name": "se", "after": "model.4"}),
    ("yolo11n.yaml", {"name": "eca", "after": ["model.4", "model.6", "model.10"]}),
    ("yolo11n.yaml", {"name": "coord", "before": ["C3k2"]}),
]


@pytest.mark.parametrize(("file", "placement"), PLACEMENTS)
def test_identity_insertion_keeps_every_output_and_the_routing(trained, file, placement) -> None:
    plain = copy.deepcopy(trained[file])
    model = copy.deepcopy(trained[file])
    routing = _routing(model)
    paths = visattn.inject(model, {**placement, "init": "identity"}, input_size=INPUT)
    assert paths and _routing(model) == routing  # the same layer objects, i, f, type, np
    x = torch.rand(2, *INPUT)
    for got, want in zip(head_outputs(model, x), head_outputs(plain, x), strict=True):
        torch.testing.assert_close(got, want, rtol=0, atol=0)
    # the bundled model's weights still load; only the blocks' keys are new
    missing, unexpected = model.load_state_dict(trained[file].state_dict(), strict=False)
    assert not unexpected
    assert missing and {k.rsplit(".attn_", 1)[0] + ".attn_" for k in missing} <= {
        p.rsplit(".attn_", 1)[0] + ".attn_" for p in paths
    }


def test_by_class_matches_the_top_level_layers_of_that_class(trained) -> None:
    model = copy.deepcopy(trained["yolo11n.yaml"])
    plan = visattn.inject(model, {"name": "se", "after": ["C3k2"]}, dry_run=True, input_size=INPUT)
    want = [f"model.{m.i}.attn_after" for m in model.model if type(m).__name__ == "C3k2"]
    assert sorted(b.path for b in plan.blocks) == sorted(want) and len(want) == 8
    assert not any(isinstance(m, visattn.block_info("se").cls) for m in model.modules())


@pytest.fixture(scope="module")
def injected(trained) -> DetectionModel:
    """yolov8n with CBAM (its own initialisation) after every C2f and SPPF."""
    model = copy.deepcopy(trained["yolov8n.yaml"])
    visattn.inject(model, {"name": "cbam", "after": CLASSES["yolov8n.yaml"]}, input_size=INPUT)
    return model


def _eval(model: DetectionModel, x: torch.Tensor) -> torch.Tensor:
    with torch.no_grad():
        return model.eval()(x)[0]


def test_the_blocks_change_the_output_at_their_own_initialisation(trained, injected) -> None:
    """The checks below would not notice a block that no longer runs otherwise."""
    x = torch.rand(1, *INPUT)
    assert not torch.allclose(_eval(injected, x), _eval(trained["yolov8n.yaml"], x))


def test_detection_loss_backward_reaches_every_block(injected) -> None:
    model = copy.deepcopy(injected)
    model.args = get_cfg()
    model.train()
    batch = {
        "img": torch.rand(2, *INPUT),
        "batch_idx": torch.tensor([0.0, 1.0]),
        "cls": torch.tensor([[1.0], [3.0]]),
        "bboxes": torch.tensor([[0.5, 0.5, 0.3, 0.3], [0.4, 0.6, 0.2, 0.5]]),
    }
    loss, _ = model.loss(batch)
    loss.sum().backward()
    blocks = [m.attn_after for m in model.model if hasattr(m, "attn_after")]
    assert len(blocks) == 9
    for block in blocks:
        assert any(p.grad is not None and p.grad.abs().sum() > 0 for p in block.parameters())


def test_fuse_keeps_the_blocks_and_thehead_outputs(injected) -> None:
    model = copy.deepcopy(injected)
    x = torch.rand(1, *INPUT)
    before = _eval(model, x)
    model.fuse(verbose=False)
    assert not any(hasattr(m, "bn") for m in model.modules() if isinstance(m, Conv))
    assert sum(run_after in m._forward_hooks.values() for m in model.model) == 9
    torch.testing.assert_close(_eval(model, x), before, rtol=1e-4, atol=1e-4)


def test_save_and_reload_through_yolo(tmp_path) -> None:
    yolo = YOLO("yolov8n.yaml")  # the bundled file, offline
    randomize(yolo.model, 0, norms_only=True)
    paths = visattn.inject(yolo.model, {"name": "cbam", "after": ["C2f"]}, input_size=INPUT)
    assert len(paths) == 8  # 4 in the backbone, 4 in the head
    pt = tmp_path / "yolov8n-cbam.pt"
    yolo.save(pt)
    loaded = YOLO(str(pt)).model.float()
    assert sum(run_after in m._forward_hooks.values() for m in loaded.model) == 8
    assert all(isinstance(loaded.get_submodule(p), visattn.block_info("cbam").cls) for p in paths)
    x = torch.rand(1, *INPUT)
    want = _eval(copy.deepcopy(yolo.model).half().float(), x)  # saved in half, as ultralytics does
    torch.testing.assert_close(_eval(loaded, x), want, rtol=1e-4, atol=1e-4)


def _exportable(model: DetectionModel) -> DetectionModel:
    model = copy.deepcopy(model).eval()
    model.model[-1].export = True  # the head returns its one decoded tensor, as for export
    return model


def test_onnx_export_through_visattn_matches_in_onnxruntime(injected, tmp_path) -> None:
    report = visattn.export_onnx(
        _exportable(injected), tmp_path / "y.onnx", INPUT, exporter="torchscript", opset=17
    )
    assert report.max_abs_diff <= 1e-3 and report.checked


# 136-316 s on 2 cores; the TorchScript exporter's test above stays in the default run
@pytest.mark.heavy
def test_onnx_export_with_the_dynamo_exporter(injected, tmp_path) -> None:
    report = visattn.export_onnx(_exportable(injected), tmp_path / "y.onnx", INPUT)
    assert report.exporter == "dynamo" and report.max_abs_diff <= 1e-3


@pytest.mark.parametrize(
    ("block", "options", "error", "message"),
    [
        ("sse", None, KeyError, r"layer 7 \(VisAttn\('sse'\)\): unknown block 'sse'; did you mean"),
        ("se", [8], TypeError, r"layer 7 \(VisAttn\('se'\)\): options must be a mapping"),
    ],
)
def test_a_bad_row_names_its_layer_index(block, options, error, message) -> None:
    """P20: an unknown block or options that are not a mapping did not name the layer."""
    from visattn.integrations.yolo import VisAttn

    with pytest.raises(error, match=message):
        VisAttn(16, block, options, layer=7)
