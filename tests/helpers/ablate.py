"""Helpers of the ablation tests: sweep files written in a temporary folder, the fake trainer
that stands in for ``visattn.training.cli.run`` (the ``fake`` fixture of tests/ablate/conftest.py
installs it) and the report's table parsed back."""

from __future__ import annotations

import csv
from pathlib import Path
from typing import Any

import yaml

#: ``set:`` overrides of a real sweep that costs seconds: 2 epochs of 2 batches of shapes at 16
#: images, ResNet-20, no progress bar or summary
TINY_SET = {
    "trainer.max_epochs": 2,
    "trainer.limit_train_batches": 2,
    "trainer.limit_val_batches": 2,
    "trainer.enable_progress_bar": False,
    "trainer.enable_model_summary": False,
    "data.num_train": 64,
    "data.num_val": 32,
    "data.num_test": 32,
    "data.batch_size": 16,
    "data.num_workers": 0,
    "model.model": "resnet20_cifar",
}


def write_sweep(tmp_path: Path, variants: list[dict], seeds=(0, 1), **extra: Any) -> Path:
    """A sweep file in ``tmp_path`` over ``variants`` (seeds, a 3-epoch ``set`` and a base config
    of its own), with ``extra`` top-level keys; returns its path."""
    base = tmp_path / "base.yaml"
    base.write_text("trainer:\n  max_epochs: 1\n")
    data = {
        "name": "tiny",
        "base": [str(base)],
        "seeds": list(seeds),
        "set": {"trainer.max_epochs": 3},
        "variants": variants,
        **extra,
    }
    path = tmp_path / "sweep.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def arg(args: list[str], key: str) -> str | None:
    """The value of ``--key=value`` in ``args``, or None."""
    for a in args:
        if a.startswith(f"--{key}="):
            return a.split("=", 1)[1]
    return None


class FakeTrainer:
    """Stands in for visattn.training.cli.run: writes a metrics.csv and a checkpoint file, and
    returns an accuracy that depends on the variant's attention and the seed."""

    def __init__(self) -> None:
        self.calls: list[list[str]] = []
        self.tests: list[str | None] = []  # what each call was asked to test when fit ends

    def __call__(
        self, args: list[str], *, test: str | None = None, then: Any = None
    ) -> dict[str, Any]:
        """``visattn.training.cli.run``'s signature: ``then`` sees the summary (no network)."""
        self.calls.append(args)
        self.tests.append(test)
        attention = yaml.safe_load(arg(args, "model.attention") or "null")
        if isinstance(attention, str):  # a block name alone
            attention = {"name": attention}
        if isinstance(attention, list):
            attention = attention[0] if attention else None
        if attention and attention.get("args", {}).get("bogus"):
            raise TypeError("block 'se': unknown option 'bogus'; valid options: reduction\nmore")
        seed = int(arg(args, "seed_everything"))
        root = Path(arg(args, "trainer.default_root_dir"))
        log_dir = root / "lightning_logs" / "version_0"
        (log_dir / "checkpoints").mkdir(parents=True)
        base = 0.5 if attention is None else 0.6
        accs = [base - 0.2 + 0.1 * e + 0.01 * seed for e in range(3)]
        with open(log_dir / "metrics.csv", "w", newline="") as f:
            w = csv.writer(f)
            w.writerow(["epoch", "train/loss", "val/loss", "val/acc", "val/acc5"])
            for e, a in enumerate(accs):
                w.writerow([e, 1.0, 1.0, a, 1.0])
        (log_dir / "checkpoints" / "last.ckpt").write_bytes(b"ckpt")
        summary = {
            "log_dir": str(log_dir),
            "metrics_csv": str(log_dir / "metrics.csv"),
            "best_val_acc": max(accs),
            "last_val_acc": accs[-1],
            "test_acc": None,
            "params": 1000 if attention is None else 1100,
            "macs": 5000 + (attention is not None),
            "wall_s": 0.1,
            "best_ckpt": None,
            "last_ckpt": str(log_dir / "checkpoints/last.ckpt"),
            "epochs": 3,
        }
        if then is not None:
            then(None, None, summary)
        return summary


def parse_report(text: str) -> dict[str, dict[str, str]]:
    """The report's table as {variant: {header: cell}} (the ★/failed marks stripped from names)."""
    lines = [ln for ln in text.splitlines() if ln.startswith("|")]
    head = [c.strip() for c in lines[0].strip("|").split("|")]
    table = {}
    for ln in lines[2:]:
        cells = [c.strip() for c in ln.strip("|").split("|")]
        if len(cells) != len(head):
            break  # the failed-runs table
        row = dict(zip(head, cells))
        table[row["variant"].split(" ")[0]] = row
    return table
