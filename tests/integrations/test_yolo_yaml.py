"""visattn blocks as rows of Ultralytics YOLO model files (``VisAttn``), built offline from the
bundled yolov8n / yolo11n dicts: channels at every width scale, routing after inserted rows,
loss backward, fuse, save / reload through ``YOLO(path)`` and ONNX export."""

from __future__ import annotations

import copy
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import yaml
from helpers.yolo import head_outputs

pytest.importorskip("ultralytics")

from ultralytics import YOLO
from ultralytics.cfg import get_cfg
from ultralytics.nn import tasks
from ultralytics.nn.modules import Conv
from ultralytics.nn.tasks import DetectionModel, yaml_model_load

import visattn
from visattn.integrations import yolo

pytestmark = pytest.mark.xdist_group("yolo")
ROOT = Path(__file__).resolve().parents[2]
#: the P3, P4, P5 outputs the head reads: yolov8n (C2f, C2f, SPPF), yolo11n (C3k2, C3k2, C2PSA)
HEAD_INPUTS = {"yolov8n.yaml": [4, 6, 9], "yolo11n.yaml": [4, 6, 10]}
SIZE = 64


@pytest.fixture(scope="module", autouse=True)
def _registered() -> None:
    yolo.register()


def _bundled(name: str) -> dict:
    return yaml_model_load(name)


def _build(cfg: dict, scale: str = "n") -> DetectionModel:
    return DetectionModel({**cfg, "scale": scale}, verbose=False)


@pytest.fixture(scope="module")
def v8_cbam() -> DetectionModel:
    return _build(
        yolo.insert_attention(_bundled("yolov8n.yaml"), HEAD_INPUTS["yolov8n.yaml"], "cbam")
    )


# ---------------------------------------------------------------- insert_attention


def test_insert_attention_points_every_reference_at_the_same_layer_or_its_block() -> None:
    cfg = _bundled("yolov8n.yaml")
    old = cfg["backbone"] + cfg["head"]
    new_cfg = yolo.insert_attention(cfg, [4, 9], "se", {"reduction": 8})
    new = new_cfg["backbone"] + new_cfg["head"]
    assert len(new) == len(old) + 2
    assert len(new_cfg["backbone"]) == len(cfg["backbone"]) + 2  # both after backbone layers
    # which old layer each new row is (None: an inserted block)
    kept = iter(range(len(old)))
    origin = [None if r[2] == "VisAttn" else next(kept) for r in new]
    assert [new[i] for i in (5, 11)] == [[-1, 1, "VisAttn", ["se", {"reduction": 8}]]] * 2

    def refs(f, i):
        return [(x if x >= 0 else i + x) for x in (f if isinstance(f, list) else [f])]

    for i, row in enumerate(new):
        if origin[i] is None:
            assert origin[i - 1] in (4, 9) and row[0] == -1
            continue
        j = origin[i]
        for got, want in zip(refs(row[0], i), refs(old[j][0], j)):
            if want < 0:  # the first layer reads the image
                assert got == want == -1
                continue
            # the block's output replaces its layer's: a reference to 4 or 9 reads the block
            expected_origin = None if want in (4, 9) else want
            assert origin[got] == expected_origin
            if expected_origin is None:
                assert origin[got - 1] == want
    assert cfg == _bundled("yolov8n.yaml")  # the input dict is left as it was


@pytest.mark.parametrize("after", [[23], [3, 3], [-1], ["4"], [1.0], [3, "4"], 22])
def test_insert_attention_refuses_indices_that_are_not_inner_layers(after) -> None:
    with pytest.raises(ValueError, match=r"distinct layer indices in 0\.\.21"):
        yolo.insert_attention(_bundled("yolov8n.yaml"), after, "se")


def test_insert_attention_refuses_an_unknown_block_with_close_matches() -> None:
    with pytest.raises(KeyError, match="cbam"):
        yolo.insert_attention(_bundled("yolov8n.yaml"), [4], "cbma")


# ---------------------------------------------------------------- channels and scales


@pytest.mark.parametrize("file", list(HEAD_INPUTS))
@pytest.mark.parametrize("scale", ["n", "s"])
def test_visattn_rows_take_the_previous_layers_channels_at_every_scale(file, scale) -> None:
    model = _build(yolo.insert_attention(_bundled(file), HEAD_INPUTS[file], "cbam"), scale)
    blocks = [m for m in model.model if isinstance(m, yolo.VisAttn)]
    assert [m.i for m in blocks] == ([5, 8, 12] if file == "yolov8n.yaml" else [5, 8, 13])
    seen: dict[int, tuple[int, ...]] = {}
    hooks = [
        model.model[m.i - 1].register_forward_hook(
            lambda mod, inp, out, i=m.i: seen.__setitem__(i, tuple(out.shape))
        )
        for m in blocks
    ]
    with torch.no_grad():
        model.eval()(torch.rand(1, 3, SIZE, SIZE))
    for h in hooks:
        h.remove()
    width = {"n": 0.25, "s": 0.5}[scale]
    for m in blocks:
        channels = seen[m.i][1]
        ref = visattn.create_block("cbam", channels)
        assert m.np == sum(p.numel() for p in ref.parameters()) > 0
        assert [p.shape for p in m.block.parameters()] == [p.shape for p in ref.parameters()]
        assert (m.f, m.type) == (-1, "visattn.integrations.yolo.VisAttn")
    # the widths the file gives those layers (yolov8: 256, 512, 1024; yolo11: 512, 512, 1024)
    # times the scale's width
    rows = _bundled(file)["backbone"]
    assert [seen[m.i][1] for m in blocks] == [rows[k][3][0] * width for k in HEAD_INPUTS[file]]


def test_yaml_options_reach_the_block_and_identity_init_keeps_a_trained_models_outputs() -> None:
    cfg = _bundled("yolo11n.yaml")
    plain = _build(cfg)
    with torch.no_grad():  # a model that is not at its initialisation
        for p in plain.parameters():
            p.add_(0.02 * torch.randn_like(p))
        for m in plain.modules():
            if isinstance(m, torch.nn.BatchNorm2d):
                m.running_mean.uniform_(-0.1, 0.1)
                m.running_var.uniform_(0.5, 1.5)
    after = HEAD_INPUTS["yolo11n.yaml"]
    model = _build(yolo.insert_attention(cfg, after, "cbam", {"reduction": 4, "init": "identity"}))

    def new_index(k: int) -> int:
        return k + sum(a < k for a in after)

    state = {}
    for key, value in plain.state_dict().items():
        _, k, rest = key.split(".", 2)
        state[f"model.{new_index(int(k))}.{rest}"] = value
    missing, unexpected = model.load_state_dict(state, strict=False)
    assert not unexpected
    assert missing and all(".block." in k for k in missing)
    assert (
        model.model[5].block.channel.fc1.out_channels
        == model.model[5].block.channel.fc1.in_channels // 4
    )
    x = torch.rand(2, 3, SIZE, SIZE)
    for got, want in zip(head_outputs(model, x), head_outputs(plain, x)):
        torch.testing.assert_close(got, want, rtol=0, atol=0)


# ---------------------------------------------------------------- training, fuse, save, export


def _batch(n: int = 2) -> dict[str, torch.Tensor]:
    """A batch as ultralytics' detection loss reads it: images, and one box per image
    (``batch_idx``, class, normalised ``xywh``)."""
    return {
        "img": torch.rand(n, 3, SIZE, SIZE),
        "batch_idx": torch.arange(n, dtype=torch.float32),
        "cls": torch.tensor([[1.0], [3.0]])[:n],
        "bboxes": torch.tensor([[0.5, 0.5, 0.3, 0.3], [0.4, 0.6, 0.2, 0.5]])[:n],
    }


@pytest.mark.parametrize("file", list(HEAD_INPUTS))
def test_detection_loss_backward_reaches_every_block(file) -> None:
    model = _build(yolo.insert_attention(_bundled(file), HEAD_INPUTS[file], "cbam"))
    model.args = get_cfg()  # the loss reads its gains (box, cls, dfl) from the model's args
    model.train()
    loss, items = model.loss(_batch())
    assert torch.isfinite(loss).all() and loss.sum() > 0 and set(items) >= {"box_loss", "cls_loss"}
    loss.sum().backward()
    for m in model.model:
        if isinstance(m, yolo.VisAttn):
            assert any(p.grad is not None and p.grad.abs().sum() > 0 for p in m.parameters())


def test_fuse_folds_the_convs_and_keeps_the_outputs(v8_cbam) -> None:
    model = copy.deepcopy(v8_cbam).eval()
    x = torch.rand(1, 3, SIZE, SIZE)
    with torch.no_grad():
        before = model(x)[0]
        model.fuse(verbose=False)
        after = model(x)[0]
    convs = [m for m in model.modules() if isinstance(m, Conv)]
    assert convs and not any(hasattr(m, "bn") for m in convs)
    assert sum(isinstance(m, yolo.VisAttn) for m in model.model) == 3
    torch.testing.assert_close(after, before, rtol=1e-4, atol=1e-4)


def _saved(tmp_path: Path) -> tuple[YOLO, Path]:
    """A model built by ``YOLO`` from a YAML file with two ``VisAttn`` rows, saved by ``YOLO.save``
    (a dict with ``model`` in half precision, ``date``, ``version``, ...), and its file."""
    cfg = yolo.insert_attention(_bundled("yolov8n.yaml"), [4, 9], "eca")
    file = tmp_path / "yolov8n-eca.yaml"  # scale n, guessed from the name as for bundled files
    file.write_text(yaml.safe_dump({k: cfg[k] for k in ("nc", "scales", "backbone", "head")}))
    model = YOLO(str(file))
    assert sum(isinstance(m, yolo.VisAttn) for m in model.model.model) == 2
    pt = tmp_path / "yolov8n-eca.pt"
    model.save(pt)
    return model, pt


def _as_saved(model: YOLO, x: torch.Tensor) -> torch.Tensor:
    with torch.no_grad():  # the saved copy is in half precision, as ultralytics saves
        return copy.deepcopy(model.model).half().float().eval()(x)[0]


def test_save_and_reload_through_yolo(tmp_path) -> None:
    model, pt = _saved(tmp_path)
    x = torch.rand(1, 3, SIZE, SIZE)
    loaded = YOLO(str(pt)).model.float().eval()
    assert [r for r in loaded.yaml["backbone"] if r[2] == "VisAttn"] == [
        [-1, 1, "VisAttn", ["eca"]]
    ] * 2  # the rows as written
    with torch.no_grad():
        torch.testing.assert_close(loaded(x)[0], _as_saved(model, x), rtol=1e-4, atol=1e-4)


_RELOAD = """
import json, sys, torch
from ultralytics import YOLO
model = YOLO(sys.argv[1]).model.float().eval()
with torch.no_grad():
    y = model(torch.load(sys.argv[2]))[0]
print(json.dumps({"types": sorted({type(m).__module__ for m in model.modules()}),
                  "y": y.flatten().tolist()}))
"""


def test_a_saved_model_reloads_in_a_process_that_never_registered(tmp_path) -> None:
    model, pt = _saved(tmp_path)
    x = torch.rand(1, 3, SIZE, SIZE)
    torch.save(x, tmp_path / "x.pt")
    out = subprocess.run(
        [sys.executable, "-c", _RELOAD, str(pt), str(tmp_path / "x.pt")],
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        check=True,
    )
    got = json.loads(out.stdout.strip().splitlines()[-1])
    assert "visattn.integrations.yolo" in got["types"]
    want = _as_saved(model, x)
    torch.testing.assert_close(torch.tensor(got["y"]).view_as(want), want, rtol=1e-4, atol=1e-4)


def _exportable(model: DetectionModel) -> DetectionModel:
    model = copy.deepcopy(model).eval()
    model.model[-1].export = True  # the head returns its one decoded tensor, as for export
    return model


def test_onnx_export_through_visattn_matches_in_onnxruntime(v8_cbam, tmp_path) -> None:
    report = visattn.export_onnx(
        _exportable(v8_cbam), tmp_path / "y.onnx", (3, SIZE, SIZE), exporter="torchscript", opset=17
    )
    assert report.max_abs_diff <= 1e-3 and report.checked


# ~100 s on 2 cores; the TorchScript exporter's test stays in the default run
@pytest.mark.heavy
def test_onnx_export_with_the_dynamo_exporter(v8_cbam, tmp_path) -> None:
    report = visattn.export_onnx(_exportable(v8_cbam), tmp_path / "y.onnx", (3, SIZE, SIZE))
    assert report.exporter == "dynamo" and report.max_abs_diff <= 1e-3


# ---------------------------------------------------------------- registration and errors


def test_register_twice_wraps_parse_model_once() -> None:
    wrapped = tasks.parse_model
    yolo.register()
    assert tasks.parse_model is wrapped and tasks.VisAttn is yolo.VisAttn


def _with_row(row: list) -> dict:
    cfg = _bundled("yolov8n.yaml")
    cfg["backbone"].insert(5, row)
    return cfg


@pytest.mark.parametrize(
    ("row", "error", "match"),
    [
        ([-1, 1, "VisAttn", ["cbma"]], KeyError, "did you mean"),
        ([4, 1, "VisAttn", ["cbam"]], ValueError, "layer 5 .*'from' must be -1"),
        ([-1, 1, "VisAttn", [64, "cbam"]], TypeError, "layer 5 .*first argument is a block name"),
        ([-1, 1, "VisAttn", []], ValueError, r"layer 5 .*\[block\] or \[block, \{options\}\]"),
        ([-1, 1, "VisAttn", ["cbam", 8]], TypeError, "options must be a mapping"),
        ([-1, 1, "VisAttn", ["se", {"reduce": 4}]], TypeError, r"layer 5 .*'se'.*reduce"),
        ([-1, 1, "VisAttn", ["cbam", {"channels": 64}]], TypeError, r"layer 5 .*'channels'"),
    ],
)
def test_malformed_rows_are_refused_naming_the_layer(row, error, match) -> None:
    with pytest.raises(error, match=match):
        _build(_with_row(row))


def test_block_names_that_are_python_keywords_survive_parse_model() -> None:
    model = _build(yolo.insert_attention(_bundled("yolov8n.yaml"), [2], "nonlocal"))
    assert model.model[3].block_name == "nonlocal"
