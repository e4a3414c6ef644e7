"""Runs never silently test the wrong weights, resume exactly, and refuse damaged or diverging
state (the training side of the reliability issue)."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest
import torch
from helpers.files import read_csv
from helpers.training import TINY, tiny_fit

from visattn.training import NonFiniteLossError, run


def test_test_with_ckpt_last_and_no_checkpoint_fails_naming_the_folder(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match=str(tmp_path / "lightning_logs")):
        run(["test", *TINY, f"--trainer.default_root_dir={tmp_path}", "--ckpt_path=last"])


def test_test_with_ckpt_last_uses_the_runs_last_checkpoint(tmp_path: Path) -> None:
    fit = tiny_fit(tmp_path, "--trainer.max_epochs=1")
    by_last = run(["test", *TINY, f"--trainer.default_root_dir={tmp_path}", "--ckpt_path=last"])
    by_path = run(
        ["test", *TINY, f"--trainer.default_root_dir={tmp_path}", f"--ckpt_path={fit['last_ckpt']}"]
    )
    assert by_last["test_acc"] == by_path["test_acc"]


def test_resume_at_an_epoch_boundary_is_bit_exact(tmp_path: Path) -> None:
    whole = tiny_fit(tmp_path / "whole", "--trainer.max_epochs=3", "--data.cutout=4")
    tiny_fit(tmp_path / "cut", "--trainer.max_epochs=2", "--data.cutout=4")
    resumed = tiny_fit(
        tmp_path / "cut", "--trainer.max_epochs=3", "--data.cutout=4", "--ckpt_path=last"
    )
    assert Path(resumed["metrics_csv"]).read_text() == Path(whole["metrics_csv"]).read_text()


def test_resume_rebuilds_a_damaged_metrics_row_from_the_checkpoint(tmp_path: Path) -> None:
    first = tiny_fit(tmp_path, "--trainer.max_epochs=2")
    path = Path(first["metrics_csv"])
    good = read_csv(path)
    rows = [dict(r) for r in good]
    rows[0]["val/acc"] = "0.99"  # damaged: a best epoch that never happened
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows(rows)
    resumed = tiny_fit(tmp_path, "--trainer.max_epochs=3", "--ckpt_path=last")
    after = read_csv(resumed["metrics_csv"])
    assert after[:2] == good
    assert resumed["best_val_acc"] == max(float(r["val/acc"]) for r in after)


def test_resuming_a_finished_run_prints_the_real_summary(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    first = tiny_fit(tmp_path, "--trainer.max_epochs=2")
    again = tiny_fit(tmp_path, "--trainer.max_epochs=2", "--ckpt_path=last")
    assert again["epochs"] == 2
    assert again["best_val_acc"] == first["best_val_acc"]
    assert again["best_epoch"] == first["best_epoch"]
    out = capsys.readouterr().out.strip().splitlines()[-1]
    assert "n/a" not in out and f"(epoch {first['best_epoch']})" in out


def test_diverging_run_stops_on_non_finite_validation_loss(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The training loss stays finite while the validation loss is NaN from epoch 1 on (as when
    BN running statistics overflow): the run stops there and saves no checkpoint of it."""
    from visattn.training import ClassificationModule

    real = ClassificationModule._loss

    def poisoned(self, logits, y):
        loss = real(self, logits, y)
        return loss * float("nan") if not self.training and self.current_epoch >= 1 else loss

    monkeypatch.setattr(ClassificationModule, "_loss", poisoned)
    with pytest.raises(NonFiniteLossError, match=r"validation loss became non-finite .* epoch 1"):
        tiny_fit(tmp_path, "--trainer.max_epochs=3")
    saved = sorted(tmp_path.rglob("*.ckpt"))
    assert saved, "epoch 0 was finite and should have been saved"
    for ckpt in saved:
        assert torch.load(ckpt, map_location="cpu", weights_only=False)["epoch"] == 0
