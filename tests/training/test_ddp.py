"""Multi-process DDP for one run (Lightning, gloo on CPU): one metrics.csv, one set of
checkpoints, and val/acc computed over the whole validation set (torchmetrics synced across the
processes), not over one process's shard."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from helpers.paths import REPO


@pytest.mark.xdist_group("multiprocess")  # with the other multi-process tests
def test_ddp_on_two_cpu_processes_logs_one_synced_run(tmp_path: Path) -> None:
    pytest.importorskip("visattn.training.cli")
    root = tmp_path / "ddp"
    cmd = [
        sys.executable,
        str(REPO / "train_cls.py"),
        "fit",
        "--config",
        str(REPO / "configs" / "quickstart.yaml"),
        "--model.model=resnet20_cifar",
        "--trainer.accelerator=cpu",
        "--trainer.devices=2",
        "--trainer.strategy=ddp",
        "--trainer.max_epochs=2",
        "--trainer.limit_train_batches=2",
        "--trainer.enable_progress_bar=false",
        "--trainer.enable_model_summary=false",
        "--data.num_train=64",
        "--data.num_val=48",  # 24 per process: no padding by the distributed sampler
        "--data.batch_size=8",
        f"--trainer.default_root_dir={root}",
    ]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(REPO)}
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600, env=env, cwd=REPO)
    assert proc.returncode == 0, proc.stderr[-3000:]
    metrics = list(root.rglob("metrics.csv"))
    assert len(metrics) == 1, metrics
    ckpt_dirs = {p.parent for p in root.rglob("*.ckpt")}
    assert len(ckpt_dirs) == 1 and (next(iter(ckpt_dirs)) / "last.ckpt").is_file()
    assert proc.stdout.count("visattn fit:") == 1  # one summary line, from rank 0

    from visattn.files import read_metrics_csv
    from visattn.training.load import load_run

    rows = read_metrics_csv(metrics[0])
    assert [r["epoch"] for r in rows] == [0, 1]
    # val/acc of the last epoch, recomputed here in one process over the whole validation set
    run = load_run(next(iter(ckpt_dirs)) / "last.ckpt")
    dm = run.datamodule
    dm.setup("validate")
    images = torch.stack([torch.as_tensor(x) for x, _ in dm.val_dataset])
    labels = torch.tensor([int(y) for _, y in dm.val_dataset])
    with torch.no_grad():
        acc = (run.net(images).argmax(1) == labels).float().mean().item()
    assert rows[-1]["val/acc"] == pytest.approx(acc, abs=1e-6)
    # a shard's accuracy is a multiple of 1/24; the whole set's of 1/48: the logged value is
    # not one shard's unless both agree
    assert len(dm.val_dataset) == 48
