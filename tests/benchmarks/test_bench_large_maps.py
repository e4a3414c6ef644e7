"""``bench_blocks.py --large-maps``: its default block list is the registry's names, an unknown
name (asked for or in the default list) stops the run before anything is measured, and every
block with an ``attn_impl`` option is measured against its math path."""

from __future__ import annotations

import csv

import pytest
from helpers.benchmarks import benchmark_module

import visattn
from visattn.blocks.registry import UnknownBlockError


@pytest.fixture(scope="module")
def bench():
    yield from benchmark_module("bench_blocks")


def test_default_large_map_blocks_are_registered_and_cover_the_attention_family(bench) -> None:
    assert set(bench.LARGE_MAP_BLOCKS) <= set(visattn.list_blocks())
    assert {"bra", "agent_attn", "area_attn"} <= set(bench.LARGE_MAP_BLOCKS)


@pytest.mark.parametrize("where", ["asked", "default"])
def test_an_unknown_large_map_block_fails_by_name(bench, monkeypatch, capsys, where) -> None:
    args = ["--large-maps", "--quick", "--large-shape", "1x16", "--repeats", "1"]
    if where == "asked":
        args += ["--blocks", "mhsa,agent"]
    else:
        monkeypatch.setattr(bench, "LARGE_MAP_BLOCKS", ("mhsa", "area"))
    with pytest.raises(UnknownBlockError, match="unknown block") as e:
        bench.main(args)
    assert "did you mean" in str(e.value) and "_attn'" in str(e.value)
    assert "done mhsa" not in capsys.readouterr().err  # nothing measured first


def test_bra_is_measured_against_its_math_path(bench, tmp_path, capsys) -> None:
    out = tmp_path / "large.csv"
    args = ["--large-maps", "--quick", "--blocks", "bra", "--large-shape", "1x16"]
    assert bench.main([*args, "--warmup", "0", "--repeats", "1", "--out", str(out)]) == 0
    with out.open() as f:
        rows = {(r["shape"], r["impl"]): r for r in csv.DictReader(f)}
    assert set(rows) == {(f"1x16x{s}x{s}", i) for s in (14, 28) for i in ("visattn", "math")}
    fused, math = rows[("1x16x28x28", "visattn")], rows[("1x16x28x28", "math")]
    assert float(fused["time_vs_math"]) == pytest.approx(
        float(fused["fwdbwd_ms"]) / float(math["fwdbwd_ms"])
    )
    assert "## Goals at 28x28" in capsys.readouterr().out
