"""``bench_backbones.py``: one family's smallest run writes the documented CSV, with the bare
network as the reference row and the overheads computed from the counts; an unknown family or
block stops the run before anything is measured."""

from __future__ import annotations

import pytest
from helpers.benchmarks import benchmark_module
from helpers.files import read_csv

import visattn
from visattn.blocks.registry import UnknownBlockError


@pytest.fixture(scope="module")
def bench():
    yield from benchmark_module("bench_backbones")


def test_smallest_run_writes_the_bare_row_and_the_overheads(bench, tmp_path) -> None:
    out = tmp_path / "b.csv"
    args = ["--families", "tv:mobilenet_v3_small", "--blocks", "se", "--quick", "--batch", "1"]
    assert bench.main([*args, "--out", str(out)]) == 0
    rows = read_csv(out)
    assert list(rows[0]) == bench.COLUMNS
    bare, se = rows
    assert (bare["block"], bare["sites"], float(bare["throughput_ratio"])) == ("none", "0", 1.0)
    # one SE per inverted residual block of MobileNetV3-Small, each adding parameters
    net = visattn.create_model("tv:mobilenet_v3_small", num_classes=1000)
    blocks = [m for m in net.modules() if type(m).__name__ == "InvertedResidual"]
    assert int(se["sites"]) == len(blocks) > 0
    assert int(se["params"]) > int(bare["params"]) and int(se["macs"]) > int(bare["macs"])
    assert float(se["params_overhead"]) == pytest.approx(
        int(se["params"]) / int(bare["params"]) - 1, rel=1e-9
    )
    assert (tmp_path / "b.md").read_text().count("| tv:mobilenet_v3_small |") == 2


def test_unknown_family_or_block_stops_the_run(bench) -> None:
    with pytest.raises(SystemExit):
        bench.main(["--families", "tv:mobilenet_v9"])
    with pytest.raises(UnknownBlockError, match="se"):
        bench.main(["--families", "tv:mobilenet_v3_small", "--blocks", "sse"])
