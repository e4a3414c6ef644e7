"""One run per folder, always: runs started together in one ``default_root_dir`` each claim a
``version_N`` of their own, a second process resuming a run that is being trained is refused with
the holder named, and a resumed run keeps the seed it trained with (issue: two runs in one
folder, seeds on resume)."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest
import yaml
from helpers.training import TINY, tiny_fit

from visattn.locks import RUN_LOCK, RunFolderLock
from visattn.training.resume import VERSION_ENV, claim_version

REPO = Path(__file__).resolve().parents[2]


def test_claim_version_never_gives_one_folder_twice(tmp_path: Path) -> None:
    got: list[int] = []
    barrier = threading.Barrier(8)

    def claim() -> None:
        barrier.wait()
        got.append(claim_version(tmp_path))

    threads = [threading.Thread(target=claim) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(got) == list(range(8))
    assert sorted(p.name for p in (tmp_path / "lightning_logs").iterdir()) == [
        f"version_{i}" for i in range(8)
    ]


def test_claim_version_survives_another_run_removing_the_empty_root(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A run in the same save_dir that fails before writing anything removes its version folder
    and then the empty ``lightning_logs``; a claim racing with it makes the folder again (CI hit
    this between two test workers sharing a working directory)."""
    from visattn.training import resume

    counted = resume.next_version

    def then_removed(save_dir: Path, name: str = resume.RUNS) -> int:
        n = counted(save_dir, name)
        root = Path(save_dir) / name
        if root.is_dir():
            root.rmdir()  # the other run's clean-up lands between counting and claiming
        return n

    (tmp_path / "lightning_logs").mkdir()
    monkeypatch.setattr(resume, "next_version", then_removed)
    monkeypatch.delenv(VERSION_ENV, raising=False)
    assert claim_version(tmp_path) == 0
    assert (tmp_path / "lightning_logs/version_0").is_dir()


def test_claim_version_in_a_launched_rank_takes_rank_zeros(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(VERSION_ENV, raising=False)  # restored afterwards
    assert claim_version(tmp_path) == 0  # rank 0: publishes its version for the ranks it starts
    monkeypatch.setenv("LOCAL_RANK", "1")
    assert claim_version(tmp_path) == 0  # rank 1 writes into rank 0's folder, creates nothing
    assert [p.name for p in (tmp_path / "lightning_logs").iterdir()] == ["version_0"]


def test_two_fits_started_together_in_one_folder_keep_both_runs(tmp_path: Path) -> None:
    """Two real processes, seeds 0 and 1, the same --trainer.default_root_dir: two folders, each
    with its own config.yaml, metrics.csv and checkpoints."""
    args = [*TINY, f"--trainer.default_root_dir={tmp_path}", "--trainer.max_epochs=1"]
    env = {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"}
    procs = [
        subprocess.Popen(
            [sys.executable, str(REPO / "train_cls.py"), "fit", *args, f"--seed_everything={s}"],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        for s in (0, 1)
    ]
    outs = [p.communicate(timeout=300)[0] for p in procs]
    assert [p.returncode for p in procs] == [0, 0], outs
    runs = sorted((tmp_path / "lightning_logs").iterdir())
    assert [r.name for r in runs] == ["version_0", "version_1"]
    seeds = sorted(yaml.safe_load((r / "config.yaml").read_text())["seed_everything"] for r in runs)
    assert seeds == [0, 1]
    for r in runs:
        assert (r / "metrics.csv").is_file() and (r / "checkpoints" / "last.ckpt").is_file()
        assert not (r / RUN_LOCK).exists()  # released at the end


def test_a_second_resume_of_a_run_in_training_is_refused_naming_the_holder(
    tmp_path: Path,
) -> None:
    tiny_fit(tmp_path, "--trainer.max_epochs=1")
    run_dir = tmp_path / "lightning_logs" / "version_0"
    holder = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        (run_dir / RUN_LOCK).write_text(f'{{"host": "{os.uname().nodename}", "pid": {holder.pid}}}')
        before = (run_dir / "metrics.csv").read_bytes()
        busy = rf"being written by another process.*pid {holder.pid}"
        with pytest.raises(RuntimeError, match=busy):
            tiny_fit(tmp_path, "--trainer.max_epochs=2", "--ckpt_path=last")
        assert (run_dir / "metrics.csv").read_bytes() == before
    finally:
        holder.kill()
        holder.wait()
    # the holder is gone: its stale lock is taken over and the resume trains
    with pytest.warns(UserWarning, match="stale"):
        s = tiny_fit(tmp_path, "--trainer.max_epochs=2", "--ckpt_path=last")
    assert s["epochs"] == 2 and not (run_dir / RUN_LOCK).exists()


def test_the_lock_is_released_when_a_run_fails(tmp_path: Path) -> None:
    with pytest.raises(KeyError, match="unknown model 'no_such_model'"):
        tiny_fit(tmp_path, "--trainer.max_epochs=1", "--model.model=no_such_model")
    assert not (tmp_path / "lightning_logs").exists()  # nothing written: the claim is undone
    lock = RunFolderLock(tmp_path / "lightning_logs" / "version_9")
    lock.acquire()
    assert lock.holder()["pid"] == os.getpid()
    lock.release()


def test_a_changed_seed_on_resume_is_not_applied_and_config_yaml_says_what_trained(
    tmp_path: Path,
) -> None:
    whole = tiny_fit(tmp_path / "whole", "--trainer.max_epochs=2", "--seed_everything=3")
    tiny_fit(tmp_path / "cut", "--trainer.max_epochs=1", "--seed_everything=3")
    with pytest.warns(UserWarning, match=r"--seed_everything 7 \(the run keeps 3\)"):
        resumed = tiny_fit(
            tmp_path / "cut", "--trainer.max_epochs=2", "--ckpt_path=last", "--seed_everything=7"
        )
    config = yaml.safe_load((Path(resumed["log_dir"]) / "config.yaml").read_text())
    assert config["seed_everything"] == 3
    assert Path(resumed["metrics_csv"]).read_text() == Path(whole["metrics_csv"]).read_text()
