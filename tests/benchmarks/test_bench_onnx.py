"""``bench_onnx.py``: one small model's run exports, matches onnxruntime and writes its row, and
the markdown beside the CSV names the command, the machine and the settings; an unknown model
stops the run before any export."""

from __future__ import annotations

import pytest
from helpers.benchmarks import benchmark_module
from helpers.files import read_csv

pytest.importorskip("onnxruntime")


@pytest.fixture(scope="module")
def bench():
    yield from benchmark_module("bench_onnx")


def test_one_model_writes_its_row_and_the_markdown_beside_it(bench, tmp_path) -> None:
    out = tmp_path / "onnx.csv"
    argv = ["--models", "resnet20_cifar", "--warmup", "1", "--repeats", "1", "--min-sample", "0"]
    assert bench.main([*argv, "--out", str(out)]) == 0
    (row,) = read_csv(out)
    assert list(row) == list(bench.COLUMNS) and row["model"] == "resnet20_cifar"
    assert not row["error"] and float(row["eager_ms"]) > 0 and float(row["onnxruntime_ms"]) > 0
    assert float(row["ratio_ort_vs_eager"]) == pytest.approx(
        float(row["onnxruntime_ms"]) / float(row["eager_ms"]), rel=1e-2
    )
    md = out.with_suffix(".md").read_text()
    assert md.startswith("# ONNX Runtime vs eager PyTorch")
    assert "`python benchmarks/bench_onnx.py --models resnet20_cifar" in md and "- cpu:" in md
    assert "repeats 1" in md and md.count("| resnet20_cifar |") == 1


def test_an_unknown_model_stops_the_run_before_any_export(bench, tmp_path) -> None:
    with pytest.raises(KeyError, match="did you mean 'resnet20_cifar'"):
        bench.main(["--models", "resnet20_cifarr", "--out", str(tmp_path / "x.csv")])
    assert not (tmp_path / "x.csv").exists()
