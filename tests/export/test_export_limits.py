"""Export refuses what cannot be, before any work, naming the valid range: an opset the
installed exporter cannot write, an image size above the training limit, a class count below 1."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from visattn import create_model
from visattn.__main__ import main
from visattn.constants import MAX_IMAGE_SIZE
from visattn.export import export_onnx, opset_range

pytest.importorskip("onnx")


def _refused(capsys: pytest.CaptureFixture, *args: str) -> str:
    assert main(["export", "--model", "resnet20_cifar", *args]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and "Traceback" not in err
    return err


@pytest.mark.parametrize("opset", [999, 0, 6])
def test_an_opset_the_exporter_cannot_write_is_refused_with_the_range(
    tmp_path: Path, capsys: pytest.CaptureFixture, opset: int
) -> None:
    out = tmp_path / "m.onnx"
    err = _refused(capsys, "--out", str(out), "--opset", str(opset))
    lo, hi = opset_range("dynamo" if opset >= 18 else "torchscript")
    assert f"opset {opset}" in err and f"[{lo}, {hi}]" in err
    assert not out.exists()


def test_opset_ranges_are_those_of_the_installed_exporters() -> None:
    import onnx

    dyn, ts = opset_range("dynamo"), opset_range("torchscript")
    assert dyn[0] == 18 and ts[0] <= 9 and dyn[1] <= onnx.defs.onnx_opset_version()
    assert ts[1] >= 17 and dyn[1] >= 18


def test_an_image_size_over_the_training_limit_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    err = _refused(capsys, "--out", str(tmp_path / "m.onnx"), "--image-size", "100000")
    assert f"[1, {MAX_IMAGE_SIZE}]" in err
    with pytest.raises(ValueError, match=f"in \\[1, {MAX_IMAGE_SIZE}\\]"):
        export_onnx(create_model("resnet20_cifar"), tmp_path / "n.onnx", (3, 5000, 32))


@pytest.mark.parametrize("n", ["0", "-3"])
def test_a_class_count_below_one_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture, n: str
) -> None:
    err = _refused(capsys, "--out", str(tmp_path / "m.onnx"), "--num-classes", n)
    assert "--num-classes must be an integer from 1 to 1,000,000" in err


def test_an_opset_in_range_is_written(tmp_path: Path) -> None:
    report = export_onnx(
        torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3), torch.nn.ReLU()),
        tmp_path / "m.onnx",
        (3, 8, 8),
        opset=opset_range("dynamo")[0],
        check=False,
    )
    assert report.opset == opset_range("dynamo")[0]


def test_the_onnx_file_names_its_batch_axis_and_records_its_metadata(tmp_path: Path) -> None:
    """The batch axis is ``batch`` (not the exporter's ``s77``), and metadata_props hold the
    version, model name, its attention placements, input size and the caller's mean/std/class
    names."""
    import onnx

    net = create_model("resnet20_cifar", num_classes=3, attention={"name": "eca", "stages": [3]})
    meta = {"mean": [0.5, 0.5, 0.5], "std": [0.25, 0.25, 0.25], "class_names": ["a", "b", "c"]}
    path = tmp_path / "m.onnx"
    export_onnx(net, path, (3, 32, 32), dynamic_size=True, metadata=meta)
    proto = onnx.load(str(path))
    dims = [d.dim_param or d.dim_value for d in proto.graph.input[0].type.tensor_type.shape.dim]
    assert dims == ["batch", 3, "height", "width"]
    out = [d.dim_param or d.dim_value for d in proto.graph.output[0].type.tensor_type.shape.dim]
    assert out == ["batch", 3]
    props = {p.key: p.value for p in proto.metadata_props}
    assert props["model_name"] == "resnet20_cifar" and props["input_size"] == "3,32,32"
    # the block the name does not say (issue 62: the metadata named resnet20_cifar alone)
    (placed,) = json.loads(props["attention"])
    assert placed["name"] == "eca" and placed["stages"] == [3]
    assert json.loads(props["class_names"]) == ["a", "b", "c"]
    assert json.loads(props["mean"]) == [0.5, 0.5, 0.5] and props["visattn_version"]
    import onnxruntime as ort

    sess = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    assert sess.get_inputs()[0].shape[0] == "batch"
    assert sess.get_modelmeta().custom_metadata_map["input_size"] == "3,32,32"


@pytest.mark.parametrize(
    "bad", [{"atol": float("nan")}, {"rtol": float("nan")}, {"atol": float("inf")}, {"rtol": -1e-3}]
)
def test_tolerances_that_would_pass_anything_are_refused_before_exporting(tmp_path, bad) -> None:
    """P7: ``--atol nan --rtol nan`` printed "ok": NaN compares false, so no difference fails."""
    import visattn

    out = tmp_path / "m.onnx"
    with pytest.raises(ValueError, match="must be a finite number >= 0"):
        visattn.export_onnx(visattn.create_block("se", 32), out, input_size=(32, 4, 4), **bad)
    assert not out.exists()


def test_non_finite_outputs_fail_the_check_instead_of_passing_it(tmp_path) -> None:
    """P7: a network whose outputs are NaN passed with "max |diff| = 0"."""
    import torch

    import visattn
    from visattn.export import ExportError

    net = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 1), torch.nn.Flatten())
    with torch.no_grad():
        net[0].weight.fill_(float("nan"))
    with pytest.raises(ExportError, match="non-finite outputs"):
        visattn.export_onnx(net, tmp_path / "nan.onnx", input_size=(3, 4, 4))


def test_a_model_built_in_python_records_its_pretrained_cfg_normalisation(tmp_path: Path) -> None:
    """Trial of round 7: ``export_onnx(model, ...)`` on a model built in Python wrote no mean or
    std, though its ``pretrained_cfg`` has them; the caller's ``metadata`` still wins."""
    import onnx

    net = create_model("resnet20_cifar", num_classes=3)
    cfg = net.pretrained_cfg
    path = tmp_path / "m.onnx"
    export_onnx(net, path, (3, 16, 16), check=False)
    props = {p.key: p.value for p in onnx.load(str(path)).metadata_props}
    assert json.loads(props["mean"]) == pytest.approx(list(cfg["mean"]))
    assert json.loads(props["std"]) == pytest.approx(list(cfg["std"]))
    export_onnx(net, path, (3, 16, 16), check=False, metadata={"mean": [0.5, 0.5, 0.5]})
    props = {p.key: p.value for p in onnx.load(str(path)).metadata_props}
    assert json.loads(props["mean"]) == [0.5, 0.5, 0.5]
