"""Sweep command-line checks before anything runs: more CPU threads at once than the machine has
say so in one line, and a recipe that trains nothing is refused (probe of round 7: --threads
100000, --jobs 1000 and trainer.max_epochs 0 passed a dry run without a word)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from helpers.ablate import write_sweep

from visattn.ablate.__main__ import main


@pytest.mark.parametrize("extra", [["--jobs", "1000"], ["--threads", "100000"]])
def test_more_threads_than_cpus_warns_in_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], extra: list[str]
) -> None:
    path = write_sweep(tmp_path, [{"name": "none", "set": {"model.attention": None}}], seeds=(0,))
    main([str(path), "--out", str(tmp_path / "out"), "--dry-run", *extra])
    lines = [ln for ln in capsys.readouterr().err.splitlines() if "CPU threads" in ln]
    assert len(lines) == 1 and f"on a machine with {os.cpu_count()}" in lines[0]


def test_threads_within_the_machine_do_not_warn(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = write_sweep(tmp_path, [{"name": "none", "set": {"model.attention": None}}], seeds=(0,))
    main([str(path), "--out", str(tmp_path / "out"), "--dry-run", "--threads", "1"])
    assert "CPU threads" not in capsys.readouterr().err


def test_a_dry_run_refuses_zero_epochs_as_train_cls_does(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Probe of round 7: a sweep dry run accepted trainer.max_epochs 0 (a fit that trains
    nothing); it is refused as train_cls.py refuses it."""
    path = write_sweep(tmp_path, [{"name": "none", "set": {"model.attention": None}}], seeds=(0,))
    text = path.read_text().replace("trainer.max_epochs: 3", "trainer.max_epochs: 0")
    path.write_text(text)
    assert main([str(path), "--out", str(tmp_path / "out"), "--dry-run"]) == 2
    assert (
        "--trainer.max_epochs must be >= 1 (or -1 for no limit), got 0" in capsys.readouterr().err
    )
