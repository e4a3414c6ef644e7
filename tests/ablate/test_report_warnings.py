"""A report says where its figures cannot be taken at face value: runs that ended near chance
(T5: a recipe that cannot learn was reported as "8 ok"), and timings taken under load, on other
processors or in unknown conditions (T4: latency measured beside the sweep's other runs)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from helpers.paths import REPO

from visattn.ablate.report import BUSY_MARGIN, busy, near_chance, render_report


def _rows(**extra) -> list[dict]:
    return [
        {
            "run": f"{v}/seed{s}",
            "variant": v,
            "seed": s,
            "status": "ok",
            "val/acc": acc,
            "latency_ms": 2.0,
            **extra,
        }
        for s in (0, 1)
        for v, acc in (("none", 0.62 + s / 100), ("se", 0.64 + s / 100))
    ]


def test_a_run_near_chance_is_named_in_the_report() -> None:
    rows = _rows(num_classes=9, profile_load=0.3, profile_cpu="X")
    rows[1]["val/acc"] = 0.12  # se/seed0: 9 classes, chance 0.111
    assert near_chance(rows[1], "val/acc") == pytest.approx(1 / 9)
    assert near_chance(rows[0], "val/acc") is None
    assert near_chance({**rows[1], "num_classes": None}, "val/acc") is None  # unknown: no claim
    text = render_report(rows, name="s", baseline="none")
    assert "1 run(s) ended near chance" in text and "`se/seed0` (chance 0.111)" in text


def test_timings_under_load_on_other_processors_or_unrecorded_are_flagged() -> None:
    clean = render_report(_rows(profile_load=0.2, profile_cpu="A"), name="s", baseline="none")
    assert "Timings" not in clean
    rows = _rows(profile_load=0.2, profile_cpu="A")
    rows[0]["profile_load"], rows[3]["profile_cpu"] = 1.9, "B"
    text = render_report(rows, name="s", baseline="none")
    assert "1 run(s) were timed while the machine's load average exceeded the run's own" in text
    assert "Timings on 2 processors** (A; B)" in text
    old = render_report(_rows(), name="s", baseline="none")  # rows of an older visattn
    assert "4 of 4 runs were timed before visattn recorded the conditions" in old


def test_under_load_means_load_beyond_the_runs_own_threads() -> None:
    """The 1-minute load average counts the run's own threads: a 4-thread run timed alone
    reads about 4 and is not under load; a 1-thread run beside another 1-thread run reads
    about 2 and is. Rows from before ``profile_threads`` was recorded keep the one-thread rule
    they were written under."""
    assert not busy({"profile_load": 4.1, "profile_threads": 4})
    assert busy({"profile_load": 4.0 + BUSY_MARGIN + 0.01, "profile_threads": 4})
    assert busy({"profile_load": 2.0, "profile_threads": 1})
    assert not busy({"profile_load": 1.0 + BUSY_MARGIN, "profile_threads": 1})
    assert busy({"profile_load": 1.9}) and not busy({"profile_load": 1.4})  # no threads: one
    assert not busy({"profile_load": None, "profile_threads": 2})  # unknown, not busy
    rows = _rows(profile_load=3.9, profile_threads=4, profile_cpu="A")
    assert "Timings" not in render_report(rows, name="s", baseline="none")
    rows[2]["profile_threads"] = 2
    text = render_report(rows, name="s", baseline="none")
    assert "1 run(s) were timed while the machine's load average exceeded the run's own" in text


def test_the_latency_plot_says_in_its_title_why_its_timings_do_not_compare(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The plot has no bullets under it: a scatter of latencies taken beside other runs (where a
    block could look faster than the plain network) carries the report's caveat in its title,
    and names the processor where one timed every run."""
    from visattn.ablate import plots

    drawn: dict[str, tuple[str, str]] = {}
    real_save = plots._save
    monkeypatch.setattr(
        plots,
        "_save",
        lambda fig, path: (
            drawn.__setitem__(path.name, (fig.axes[0].get_title(), fig.axes[0].get_xlabel()))
            or real_save(fig, path)
        ),
    )
    plots.write_plots(_rows(profile_load=0.2, profile_cpu="A"), tmp_path, baseline="none")
    assert drawn["acc_vs_latency.png"] == ("", "latency at batch 1 (ms) on A")
    assert drawn["acc_vs_params.png"][0] == ""
    rows = _rows(profile_load=0.2, profile_cpu="A")
    rows[0]["profile_load"], rows[1]["profile_load"], rows[3]["profile_cpu"] = 1.9, 2.1, "B"
    plots.write_plots(rows, tmp_path, baseline="none")
    title, label = drawn["acc_vs_latency.png"]
    assert " ".join(title.split()).startswith(
        "not comparable: of 4 timed runs, 2 under load, on 2 processors"
    )
    assert label == "latency at batch 1 (ms)"
    plots.write_plots(_rows(), tmp_path, baseline="none")  # rows of an older visattn
    title, label = drawn["acc_vs_latency.png"]
    assert "4 in unrecorded conditions" in " ".join(title.split())
    assert label == "latency at batch 1 (ms)"  # no processor recorded: none named


def test_a_warm_up_longer_than_the_run_is_said_before_anything_trains(tmp_path: Path) -> None:
    from visattn.ablate import run_sweep

    sweep = {
        "name": "warm",
        "base": [str(REPO / "configs" / "quickstart.yaml")],
        "seeds": [0],
        "set": {"model.warmup_epochs": 5, "trainer.max_epochs": 4},
        "variants": [{"name": "none", "set": {"model.attention": None}}],
    }
    path = tmp_path / "sweep.yaml"
    path.write_text(yaml.safe_dump(sweep))
    with pytest.warns(UserWarning, match=r"variant 'none'.*never reaches model\.lr"):
        run_sweep(path, tmp_path / "out", dry_run=True, echo=lambda s: None)
