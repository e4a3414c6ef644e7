"""visattn.files (atomic writes, metrics.csv reading, file digests) and
visattn.training.load.load_run (used by export, the ablation runner and the visualiser)."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from visattn.files import atomic_write_text, file_digest, read_metric_curve, read_metrics_csv
from visattn.training.load import load_run


def test_metrics_csv_rows_and_curve_keep_the_last_value_of_each_epoch(tmp_path: Path) -> None:
    path = tmp_path / "metrics.csv"
    atomic_write_text(
        path,
        "epoch,step,val/acc,train/loss\n0,10,0.25,\n0,10,0.5,1.5\n1,20,,1.2\n2.0,30,0.75,1.0\n",
    )
    rows = read_metrics_csv(path)
    assert rows[1] == {"epoch": 0, "step": 10, "val/acc": 0.5, "train/loss": 1.5}
    assert rows[2]["val/acc"] is None and rows[3]["epoch"] == 2
    assert read_metric_curve(path) == {0: 0.5, 2: 0.75}
    assert read_metric_curve(path, "train/loss") == {0: 1.5, 1: 1.2, 2: 1.0}
    assert read_metric_curve(tmp_path / "missing.csv") == {}


def test_file_digest_is_size_and_sha256(tmp_path: Path) -> None:
    path = tmp_path / "x.bin"
    data = bytes(range(256)) * 5000  # over one read chunk
    path.write_bytes(data)
    assert file_digest(path, chunk=4096) == {
        "size": len(data),
        "sha256": hashlib.sha256(data).hexdigest(),
    }


def test_load_run_names_a_file_that_is_not_a_checkpoint(tmp_path: Path) -> None:
    cfg = tmp_path / "config.yaml"
    cfg.write_text("model:\n  model: resnet20_cifar\n")
    with pytest.raises(ValueError, match=r"config\.yaml is not a PyTorch checkpoint"):
        load_run(cfg)
    with pytest.raises(FileNotFoundError, match=r"nope\.ckpt does not exist"):
        load_run(tmp_path / "nope.ckpt")


def test_atomically_written_files_get_the_permissions_open_would_give(tmp_path) -> None:
    """P15: results.csv, report.md, plots, markers and metrics.csv were mode 0600 (mkstemp's),
    beside Lightning's own 0644 files."""
    import os

    from visattn.files import atomic_write_text

    old = os.umask(0o022)
    try:
        atomic_write_text(tmp_path / "new.txt", "a")
        assert (tmp_path / "new.txt").stat().st_mode & 0o777 == 0o644
        (tmp_path / "kept.txt").write_text("b")
        os.chmod(tmp_path / "kept.txt", 0o640)
        atomic_write_text(tmp_path / "kept.txt", "c")  # a replaced file keeps its mode
        assert (tmp_path / "kept.txt").stat().st_mode & 0o777 == 0o640
        os.umask(0o077)
        atomic_write_text(tmp_path / "private.txt", "d")
        assert (tmp_path / "private.txt").stat().st_mode & 0o777 == 0o600
    finally:
        os.umask(old)
