"""The ablation runner: sweep files, resume rules, failure recording, results.csv and report.md.

Most tests replace the training call by a fake (the runner takes ``train_fn``) so that resume
and bookkeeping are checked in milliseconds; ``test_tiny_real_sweep_*`` run real training on
``shapes`` through ``visattn.training.cli.run``.
"""

from __future__ import annotations

import csv
import json
import math
import os
import shutil
import statistics
from pathlib import Path
from typing import Any

import pytest
import torch
import yaml
from helpers.ablate import TINY_SET, FakeTrainer, arg, parse_report, write_sweep
from helpers.files import read_csv
from helpers.paths import REPO
from helpers.tiers import tiered
from scipy import stats

import visattn.ablate.runner as runner_mod
from visattn.ablate import load_sweep, overrides_to_args, run_sweep
from visattn.ablate.__main__ import main as ablate_main
from visattn.ablate.results import atomic_write_text
from visattn.models.placement import placements_to_config
from visattn.training.cli import checkpoint_to_test

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
PLOTS = (
    "acc_vs_params.png",
    "acc_vs_macs.png",
    "acc_vs_latency.png",
    "val_curves.png",
    "paired_diff.png",
)


# --------------------------------------------------------------------------- helpers


def _paired_by_hand(a: dict[int, float], b: dict[int, float]) -> tuple[float, float, float, int]:
    """Mean of the per-seed differences and its 95% paired-t interval, from the textbook formula
    ``mean(d) -/+ t_{0.975, n-1} * sd(d) / sqrt(n)`` (only the t quantile comes from scipy)."""
    seeds = sorted(set(a) & set(b))
    d = [a[s] - b[s] for s in seeds]
    n = len(d)
    mean = sum(d) / n
    if n < 2:
        return mean, math.nan, math.nan, n
    sd = math.sqrt(sum((x - mean) ** 2 for x in d) / (n - 1))
    half = stats.t.ppf(0.975, n - 1) * sd / math.sqrt(n)
    return mean, mean - half, mean + half, n


def _check_report_against_csv(out: Path, baseline: str, diffs: bool = True) -> None:
    """Recompute mean, std, the paired and the Welch intervals from results.csv and compare them
    with report.md."""
    rows = [r for r in read_csv(out / "results.csv") if r["status"] == "ok"]
    table = parse_report((out / "report.md").read_text())
    by_variant: dict[str, list[float]] = {}
    by_seed: dict[str, dict[int, float]] = {}
    for r in rows:
        by_variant.setdefault(r["variant"], []).append(float(r["val/acc"]) * 100)
        by_seed.setdefault(r["variant"], {})[int(r["seed"])] = float(r["val/acc"]) * 100
    for v, accs in by_variant.items():
        cell = table[v]["val/acc (%)"]
        assert cell == f"{statistics.mean(accs):.2f} ± {statistics.stdev(accs):.2f}", v
        assert table[v]["n"] == str(len(accs))
        if v == baseline:
            assert table[v]["Δ val/acc Welch (pp) [95% CI]"] == "baseline"
            assert table[v]["Δ val/acc paired (pp) [95% CI]"] == "baseline"
            continue
        diff = statistics.mean(accs) - statistics.mean(by_variant[baseline])
        if statistics.stdev(accs) == statistics.stdev(by_variant[baseline]) == 0:
            low = high = diff  # no spread on either side: the interval is the point
        else:
            res = stats.ttest_ind(accs, by_variant[baseline], equal_var=False)
            low, high = res.confidence_interval(0.95)
        assert table[v]["Δ val/acc Welch (pp) [95% CI]"] == f"{diff:+.2f} [{low:+.2f}, {high:+.2f}]"
        pd, plo, phi, n = _paired_by_hand(by_seed[v], by_seed[baseline])
        if math.isnan(plo) or plo == phi or abs(phi - plo) < 1e-9:
            assert table[v]["Δ val/acc paired (pp) [95% CI]"].startswith(f"{pd:+.2f}")
        else:
            expected = f"{pd:+.2f} [{plo:+.2f}, {phi:+.2f}]"
            assert table[v]["Δ val/acc paired (pp) [95% CI]"] == expected
        assert table[v]["pairs"].split(" ")[0] == str(n)
        if diffs:  # results.csv carries the per-seed differences the paired mean averages
            d = [float(r["val/acc_diff"]) * 100 for r in rows if r["variant"] == v]
            assert statistics.mean(d) == pytest.approx(pd)
    best = max(by_variant, key=lambda v: statistics.mean(by_variant[v]))
    starred = [ln for ln in (out / "report.md").read_text().splitlines() if ln.startswith("| ")]
    starred = [ln for ln in starred if "★" in ln]
    if best != baseline and "yes" in table[best]["resolved"]:  # a star on a result
        assert [ln.split(" | ")[0] for ln in starred] == [f"| {best} ★"]
    else:  # nothing resolved for the best mean: no star
        assert starred == []
    assert "How to read this (val/acc)" in (out / "report.md").read_text()


def _check_pngs(out: Path) -> None:
    import matplotlib.image as mpimg

    for name in PLOTS:
        data = (out / name).read_bytes()
        assert data[:8] == PNG_MAGIC, name
        img = mpimg.imread(out / name)
        assert img.ndim == 3 and img.shape[0] > 100 and img.shape[1] > 100


# --------------------------------------------------------------------------- sweep files


def test_overrides_become_json_encoded_cli_args_and_null_turns_attention_off() -> None:
    args = overrides_to_args(
        {
            "trainer.max_epochs": 5,
            "model.attention": None,
            "model.attention2": {"name": "se", "args": {"reduction": 8}},
            "data.dataset": "shapes",
            "trainer.fast_dev_run": True,
        }
    )
    assert args == [
        "--trainer.max_epochs=5",
        "--model.attention=null",
        '--model.attention2={"name": "se", "args": {"reduction": 8}}',
        "--data.dataset=shapes",
        "--trainer.fast_dev_run=true",
    ]
    # the encoding is YAML the parser reads back unchanged
    for a, v in zip(args, [5, None, {"name": "se", "args": {"reduction": 8}}, "shapes", True]):
        assert yaml.safe_load(a.split("=", 1)[1]) == v


def test_runs_expand_variants_times_seeds_with_shared_then_variant_overrides(
    tmp_path: Path,
) -> None:
    path = write_sweep(
        tmp_path,
        [
            {"name": "none", "set": {"model.attention": None}},
            {"name": "se", "set": {"model.attention": {"name": "se"}, "trainer.max_epochs": 4}},
        ],
        seeds=(3, 7),
    )
    sweep = load_sweep(path)
    runs = sweep.runs(tmp_path / "out")
    assert [r.key for r in runs] == ["none/seed3", "none/seed7", "se/seed3", "se/seed7"]
    r = runs[3]
    assert r.root == (tmp_path / "out" / "runs" / "se" / "seed7").resolve()
    assert r.args[:3] == ("fit", "--config", str((tmp_path / "base.yaml").resolve()))
    # one value per key: the variant's value replaces the shared one, other keys keep the order
    # shared then variant
    assert list(r.args[3:]) == [
        "--trainer.max_epochs=4",
        '--model.attention={"name": "se"}',
        "--seed_everything=7",
        f"--trainer.default_root_dir={r.root}",
    ]
    assert list(runs[0].args[3:5]) == ["--trainer.max_epochs=3", "--model.attention=null"]
    assert "--model.attention=null" in runs[0].args
    assert sweep.baseline == "none"


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"variants": [{"name": "a"}, {"name": "a"}]}, "duplicate variant"),
        ({"baseline": "zzz"}, "baseline 'zzz' is not a variant"),
        ({"sedes": [0]}, r"unknown key\(s\) \['sedes'\]"),
        ({"seeds": 3}, "seeds must be a list"),
        ({"variants": [{"name": "a/b"}]}, "names a folder"),
        ({"set": {"trainer max": 1}}, "not a dotted option name"),
        ({"base": ["no/such/file.yaml"]}, "base config 'no/such/file.yaml' not found"),
        ({"profile": {"batchsize": 8}}, r"profile: unknown key\(s\) \['batchsize'\]"),
    ],
)
def test_bad_sweep_files_are_refused_with_a_message(
    tmp_path: Path, change: dict, message: str
) -> None:
    data = {"name": "x", "seeds": [0], "variants": [{"name": "a"}], **change}
    path = tmp_path / "sweep.yaml"
    path.write_text(yaml.safe_dump(data))
    with pytest.raises((ValueError, FileNotFoundError), match=message):
        load_sweep(path)


SWEEP_FILES = sorted((REPO / "configs" / "ablations").glob("*.yaml"))
STUDY_FILES = [p for p in SWEEP_FILES if p.stem.endswith(("_quick", "_full"))]


@pytest.mark.parametrize("path", STUDY_FILES, ids=lambda p: p.stem)
def test_shipped_sweeps_are_valid_and_come_in_quick_and_full_forms(
    path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(REPO)
    sweep = load_sweep(path)
    assert len(sweep.runs("out")) == len(sweep.variants) * len(sweep.seeds)
    assert len(sweep.seeds) >= 2  # a standard deviation needs two
    form = "_quick" if path.stem.endswith("_quick") else "_full"
    assert path.stem.endswith(form)
    quick = load_sweep(path.with_name(path.name.replace(form, "_quick")))
    full = load_sweep(path.with_name(path.name.replace(form, "_full")))
    # every quick variant is a variant of the full form
    assert {v.name for v in quick.variants} <= {v.name for v in full.variants}


def test_seven_studies_the_cpu_sweeps_and_the_gpu_reproduction_are_shipped(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.chdir(REPO)
    assert {p.stem for p in SWEEP_FILES} - {p.stem for p in STUDY_FILES} == {
        "backbones_cpu",
        "cifar10_reproduce",
        "cifar10_bf16_check",
        "cifar10_cpu",
        "cifar10_long_cpu",
        "cifar10_recipe",
        "families_cpu",
        "families_cpu_10",
        "imagenette112_cpu",
    }
    # the bf16 check's runs are the leaderboard's plain runs of the same seeds but for the
    # precision: benchmarks/precision_check.py pairs them and refuses any other difference
    check = load_sweep(REPO / "configs" / "ablations" / "cifar10_bf16_check.yaml")
    board = load_sweep(REPO / "configs" / "ablations" / "cifar10_cpu.yaml")
    plain = {r.key: r for r in board.runs("out")}
    for run in check.runs("out"):
        other = dict(plain[run.key].settings)
        assert other.pop("trainer.precision", None) is None  # the leaderboard's default: fp32
        assert {**run.settings} == {**other, "trainer.precision": '"bf16-mixed"'}, run.key
    # the CPU sweeps: 5 seeds (a paired interval with 4 degrees of freedom), the variants
    cpu = load_sweep(REPO / "configs" / "ablations" / "families_cpu.yaml")
    assert cpu.seeds == (0, 1, 2, 3, 4) and cpu.overrides["data.dataset"] == "cues_key"
    ten = load_sweep(REPO / "configs" / "ablations" / "families_cpu_10.yaml")
    assert ten.seeds == tuple(range(10)) and ten.variants == cpu.variants
    names = {v.name.removeprefix("resnet20_") for v in cpu.variants}
    assert names == {"none", "se", "eca", "cbam", "gsop", "nonlocal", "coord", "simam"}
    # backbones_cpu is the part of backbones_quick a CPU finishes: the same runs, so a finished
    # backbones_cpu folder resumes as backbones_quick
    bb_cpu = load_sweep(REPO / "configs" / "ablations" / "backbones_cpu.yaml")
    bb_quick = load_sweep(REPO / "configs" / "ablations" / "backbones_quick.yaml")
    shared = {r.key: r.args for r in bb_cpu.runs("out")}
    assert {v.name for v in bb_cpu.variants} < {v.name for v in bb_quick.variants}
    assert shared == {r.key: r.args for r in bb_quick.runs("out") if r.key in shared}
    # the real-data tables: all of CIFAR-10's training images, the final network on the test set,
    # the recipe checked on a hold-out of the training set (never the test set)
    c10 = load_sweep(REPO / "configs" / "ablations" / "cifar10_cpu.yaml")
    assert c10.seeds == (0, 1, 2, 3, 4) and c10.test == "last" and c10.metric == "test/acc"
    assert c10.baseline == "resnet20_none" and c10.order == "seed"
    assert "data.num_train" not in c10.overrides and "data.val_split" not in c10.overrides
    # the first table's four variants, then the leaderboard: two blocks of each family and
    # the width-matched control for GSoP, all paired with the same baseline runs
    blocks = ("none", "se", "gsop", "cbam", "eca", "gc", "simam", "nonlocal", "bam", "coord")
    assert [v.name for v in c10.variants][:4] == [f"resnet20_{b}" for b in blocks[:4]]
    assert {v.name for v in c10.variants} == {f"resnet20_{b}" for b in blocks} | {
        "resnet20_residual_attention",
        "resnet20_scse",
        "resnet20_wide_gsop",
        "resnet20_simam_prenorm",
    }
    # SimAM at the authors' position as well as at the one chosen earlier by mistake
    simam = {
        v.name: v.overrides["model.attention"]["position"]
        for v in c10.variants
        if "simam" in v.name
    }
    assert simam == {"resnet20_simam": "inner", "resnet20_simam_prenorm": "prenorm"}
    wide = next(v for v in c10.variants if v.name == "resnet20_wide_gsop")
    assert wide.match == ("params", "resnet20_gsop") and wide.baseline is None
    recipe = load_sweep(REPO / "configs" / "ablations" / "cifar10_recipe.yaml")
    assert recipe.overrides["data.val_split"] == 5000 and recipe.test is None
    assert recipe.base == c10.base  # the recipe checked is the table's
    inet = load_sweep(REPO / "configs" / "ablations" / "imagenette112_cpu.yaml")
    assert len(inet.seeds) == 5 and inet.test == "last" and len(inet.variants) == 14
    # the long rung: the 10-epoch table's recipe, three times as long, its six variants
    long = load_sweep(REPO / "configs" / "ablations" / "cifar10_long_cpu.yaml")
    assert long.base == c10.base and long.overrides["trainer.max_epochs"] == 30
    assert long.order == "seed" and long.test == "last" and long.metric == "test/acc"
    assert {v.name for v in long.variants} == {
        f"resnet20_{b}" for b in ("none", "wide_gsop", "gsop", "simam", "simam_prenorm", "se")
    }
    reproduce = load_sweep(REPO / "configs" / "ablations" / "cifar10_reproduce.yaml")
    assert len(reproduce.seeds) == 3 and reproduce.overrides["trainer.precision"] == "bf16-mixed"
    assert reproduce.overrides["data.device_augment"] and reproduce.overrides["model.channels_last"]
    stems = {p.stem.rsplit("_", 1)[0] for p in STUDY_FILES}
    assert stems == {
        "backbones",
        "equal_budget",
        "families",
        "se_integration",
        "cbam_design",
        "residual_attention",
        "nonlocal_taxonomy",
    }


def _same_variant(sweep: Any, variant: Any, other: Any) -> bool:
    """``other`` (a sweep) has a variant of ``variant``'s name with the same model and every
    override of ``variant``, and neither is an equal-budget match."""
    twin = next((v for v in other.variants if v.name == variant.name), None)
    if twin is None or variant.match is not None or twin.match is not None:
        return False
    model = variant.overrides.get("model.model", sweep.overrides.get("model.model"))
    if model is None or model != twin.overrides.get(
        "model.model", other.overrides.get("model.model")
    ):
        return False
    missing = object()
    return all(
        twin.overrides.get(k, missing) == v
        for k, v in variant.overrides.items()
        if k != "model.model"
    )


@pytest.mark.parametrize(
    "path",
    # the GPU studies' full forms (45 s on 2 cores) build in the heavy tier; their quick forms,
    # which share most variants, and every CPU sweep build by default
    tiered(SWEEP_FILES, keep=lambda p: not p.stem.endswith("_full")),
    ids=lambda p: p.stem,
)
def test_every_shipped_variant_builds_through_the_cli(
    path: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each variant's arguments parse and build its model (data swapped for a few shapes images,
    so no dataset is needed): a typo in a full sweep would otherwise surface on a GPU days in."""
    cli = pytest.importorskip("visattn.training.cli")
    monkeypatch.chdir(REPO)
    sweep = load_sweep(path)
    data = {
        "data.dataset": "shapes",
        "data.image_size": 32,
        "data.num_train": 16,
        "data.num_val": 16,
        "data.num_test": 16,
        "data.num_workers": 0,
        "trainer.accelerator": "cpu",
        "trainer.precision": "32",
    }
    full = None
    if path.stem.endswith("_quick"):
        full = load_sweep(path.with_name(path.name.replace("_quick", "_full")))
    for i, run in enumerate(sweep.runs(tmp_path, data)[:: len(sweep.seeds)]):
        variant = next(v for v in sweep.variants if v.name == run.variant)
        # a quick variant that is its full-form namesake (same model, same overrides) is built
        # with the full form; the first one is built anyway, for the quick form's own settings
        if i and full is not None and _same_variant(sweep, variant, full):
            continue
        built = cli.VisattnCLI(
            args=list(run.args[1:]), run=False, parser_kwargs={"exit_on_error": False}
        )
        expected = variant.overrides.get("model.attention", "unset")
        if expected != "unset":
            got = placements_to_config(built.model.hparams.attention)
            assert got == placements_to_config(expected), run.key


# --------------------------------------------------------------------------- runner (fake training)


def test_sweep_writes_results_report_and_plots_that_agree(
    tmp_path: Path, fake: FakeTrainer
) -> None:
    path = write_sweep(
        tmp_path,
        [
            {"name": "none", "set": {"model.attention": None}},
            {"name": "se", "set": {"model.attention": {"name": "se"}}},
        ],
    )
    out = tmp_path / "out"
    rows = run_sweep(path, out, train_fn=fake, echo=lambda s: None)
    assert len(fake.calls) == 4 and len(rows) == 4
    csv_rows = read_csv(out / "results.csv")
    assert [r["status"] for r in csv_rows] == ["ok"] * 4
    for col in (
        "run",
        "variant",
        "model",
        "attention",
        "seed",
        "params",
        "macs",
        "val/acc",
        "test/acc",
        "status",
        "latency_ms",
        "throughput",
        "wall_s",
    ):
        assert col in csv_rows[0]
    assert [float(r["val/acc"]) for r in csv_rows] == pytest.approx([0.5, 0.51, 0.6, 0.61])
    _check_report_against_csv(out, "none")
    _check_pngs(out)
    for r in csv_rows:
        assert (out / r["metrics_csv"]).is_file() and (out / r["ckpt"]).is_file()


def test_rerunning_trains_nothing_new(tmp_path: Path, fake: FakeTrainer) -> None:
    path = write_sweep(
        tmp_path, [{"name": "none"}, {"name": "se", "set": {"model.attention": {"name": "se"}}}]
    )
    out = tmp_path / "out"
    first = run_sweep(path, out, train_fn=fake, echo=lambda s: None)
    report = (out / "report.md").read_text()
    fake.calls.clear()
    second = run_sweep(path, out, train_fn=fake, echo=lambda s: None)
    assert fake.calls == []
    assert second == first
    assert (out / "report.md").read_text() == report


def test_deleting_one_runs_artefacts_reruns_only_that_run(
    tmp_path: Path, fake: FakeTrainer
) -> None:
    path = write_sweep(
        tmp_path, [{"name": "none"}, {"name": "se", "set": {"model.attention": {"name": "se"}}}]
    )
    out = tmp_path / "out"
    run_sweep(path, out, train_fn=fake, echo=lambda s: None)
    shutil.rmtree(out / "runs" / "se" / "seed1")
    version = out / "runs" / "none" / "seed0" / "lightning_logs" / "version_0"
    (version / "metrics.csv").unlink()  # its intact checkpoint still vouches for the run
    fake.calls.clear()
    rows = run_sweep(path, out, train_fn=fake, echo=lambda s: None)
    trained = sorted(arg(a, "trainer.default_root_dir").split("runs/")[1] for a in fake.calls)
    assert trained == ["se/seed1"] and [r["status"] for r in rows] == ["ok"] * 4
    for ckpt in version.rglob("*.ckpt"):  # without its checkpoint nothing does: it trains again
        ckpt.unlink()
    (version / "metrics.csv").unlink(missing_ok=True)
    fake.calls.clear()
    rows = run_sweep(path, out, train_fn=fake, echo=lambda s: None)
    trained = sorted(arg(a, "trainer.default_root_dir").split("runs/")[1] for a in fake.calls)
    assert trained == ["none/seed0"] and [r["status"] for r in rows] == ["ok"] * 4


def test_cut_off_and_edited_runs_are_retrained(tmp_path: Path, fake: FakeTrainer) -> None:
    variants = [{"name": "none"}, {"name": "se", "set": {"model.attention": {"name": "se"}}}]
    path = write_sweep(tmp_path, variants)
    out = tmp_path / "out"
    run_sweep(path, out, train_fn=fake, echo=lambda s: None)
    (out / "runs" / "none" / "seed1" / "result.json").unlink()  # as if killed before the marker
    variants[1]["set"]["model.attention"]["args"] = {"reduction": 8}  # the se variant is edited
    path = write_sweep(tmp_path, variants)
    fake.calls.clear()
    run_sweep(path, out, train_fn=fake, echo=lambda s: None, retrain_changed=True)
    done = sorted(arg(a, "trainer.default_root_dir").split("runs/")[1] for a in fake.calls)
    assert done == ["none/seed1", "se/seed0", "se/seed1"]
    # the folder was cleaned: one log version per run, not a second one next to the old
    assert [p.name for p in (out / "runs/none/seed1/lightning_logs").iterdir()] == ["version_0"]


def test_a_failing_variant_is_recorded_and_the_sweep_goes_on(
    tmp_path: Path, fake: FakeTrainer
) -> None:
    path = write_sweep(
        tmp_path,
        [
            {"name": "none"},
            {"name": "broken", "set": {"model.attention": {"name": "se", "args": {"bogus": 1}}}},
            {"name": "se", "set": {"model.attention": {"name": "se"}}},
        ],
    )
    out = tmp_path / "out"
    lines: list[str] = []
    rows = run_sweep(path, out, train_fn=fake, echo=lines.append)
    assert [r["status"] for r in rows] == ["ok", "ok", "failed", "failed", "ok", "ok"]
    csv_rows = read_csv(out / "results.csv")
    assert csv_rows[2]["error"] == (
        "TypeError: block 'se': unknown option 'bogus'; valid options: reduction"
    )
    report = (out / "report.md").read_text()
    assert "## Failed runs" in report and "broken/seed0" in report
    assert parse_report(report)["broken"]["n"] == "0"
    _check_report_against_csv(out, "none")
    assert any("FAILED" in ln for ln in lines)
    # a second pass retries the failed runs only
    fake.calls.clear()
    run_sweep(path, out, train_fn=fake, echo=lambda s: None)
    assert len(fake.calls) == 2 and all("bogus" in " ".join(a) for a in fake.calls)


@pytest.mark.parametrize("interrupt", [KeyboardInterrupt, lambda: SystemExit(1)])
def test_an_interrupted_sweep_stops_and_loses_only_the_run_in_progress(
    tmp_path: Path, fake: FakeTrainer, interrupt: Any
) -> None:
    # Lightning turns Ctrl+C into SystemExit(1) and SIGTERM into SIGTERMException(SystemExit):
    # neither may be recorded as a failed run while the sweep carries on
    path = write_sweep(
        tmp_path, [{"name": "none"}, {"name": "se", "set": {"model.attention": {"name": "se"}}}]
    )
    out = tmp_path / "out"

    def train(args: list[str], **kw) -> dict:
        if len(fake.calls) == 2:
            fake.calls.append(args)
            raise interrupt()
        return fake(args, **kw)

    with pytest.raises((KeyboardInterrupt, SystemExit)):
        run_sweep(path, out, train_fn=train, echo=lambda s: None)
    assert len(fake.calls) == 3
    assert [r["run"] for r in read_csv(out / "results.csv")] == ["none/seed0", "none/seed1"]
    assert not (out / "runs" / "se" / "seed0" / "result.json").exists()
    fake.calls.clear()
    rows = run_sweep(path, out, train_fn=fake, echo=lambda s: None)
    done = [arg(a, "trainer.default_root_dir").split("runs/")[1] for a in fake.calls]
    assert done == ["se/seed0", "se/seed1"]
    assert [r["status"] for r in rows] == ["ok"] * 4


def test_progress_lines_count_runs_and_estimate_time_left(
    tmp_path: Path, fake: FakeTrainer
) -> None:
    path = write_sweep(tmp_path, [{"name": "none"}], seeds=(0, 1, 2))
    lines: list[str] = []
    run_sweep(path, tmp_path / "out", train_fn=fake, echo=lines.append)
    starts = [ln for ln in lines if "elapsed" in ln]
    assert [ln.split(" run ")[1].split(" ")[0] for ln in starts] == ["1/3", "2/3", "3/3"]
    assert "ETA ?" in starts[0] and "ETA ?" not in starts[1]


def test_the_eta_goes_by_a_resumed_runs_whole_time_not_its_last_piece(
    tmp_path: Path, fake: FakeTrainer
) -> None:
    """A run that went on from its checkpoint finishes in minutes after hours of earlier pieces;
    the runs after it take the hours, and so does the estimate (its row's ``wall_s``)."""
    path = write_sweep(tmp_path, [{"name": "none"}], seeds=(0, 1, 2))

    def resumed_first(args: list[str], *, test=None, then=None) -> dict:
        summary = fake(args, test=test)
        if arg(args, "seed_everything") == "0":
            summary["earlier_s"] = 3600.0  # the checkpoint's training time
        then(None, None, summary)
        return summary

    lines: list[str] = []
    run_sweep(path, tmp_path / "out", train_fn=resumed_first, echo=lines.append)
    starts = [ln for ln in lines if "elapsed" in ln]
    # two runs left of about an hour each, one at a time
    assert starts[1].rsplit("ETA ", 1)[1].startswith("2h00m")


def test_the_eta_shares_the_runs_left_among_the_sweeps_slots() -> None:
    """Two runs at a time, 33 minutes each: when the first ends and the second is about to, the
    5 left take three more rounds (99 minutes), not 6 x 33 (the finished runs' rate alone)."""
    from visattn.ablate.job import estimate_eta

    assert estimate_eta(33.0, [33.0], 5, 2) == 99.0
    assert estimate_eta(10.0, [4.0], 0, 2) == 6.0  # only the running one's rest
    assert estimate_eta(10.0, [], 3, 1) == 30.0  # one at a time: runs left x duration
    assert estimate_eta(10.0, [12.0, 2.0], 1, 2) == 10.0  # an overrunning run counts as done
    assert math.isnan(estimate_eta(math.nan, [], 3, 2))


def test_named_baseline_is_used_for_differences(tmp_path: Path, fake: FakeTrainer) -> None:
    path = write_sweep(
        tmp_path,
        [{"name": "none"}, {"name": "se", "set": {"model.attention": {"name": "se"}}}],
        baseline="se",
    )
    out = tmp_path / "out"
    run_sweep(path, out, train_fn=fake, echo=lambda s: None)
    _check_report_against_csv(out, "se")


def test_report_only_reports_what_the_runs_wrote_as_a_normal_pass_does(
    tmp_path: Path, fake: FakeTrainer, capsys
) -> None:
    """P4: --report-only trusted a hand-edited results.csv (SE 63.56 ± 50.12 against a normal
    pass's 25.00 ± 4.42) while a normal pass replaced the edit: the two gave other reports."""
    path = write_sweep(
        tmp_path, [{"name": "none"}, {"name": "se", "set": {"model.attention": {"name": "se"}}}]
    )
    out = tmp_path / "out"
    run_sweep(path, out, train_fn=fake, echo=lambda s: None)
    report = (out / "report.md").read_text()
    rows = read_csv(out / "results.csv")
    marked = rows[0]["val/acc"]
    rows[0]["val/acc"] = "0.3"
    with open(out / "results.csv", "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)
    (out / "report.md").unlink()
    assert ablate_main([str(path), "--out", str(out), "--report-only"]) == 0
    said = capsys.readouterr().out
    assert "differs from the runs' completion markers in 1 cell(s)" in said and "0.3" in said
    assert read_csv(out / "results.csv")[0]["val/acc"] == marked
    assert (out / "report.md").read_text() == report
    _check_report_against_csv(out, "none")


def test_report_only_computes_the_differences_for_the_baseline_as_it_is_now(
    tmp_path: Path, fake: FakeTrainer
) -> None:
    """P11: after a baseline change, --report-only kept val/acc_diff against the old one."""
    variants = [{"name": "none"}, {"name": "se", "set": {"model.attention": {"name": "se"}}}]
    out = tmp_path / "out"
    run_sweep(write_sweep(tmp_path, variants), out, train_fn=fake, echo=lambda s: None)
    path = write_sweep(tmp_path, variants, baseline="se")
    assert ablate_main([str(path), "--out", str(out), "--report-only"]) == 0
    _check_report_against_csv(out, "se")


@pytest.mark.parametrize(("given", "asked"), [(True, "best"), ("best", "best"), ("last", "last")])
def test_a_sweeps_test_is_asked_of_the_fit_itself(
    tmp_path: Path, fake: FakeTrainer, given: object, asked: str
) -> None:
    """One call per run: the fit tests its own network on the checkpoint the sweep names (no
    second process or network for the test), and its test_acc is the row's."""

    def train(args: list[str], *, test=None, then=None) -> dict:
        summary = fake(args, test=test)
        summary["test_acc"] = {"best": 0.1, "last": 0.9}[test]
        then(None, None, summary)
        return summary

    path = write_sweep(tmp_path, [{"name": "none"}], seeds=(0,), test=given)
    rows = run_sweep(path, tmp_path / "out", train_fn=train, echo=lambda s: None)
    assert fake.tests == [asked] and len(fake.calls) == 1 and fake.calls[0][0] == "fit"
    assert rows[0]["test/acc"] == {"best": 0.1, "last": 0.9}[asked]
    assert "test/acc (%)" in (tmp_path / "out" / "report.md").read_text()


def test_a_sweep_without_test_asks_for_none(tmp_path: Path, fake: FakeTrainer) -> None:
    path = write_sweep(tmp_path, [{"name": "none"}], seeds=(0,))
    rows = run_sweep(path, tmp_path / "out", train_fn=fake, echo=lambda s: None)
    assert fake.tests == [None] and rows[0]["test/acc"] in (None, "")


@pytest.mark.parametrize(
    ("which", "summary", "expected"),
    [
        ("last", {"best_ckpt": "b.ckpt", "last_ckpt": "l.ckpt"}, "l.ckpt"),
        ("best", {"best_ckpt": "b.ckpt", "last_ckpt": "l.ckpt"}, "b.ckpt"),
        ("best", {"best_ckpt": None, "last_ckpt": "l.ckpt"}, "l.ckpt"),
    ],
)
def test_the_tested_checkpoint_is_the_one_named(which: str, summary: dict, expected: str) -> None:
    assert checkpoint_to_test(summary, which) == expected


def test_testing_the_last_checkpoint_of_a_fit_without_one_is_refused() -> None:
    with pytest.raises(RuntimeError, match=r"test: last needs last.ckpt"):
        checkpoint_to_test({"best_ckpt": "b.ckpt", "last_ckpt": None}, "last")


@pytest.mark.parametrize("bad", ["final", 1, "yes"])
def test_an_unknown_test_checkpoint_is_refused(tmp_path: Path, bad: object) -> None:
    path = write_sweep(tmp_path, [{"name": "none"}], seeds=(0,), test=bad)
    with pytest.raises(ValueError, match=r"test must be false, true \(= 'best'\) or one of"):
        run_sweep(path, tmp_path / "out", dry_run=True, echo=lambda s: None)


def test_command_line_set_overrides_every_run(
    tmp_path: Path, fake: FakeTrainer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(runner_mod, "default_train_fn", lambda: fake)
    path = write_sweep(tmp_path, [{"name": "none"}], seeds=(0, 1))
    out = tmp_path / "out"
    argv = [
        str(path),
        "--out",
        str(out),
        "--set",
        "data.root=/data/x",
        "--set",
        "trainer.max_epochs=7",
    ]
    assert ablate_main(argv) == 0
    assert len(fake.calls) == 2
    for args in fake.calls:
        assert arg(args, "data.root") == "/data/x" and arg(args, "trainer.max_epochs") == "7"
    fake.calls.clear()
    assert ablate_main(argv) == 0 and fake.calls == []  # same overrides: nothing to redo
    # without them the runs' settings differ: refused, then trained again when asked
    assert ablate_main([str(path), "--out", str(out)]) == 2 and fake.calls == []
    assert ablate_main([str(path), "--out", str(out), "--retrain-changed"]) == 0
    assert len(fake.calls) == 2


@pytest.mark.parametrize(
    ("item", "said"),
    [("trainer.max_epochs", "--set expects KEY=VALUE"), ("a=[1", "--set a=[1: ")],
)
def test_a_malformed_set_is_refused_by_name_before_anything_trains(
    tmp_path: Path,
    fake: FakeTrainer,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture,
    item: str,
    said: str,
) -> None:
    monkeypatch.setattr(runner_mod, "default_train_fn", lambda: fake)
    path = write_sweep(tmp_path, [{"name": "none"}], seeds=(0,))
    with pytest.raises(SystemExit) as e:
        ablate_main([str(path), "--out", str(tmp_path / "out"), "--set", item])
    assert e.value.code == 2 and fake.calls == []
    assert said in capsys.readouterr().err


def test_gpu_latency_on_a_machine_without_cuda_is_refused_before_training(
    tmp_path: Path, fake: FakeTrainer
) -> None:
    if torch.cuda.is_available():
        pytest.skip("CUDA is available here")
    path = write_sweep(tmp_path, [{"name": "none"}], profile={"device": "cuda"})
    with pytest.raises(ValueError, match="CUDA is not available"):
        run_sweep(path, tmp_path / "out", train_fn=fake, echo=lambda s: None)
    assert fake.calls == []


def test_atomic_write_keeps_the_old_file_when_interrupted(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    target = tmp_path / "results.csv"
    atomic_write_text(target, "old\n")

    def boom(*a: Any) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(os, "replace", boom)
    with pytest.raises(KeyboardInterrupt):
        atomic_write_text(target, "new\n" * 1000)
    assert target.read_text() == "old\n"
    assert [p.name for p in tmp_path.iterdir()] == ["results.csv"]  # no temporary left behind


def test_welch_interval_matches_scipy_and_degenerate_cases() -> None:
    from visattn.ablate.stats import mean_std, welch_ci

    a, b = [91.2, 90.8, 91.5, 90.9], [90.1, 90.6, 89.8]
    diff, lo, hi = welch_ci(mean_std(a), mean_std(b))
    ci = stats.ttest_ind(a, b, equal_var=False).confidence_interval(0.95)
    assert (lo, hi) == pytest.approx((ci.low, ci.high))
    assert diff == pytest.approx(statistics.mean(a) - statistics.mean(b))
    _, lo1, hi1 = welch_ci(mean_std([1.0]), mean_std(b))
    assert math.isnan(lo1) and math.isnan(hi1)
    assert welch_ci(mean_std([2.0, 2.0]), mean_std([1.0, 1.0])) == (1.0, 1.0, 1.0)


# --------------------------------------------------------------------------- real training


def _real_sweep(tmp_path: Path, variants: list[dict]) -> Path:
    data = {
        "name": "tiny_real",
        "base": [str(REPO / "configs" / "quickstart.yaml")],
        "seeds": [0, 1],
        "set": TINY_SET,
        "variants": variants,
        "profile": {"batch": 8, "warmup": 1, "repeats": 2},
        "localization": {"max_images": 32},
    }
    path = tmp_path / "sweep.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


@pytest.fixture
def real_cli() -> Any:
    cli = pytest.importorskip("visattn.training.cli")
    if not (REPO / "configs" / "quickstart.yaml").is_file():
        pytest.skip("configs/quickstart.yaml is missing")
    return cli


def test_tiny_real_sweep_end_to_end(
    tmp_path: Path, real_cli: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls: list[list[str]] = []
    real_run = real_cli.run

    def counting_run(args: list[str], **kw) -> dict:
        calls.append(args)
        return real_run(args, **kw)

    monkeypatch.setattr(real_cli, "run", counting_run)  # the runner calls cli.run at run time
    broken = {
        "name": "broken",
        "set": {"model.attention": {"name": "se", "args": {"reduction": 0}}},
    }
    good = [
        {"name": "none", "set": {"model.attention": None}},
        {"name": "spatial", "set": {"model.attention": {"name": "spatial"}}},
    ]
    out = tmp_path / "out"
    # a variant that cannot build is refused before anything trains, named with its error
    with pytest.raises(ValueError, match=r"variant 'broken': ValueError: .*reduction"):
        run_sweep(_real_sweep(tmp_path, [*good, broken]), out, echo=lambda s: None)
    assert calls == []
    path = _real_sweep(tmp_path, good)
    rows = run_sweep(path, out, echo=lambda s: None)
    assert len(calls) == 4
    assert [r["status"] for r in rows] == ["ok"] * 4
    csv_rows = read_csv(out / "results.csv")
    ok = [r for r in csv_rows if r["status"] == "ok"]
    assert len(ok) == 4
    for r in ok:
        assert int(r["params"]) > 0 and int(r["macs"]) > 0
        assert float(r["latency_ms"]) > 0 and float(r["throughput"]) > 0
        # the threads it was timed with, against which its load average is read
        assert int(r["profile_threads"]) == torch.get_num_threads()
        assert 0.0 <= float(r["val/acc"]) <= 1.0
        assert r["model"] == "resnet20_cifar"
        # Grad-CAM scores every network, the baseline included
        assert 0.0 <= float(r["gradcam/pointing"]) <= 1.0
        assert 0.0 <= float(r["gradcam/energy"]) <= 1.0
        assert float(r["val/loss"]) > 0 and r["attempts"] == "1"
    assert {json.loads(r["attention"]) is None for r in ok[:2]} == {True}
    # params and MACs differ by the attention's own
    assert int(ok[2]["params"]) > int(ok[0]["params"])
    # localization: none has no block to score, spatial has one per residual block
    assert ok[0]["loc/pointing"] == "" and ok[0]["loc/blocks"] == "0"
    assert int(ok[2]["loc/blocks"]) == 9
    assert 0.0 <= float(ok[2]["loc/pointing"]) <= 1.0 and 0.0 < float(ok[2]["loc/energy"]) < 1.0
    _check_report_against_csv(out, "none")
    report = (out / "report.md").read_text()
    assert "loc/pointing" in report and "gradcam/pointing" in report
    _check_pngs(out)

    # a second pass trains nothing
    calls.clear()
    run_sweep(path, out, echo=lambda s: None)
    assert calls == []

    # deleting one run's artefacts re-runs only that run
    shutil.rmtree(out / "runs" / "spatial" / "seed0")
    calls.clear()
    rows = run_sweep(path, out, echo=lambda s: None)
    assert [arg(a, "trainer.default_root_dir").split("runs/")[1] for a in calls] == [
        "spatial/seed0"
    ]
    assert [r["status"] for r in rows] == ["ok"] * 4


def test_a_finished_run_is_reported_with_the_sweeps_metric() -> None:
    """Issue 62 item 10: a --jobs sweep reported 'ok' without the figure, and a report line
    said 'val/acc ?' when the sweep's metric was test/acc."""
    from visattn.ablate.runner import _outcome

    assert _outcome({"status": "ok", "test/acc": 0.5, "val/acc": 0.9}, "test/acc") == (
        "ok, test/acc 0.5000"
    )
    assert _outcome({"status": "ok"}, "test/acc") == "ok, test/acc ?"
    assert _outcome({"status": "failed", "error": "E: x"}, "test/acc") == "FAILED (E: x)"


def test_an_extended_sweeps_report_names_its_new_runs(tmp_path: Path, fake: FakeTrainer) -> None:
    """Trial of round 7: after a sweep was extended only the console marked the new runs;
    report.md names every planned run without a row, with the console's reason."""
    out = tmp_path / "out"
    path = write_sweep(tmp_path, [{"name": "none"}])
    run_sweep(path, out, train_fn=fake, echo=lambda s: None)
    assert "Not run yet" not in (out / "report.md").read_text()
    se = {"name": "se", "set": {"model.attention": {"name": "se"}}}
    path = write_sweep(tmp_path, [{"name": "none"}, se], seeds=(0, 1, 2))

    def stop_after_one(args: list[str], **kw: Any) -> dict:
        if len(fake.calls) == 1:
            raise KeyboardInterrupt
        return fake(args, **kw)

    fake.calls.clear()
    with pytest.raises(KeyboardInterrupt):
        run_sweep(path, out, train_fn=stop_after_one, echo=lambda s: None)
    runner_mod.write_outputs(load_sweep(path), out, None)
    note = next(ln for ln in (out / "report.md").read_text().splitlines() if "Not run yet" in ln)
    assert note == (
        "- **Not run yet** (3 of 6 runs), by why: cut off before it finished: se (seed 0); "
        "new: se (seeds 1, 2)."
    ), note
