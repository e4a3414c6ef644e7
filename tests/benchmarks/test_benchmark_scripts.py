"""The benchmark scripts run end to end in their smallest form and write the documented CSV
columns; the timm twins and the GSoP reference compute what the benchmark claims they compute.

Speed itself is never asserted here (timings belong in benchmarks/results, not in tests)."""

from __future__ import annotations

import dataclasses
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from helpers.benchmarks import benchmark_module
from helpers.files import read_csv
from helpers.paths import REPO, SHARED_DATA

import visattn

BENCH = REPO / "benchmarks"
BLOCK_COLUMNS = {
    "block",
    "shape",
    "impl",
    "params",
    "macs",
    "fwd_ms",
    "fwdbwd_ms",
    "peak_mb",
    "ratio_vs_timm",
}
TRAIN_COLUMNS = {"kind", "model", "impl", "batch_size", "images_per_s", "ratio_vs_plain", "epoch_s"}


@pytest.fixture(scope="module")
def bench_blocks():
    yield from benchmark_module("bench_blocks")


def _run(script: str, *args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    proc = subprocess.run(
        [sys.executable, str(BENCH / script), *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=REPO,
    )
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-4000:]
    return proc


def test_bench_blocks_smallest_run_writes_the_documented_csv(tmp_path, bench_blocks, capsys):
    # in this process (the script's `__main__` is `sys.exit(main())`): a fresh interpreter would
    # cost more than the run
    out = tmp_path / "blocks.csv"
    status = bench_blocks.main(
        [
            "--blocks",
            "se,gsop",
            "--shapes",
            "2x32x8x8",
            "--gsop-shapes",
            "2x32x8x8",
            "--warmup",
            "0",
            "--repeats",
            "1",
            "--min-sample",
            "0",
            "--out",
            str(out),
        ]
    )
    stdout = capsys.readouterr().out
    assert status == 0, stdout[-2000:]
    rows = read_csv(out)
    assert set(rows[0]) >= BLOCK_COLUMNS
    by = {(r["block"], r["impl"]): r for r in rows}
    se, twin = by[("se", "visattn")], by[("se", "timm")]
    assert float(se["ratio_vs_timm"]) == pytest.approx(
        float(se["fwdbwd_ms"]) / float(twin["fwdbwd_ms"])
    )
    assert twin["ratio_vs_timm"] == ""
    assert twin["check"].startswith("same")
    assert int(se["params"]) == int(twin["params"]) == 2 * 32 * 2 + 2 + 32
    assert by[("gsop", "visattn")]["ratio_vs_timm"] == ""  # timm has no GSoP
    assert ("gsop", "official_ihat") in by and ("gsop_covariance", "official_ihat") in by
    assert float(by[("gsop", "visattn")]["peak_mb"]) > 0
    assert "| block | shape | impl |" in stdout


def test_bench_blocks_large_maps_compares_fused_math_and_timm(tmp_path, bench_blocks, capsys):
    out = tmp_path / "large.csv"
    args = ["--large-maps", "--quick", "--blocks", "mhsa,a2", "--large-shape", "1x16"]
    status = bench_blocks.main([*args, "--warmup", "0", "--repeats", "1", "--out", str(out)])
    stdout = capsys.readouterr().out
    assert status == 0, stdout[-2000:]
    by = {(r["block"], r["shape"], r["impl"]): r for r in read_csv(out)}
    assert set(by) == {
        (b, f"1x16x{s}x{s}", impl)
        for s in (14, 28)
        for b, impls in (("mhsa", ("visattn", "math", "timm")), ("a2", ("visattn",)))
        for impl in impls
    }
    fused, math = by[("mhsa", "1x16x28x28", "visattn")], by[("mhsa", "1x16x28x28", "math")]
    assert float(fused["mem_vs_math"]) == pytest.approx(
        float(fused["peak_mb"]) / float(math["peak_mb"])
    )
    assert float(fused["mem_vs_math"]) < 0.7  # no (HW)^2 weights kept: measured 0.28
    assert by[("mhsa", "1x16x14x14", "timm")]["check"].startswith("same")
    assert "no HW x HW matrix" in by[("a2", "1x16x14x14", "visattn")]["note"]
    assert "## Goals at 28x28" in stdout


@pytest.mark.parametrize(
    "name",
    sorted(
        n
        for n in visattn.list_blocks()
        if n in ("se", "eca", "cbam", "spatial", "gc", "coord", "nonlocal")
    ),
)
def test_timm_twin_computes_the_same_function(bench_blocks, name):
    spec = bench_blocks.TWINS[name]
    for c in (64, 256):
        block = visattn.create_block(name, c, **spec.options)
        assert bench_blocks.check_twin(block, spec.build(block, c), spec, c).startswith("same")


def test_twin_check_reports_a_twin_with_other_weights(bench_blocks):
    spec = dataclasses.replace(bench_blocks.TWINS["se"], pairs=lambda b, t: [])
    block = visattn.create_block("se", 64)
    assert bench_blocks.check_twin(block, spec.build(block, 64), spec, 64).startswith("DIFFERS")


def test_official_style_covariance_matches_the_textbook_covariance_and_its_gradient(bench_blocks):
    z = torch.randn(3, 5, 4, 6, dtype=torch.float64, requires_grad=True)
    g = torch.randn(3, 5, 5, dtype=torch.float64)
    cov = bench_blocks._CovpoolIHat.apply(z)
    (grad,) = torch.autograd.grad(cov, z, g)
    z2 = z.detach().clone().requires_grad_(True)
    flat = z2.flatten(2)
    centred = flat - flat.mean(2, keepdim=True)
    expected = centred @ centred.transpose(1, 2) / flat.shape[2]  # biased, as GSoP
    (expected_grad,) = torch.autograd.grad(expected, z2, g)
    torch.testing.assert_close(cov, expected)
    torch.testing.assert_close(grad, expected_grad)


def test_interleaved_timing_alternates_the_order_every_repeat(bench_blocks):
    from _common import interleaved_median_ms

    calls: list[str] = []
    fns = {k: (lambda k=k: calls.append(k)) for k in ("a", "b")}
    ms = interleaved_median_ms(fns, device="cpu", warmup=1, repeats=4, clock="cpu")
    assert set(ms) == {"a", "b"}
    # warm-up a, b; one calibration call each; then a b | b a | a b | b a
    assert calls == ["a", "b", "a", "b", "a", "b", "b", "a", "a", "b", "b", "a"]


def test_cpu_peak_memory_sees_a_known_allocation(bench_blocks):
    from _common import peak_memory_mb

    def alloc() -> None:
        a = torch.ones(1 << 20)  # 4 MiB
        b = torch.ones(1 << 19)  # 2 MiB, live together with a
        del a, b

    assert peak_memory_mb(alloc, "cpu") == pytest.approx(6.0, abs=0.1)


@pytest.mark.skipif(not Path("/proc/stat").is_file(), reason="reads Linux's /proc/stat")
def test_other_work_counts_a_busy_child_and_not_this_process(bench_blocks, monkeypatch):
    """A child spinning for the whole block is other work (about one core, whatever else runs:
    more only adds); the block's own spinning is not; without /proc/stat there is no figure."""
    import _common

    spin = "import time\nt = time.process_time()\nwhile time.process_time() - t < 1.2: pass"
    with _common.OtherWork() as other:
        subprocess.run([sys.executable, "-c", spin], check=True)
    assert other.cores is not None and other.cores > 0.5
    # a machine where only this process works: its own spinning is not other work
    monkeypatch.setattr(_common, "_machine_busy_s", time.process_time)
    with _common.OtherWork() as alone:
        t = time.process_time()
        while time.process_time() - t < 0.2:
            pass
    assert alone.cores == pytest.approx(0.0, abs=0.01)
    monkeypatch.setattr(_common, "_machine_busy_s", lambda: None)
    with _common.OtherWork() as none:
        pass
    assert none.cores is None


def test_bench_train_smallest_run_writes_the_documented_csv(tmp_path):
    out = tmp_path / "train.csv"
    proc = _run(
        "bench_train.py",
        "--models",
        "resnet20_cifar",
        "--batch-size",
        "4",
        "--steps",
        "1",
        "--warmup",
        "1",
        "--rounds",
        "1",
        "--skip-data",
        "--out",
        str(out),
        timeout=240,
    )
    rows = read_csv(out)
    assert set(rows[0]) >= TRAIN_COLUMNS
    impls = {r["impl"]: r for r in rows}
    assert set(impls) == {"plain", "lightning_min", "lightning_default"}
    assert float(impls["plain"]["ratio_vs_plain"]) == 1.0
    for r in rows:
        assert float(r["images_per_s"]) > 0
        assert float(r["epoch_s"]) == pytest.approx(50_000 / float(r["images_per_s"]))
    assert "Lightning / plain" in proc.stdout


@pytest.mark.data
def test_bench_train_measures_both_data_pipelines(tmp_path):
    out = tmp_path / "train.csv"
    _run(
        "bench_train.py",
        "--data-root",
        str(SHARED_DATA),
        "--models",
        "resnet20_cifar",
        "--impls",
        "plain",
        "--batch-size",
        "8",
        "--steps",
        "1",
        "--warmup",
        "0",
        "--rounds",
        "1",
        "--loader-batches",
        "2",
        "--out",
        str(out),
        timeout=240,
    )
    data = {r["impl"]: r for r in read_csv(out) if r["kind"] == "data"}
    assert set(data) == {"loader_albumentations", "loader_device_aug", "device_aug_only"}
    assert all(float(r["images_per_s"]) > 0 for r in data.values())


@pytest.fixture(scope="module")
def bench_steps():
    yield from benchmark_module("bench_steps")


def test_bench_steps_times_the_sweeps_own_networks_against_the_plain_one(
    tmp_path, bench_steps, capsys
):
    out = tmp_path / "steps.csv"
    argv = ["--variants", "resnet20_eca,resnet20_wide_gsop", "--rounds", "1", "--steps", "1"]
    status = bench_steps.main(
        [*argv, "--batch", "4", "--profile", "--profile-steps", "1", "--out", str(out)]
    )
    assert status == 0
    rows = {r["variant"]: r for r in read_csv(out)}
    assert list(rows) == ["resnet20_none", "resnet20_eca", "resnet20_wide_gsop"]  # baseline first
    assert float(rows["resnet20_none"]["ratio"]) == 1.0
    # the networks are the sweep's: ECA adds 27 parameters (3 per block, 9 blocks), the
    # equal-budget control is widened to within 2% of GSoP's 417,898
    assert int(rows["resnet20_eca"]["params"]) - int(rows["resnet20_none"]["params"]) == 27
    assert abs(int(rows["resnet20_wide_gsop"]["params"]) / 417_898 - 1) < 0.02
    assert float(rows["resnet20_wide_gsop"]["macs_added_pct"]) > 40  # width costs MACs
    assert rows["resnet20_eca"]["where"]  # the profiler's attribution
    text = capsys.readouterr().out
    assert "vector extensions" in text and "- cpu:" in text
    md = out.with_suffix(".md").read_text()  # beside the CSV: the machine, the load, the table
    assert "- cpu:" in md and "Other processes kept busy while timing: " in md
    assert md.count("| resnet20_") == 3 and "--profile-steps 1" in md


def test_bench_steps_takes_its_batch_and_format_from_the_sweep_and_its_overrides(
    tmp_path, bench_steps
) -> None:
    # no --batch: the sweep's own batch, here as --set changed it (as visattn.ablate takes it)
    out = tmp_path / "steps.csv"
    argv = ["--variants", "resnet20_eca", "--rounds", "1", "--steps", "1", "--out", str(out)]
    assert bench_steps.main([*argv, "--set", "data.batch_size=3"]) == 0
    # the run's own memory format (channels-last by default), said where the batch is said
    md = out.with_suffix(".md")
    assert "Batch 3 x (3, 32, 32), channels-last memory format," in md.read_text()
    argv += ["--set", "data.batch_size=3", "--set", "model.channels_last=false"]
    assert bench_steps.main(argv) == 0
    assert "Batch 3 x (3, 32, 32), NCHW memory format," in md.read_text()
    with pytest.raises(SystemExit, match="--set expects KEY=VALUE"):
        bench_steps.main([*argv, "--set", "data.batch_size"])


def test_bench_steps_refuses_an_unknown_variant_naming_the_sweeps(bench_steps):
    with pytest.raises(SystemExit, match="resnet20_none"):
        bench_steps.main(["--variants", "resnet20_nope", "--rounds", "1"])


def test_bench_steps_compiles_before_it_times(tmp_path, bench_steps, monkeypatch):
    # inductor compiles in worker processes, which the other-work figure would count: the
    # compilation has to happen before the timed span opens, and the compiled networks are timed
    events = []

    def fake_compile(net):
        events.append("compile")
        return net

    class Recorded(bench_steps.OtherWork):
        def __enter__(self):
            events.append("timed")
            return super().__enter__()

    monkeypatch.setattr(bench_steps.torch, "compile", fake_compile)
    monkeypatch.setattr(bench_steps, "OtherWork", Recorded)
    out = tmp_path / "steps.csv"
    argv = ["--variants", "resnet20_eca", "--rounds", "1", "--steps", "1", "--batch", "4"]
    assert bench_steps.main([*argv, "--compile", "--out", str(out)]) == 0
    assert events == ["compile", "compile", "timed"]  # the plain network and ECA, then timing
    rows = read_csv(out)
    assert all(float(r["compile_ms"]) > 0 and float(r["compile_warmup_s"]) >= 0 for r in rows)


def test_bench_steps_steps_each_network_once_before_it_times(tmp_path, bench_steps, monkeypatch):
    # a block that compiles its own kernel (SimAM) does so on its network's first step, in
    # inductor's worker processes: that step comes before the timed span opens
    events = []
    real = bench_steps.Step.__call__
    monkeypatch.setattr(bench_steps.Step, "__call__", lambda s: events.append("step") or real(s))

    class Recorded(bench_steps.OtherWork):
        def __enter__(self):
            events.append("timed")
            return super().__enter__()

    monkeypatch.setattr(bench_steps, "OtherWork", Recorded)
    argv = ["--variants", "resnet20_eca", "--rounds", "1", "--steps", "1", "--batch", "4"]
    assert bench_steps.main([*argv, "--out", str(tmp_path / "steps.csv")]) == 0
    assert events.index("timed") == 2  # the plain network's step and ECA's, then timing


def test_bench_steps_names_a_compiled_graph_shortly(bench_steps):
    label = bench_steps.op_label("## Call CompiledFxGraph fanqfe2a3sowi5wmkbjbk ##")
    assert label == "Inductor graph fanqfe"
    assert bench_steps.op_label("aten::mul") == "aten::mul"


def test_bench_steps_names_each_variants_format_where_they_differ(bench_steps) -> None:
    net = torch.nn.Identity()
    assert bench_steps._formats({"a": (net, True), "b": (net, True)}) == (
        "channels-last memory format"
    )
    assert bench_steps._formats({"a": (net, True), "b": (net, False)}) == (
        "memory format per variant: a channels-last; b NCHW"
    )
