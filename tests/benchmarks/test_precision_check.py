"""benchmarks/precision_check.py: pairs two sweeps' runs of one variant by seed and decides."""

from __future__ import annotations

import json
import math
import statistics
from pathlib import Path

import pytest
from helpers.benchmarks import benchmark_module
from helpers.paths import REPO
from scipy import stats

RESULTS = REPO / "benchmarks" / "results"
SETTINGS = {"model.model": '"resnet20_cifar"', "trainer.max_epochs": "10", "seed_everything": "0"}


@pytest.fixture(scope="module")
def check():
    yield from benchmark_module("precision_check")


def _sweep(root: Path, accs: dict[int, float], **extra: str) -> Path:
    for seed, acc in accs.items():
        run = root / "runs" / "resnet20_none" / f"seed{seed}"
        run.mkdir(parents=True)
        marker = {
            "row": {
                "run": f"resnet20_none/seed{seed}",
                "seed": seed,
                "status": "ok",
                "test/acc": acc,
                "wall_s": 60.0,
                "profile_cpu": "a cpu",
            },
            "args": [],
            "settings_format": 2,
            "settings": {**SETTINGS, "seed_everything": str(seed), **extra},
        }
        (run / "result.json").write_text(json.dumps(marker))
    return root


def test_the_interval_is_the_paired_t_interval_of_the_differences(tmp_path, check):
    ref = {0: 0.8328, 1: 0.8345, 2: 0.8330}
    cand = {0: 0.8331, 1: 0.8341, 2: 0.8338}
    a = _sweep(tmp_path / "bf16", cand, **{"trainer.precision": '"bf16-mixed"'})
    b = _sweep(tmp_path / "fp32", ref)
    rows, s = check.compare(a, b, "resnet20_none", "test/acc", 0.3)
    d = [(cand[k] - ref[k]) * 100 for k in sorted(ref)]
    half = stats.t.ppf(0.975, len(d) - 1) * statistics.stdev(d) / math.sqrt(len(d))
    assert [r["seed"] for r in rows] == [0, 1, 2]
    assert s["n"] == 3
    assert s["diff"] == pytest.approx(statistics.fmean(d), rel=1e-9)
    assert (s["low"], s["high"]) == pytest.approx(
        (statistics.fmean(d) - half, statistics.fmean(d) + half), rel=1e-9
    )
    assert s["low"] >= -0.3 and s["high"] <= 0.3  # differences of 0.03, -0.04, 0.08 points
    assert s["verdict"].startswith("accepted")
    assert 'trainer.precision="bf16-mixed"' in rows[0]["candidate_mode"]
    assert "trainer.precision=(default)" in rows[0]["reference_mode"]


def test_a_difference_wider_than_the_margin_is_not_accepted(tmp_path, check):
    a = _sweep(tmp_path / "a", {0: 0.80, 1: 0.84, 2: 0.81})
    b = _sweep(tmp_path / "b", {0: 0.83, 1: 0.83, 2: 0.83})
    _, s = check.compare(a, b, "resnet20_none", "test/acc", 0.3)
    assert s["low"] < -0.3 < s["high"]
    assert s["verdict"].startswith("not accepted") and "too wide" in s["verdict"]
    # a shift the interval resolves: every difference about -0.6 points
    a = _sweep(tmp_path / "c", {0: 0.8267, 1: 0.8289, 2: 0.8278})
    b = _sweep(tmp_path / "d", {0: 0.8328, 1: 0.8345, 2: 0.8330})
    _, s = check.compare(a, b, "resnet20_none", "test/acc", 0.3)
    assert s["high"] < -0.3 and "wholly outside" in s["verdict"]


@pytest.mark.skipif(not (RESULTS / "cifar10_bf16_check").is_dir(), reason="no committed check")
def test_the_committed_check_pairs_older_markers_with_newer_ones(check):
    # the leaderboard's fp32 markers predate the settings format the check's markers have: the
    # check reads both as the runner does, so only the precision differs
    rows, s = check.compare(
        RESULTS / "cifar10_bf16_check", RESULTS / "cifar10_cpu", "resnet20_none", "test/acc", 0.3
    )
    assert [r["seed"] for r in rows] == [0, 1, 2] and s["unfinished"] == [3, 4]


def test_one_pair_is_undecided_and_unpaired_seeds_are_named(tmp_path, check):
    a = _sweep(tmp_path / "a", {0: 0.83})
    b = _sweep(tmp_path / "b", {0: 0.83, 1: 0.84})
    _, s = check.compare(a, b, "resnet20_none", "test/acc", 0.3)
    assert s["verdict"].startswith("undecided") and s["unfinished"] == [1]


def test_runs_that_differ_in_more_than_the_mode_are_refused(tmp_path, check):
    a = _sweep(tmp_path / "a", {0: 0.83}, **{"trainer.max_epochs": "30"})
    b = _sweep(tmp_path / "b", {0: 0.83})
    with pytest.raises(ValueError, match=r"seed 0: the runs differ in trainer.max_epochs"):
        check.compare(a, b, "resnet20_none", "test/acc", 0.3)


def test_a_sweep_without_the_variant_is_a_clear_error(tmp_path, check):
    b = _sweep(tmp_path / "b", {0: 0.83})
    with pytest.raises(FileNotFoundError, match="no runs of resnet20_se"):
        check.compare(b, b, "resnet20_se", "test/acc", 0.3)


def test_main_writes_the_report(tmp_path, check, capsys):
    a = _sweep(tmp_path / "a", {0: 0.831, 1: 0.834})
    b = _sweep(tmp_path / "b", {0: 0.830, 1: 0.835})
    out = tmp_path / "check.md"
    assert check.main(["--candidate", str(a), "--reference", str(b), "--out", str(out)]) == 0
    text = out.read_text()
    assert "over 2 pairs" in text and "**Verdict:" in text and "| seed |" in text
    assert capsys.readouterr().out.strip() == text.strip()


def test_a_folder_of_fit_runs_serves_as_the_reference(tmp_path, check):
    # the reference setting trained again with train_cls.py fit (on the candidate's host): its
    # settings come from the saved config.yaml, its metric is the last epoch's val/acc
    from helpers.training import tiny_fit

    from visattn.files import read_metrics_csv

    summary = tiny_fit(tmp_path / "ctl" / "seed0", "--trainer.max_epochs=1")
    runs = check.fit_runs(tmp_path / "ctl")
    assert list(runs) == [0]
    last = read_metrics_csv(summary["metrics_csv"])[-1]["val/acc"]
    assert runs[0]["row"]["val/acc_last"] == last
    assert not [k for k in runs[0]["settings"] if k.startswith("trainer.logger")]
    # a candidate that differs only in precision pairs with it; one that differs elsewhere not
    settings = {**runs[0]["settings"], "trainer.precision": '"bf16-mixed"'}
    marker = {"row": {"seed": 0, "status": "ok", "val/acc_last": last - 0.01}, "args": []}
    run = tmp_path / "cand" / "runs" / "resnet20_none" / "seed0"
    run.mkdir(parents=True)
    (run / "result.json").write_text(
        json.dumps({**marker, "settings_format": 2, "settings": settings})
    )
    rows, s = check.compare(
        tmp_path / "cand", tmp_path / "ctl", "resnet20_none", "val/acc_last", 0.3
    )
    assert [r["diff"] for r in rows] == ["-1.00"] and s["verdict"].startswith("undecided")
    settings["model.lr"] = "0.5"
    (run / "result.json").write_text(
        json.dumps({**marker, "settings_format": 2, "settings": settings})
    )
    with pytest.raises(ValueError, match=r"differ in model\.lr"):
        check.compare(tmp_path / "cand", tmp_path / "ctl", "resnet20_none", "val/acc_last", 0.3)
