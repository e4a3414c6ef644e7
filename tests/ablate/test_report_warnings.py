"""A report says where its figures cannot be taken at face value: runs that ended near chance
(T5: a recipe that cannot learn was reported as "8 ok"), and timings taken under load, on other
processors or in unknown conditions (T4: latency measured beside the sweep's other runs)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from helpers.paths import REPO

from visattn.ablate.report import near_chance, render_report


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
    assert "1 run(s) were timed while the machine's load average was above" in text
    assert "Timings on 2 processors** (A; B)" in text
    old = render_report(_rows(), name="s", baseline="none")  # rows of an older visattn
    assert "4 of 4 runs were timed before visattn recorded the conditions" in old


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
