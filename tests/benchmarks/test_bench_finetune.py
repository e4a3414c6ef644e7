"""benchmarks/bench_finetune.py's orchestration, with the runs replaced by stand-ins (the real
runs train on CIFAR-10): which runs it makes, with which placements, and the table it writes."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from helpers.benchmarks import benchmark_module


@pytest.fixture(scope="module")
def bench_finetune():
    yield from benchmark_module("bench_finetune")


def _option(args: list[str], key: str) -> str | None:
    values = [a.split("=", 1)[1] for a in args if a.startswith(f"{key}=")]
    return values[-1] if values else None


def test_every_block_and_init_is_validated_then_finetuned(bench_finetune, tmp_path, monkeypatch):
    (tmp_path / "data" / "cifar-10-batches-py").mkdir(parents=True)
    fits: list[list[str]] = []
    validations: list[list[str]] = []

    def fake_run(args: list[str]) -> dict:
        fits.append(args)
        metrics = Path(_option(args, "--trainer.default_root_dir")) / "metrics.csv"
        metrics.parent.mkdir(parents=True, exist_ok=True)
        metrics.write_text(f"epoch,train/loss,val/loss,val/acc\n0,1.0,0.{len(fits)},0.5\n")
        return {"last_val_acc": 0.01 * len(fits), "epochs": 1, "metrics_csv": str(metrics)}

    def fake_validate(args: list[str]) -> dict:
        validations.append(args)
        return {"acc": 0.001 * len(validations), "loss": 2.0}

    monkeypatch.setattr(bench_finetune, "run", fake_run)
    monkeypatch.setattr(bench_finetune, "validate", fake_validate)
    out = tmp_path / "table.md"
    argv = ["--data-root", str(tmp_path / "data"), "--work", str(tmp_path / "work")]
    assert bench_finetune.main([*argv, "--blocks", "se", "cbam", "--out", str(out)]) == 0

    cases = [(b, i) for b in ("se", "cbam") for i in bench_finetune.INITS]
    assert len(fits) == 1 + len(cases)  # the source network, then one epoch per case
    assert _option(fits[0], "--model.attention") is None
    for (block, init), args in zip(cases, fits[1:]):
        assert json.loads(_option(args, "--model.attention")) == bench_finetune.placement(
            block, init
        )
        assert _option(args, "--trainer.max_epochs") == "1"
    assert _option(validations[0], "--model.attention") == "null"  # the original network
    assert len(validations) == 1 + len(cases)
    table = [line for line in out.read_text().splitlines() if line.startswith("| se ")]
    assert [line.split(" | ")[1] for line in table] == list(bench_finetune.INITS)
    assert table[0].split(" | ")[5] == "2.00"  # acc after the first fine-tuning fit (0.02)


def test_without_the_data_it_says_so_and_succeeds(bench_finetune, tmp_path, capsys):
    assert bench_finetune.main(["--data-root", str(tmp_path)]) == 0
    assert "skipped: no CIFAR-10" in capsys.readouterr().out
