"""Sweeps beyond one process: --jobs N (a process per run), the Ray executor, the output-folder
lock. The figures of a run must not depend on how many run at once."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import yaml
from helpers.ablate import TINY_SET, write_sweep
from helpers.files import read_csv
from helpers.paths import REPO

from visattn.ablate import ExecutionPlan, run_sweep
from visattn.ablate.__main__ import main as ablate_main
from visattn.ablate.executors import _device_slots
from visattn.locks import SWEEP_LOCK as LOCK
from visattn.locks import SweepLock

# the tests that start several processes (--jobs 2, Ray, the GPU script's smoke run, DDP in
# tests/training/test_ddp.py) run one after the other in one pytest-xdist worker: two of them at
# once would oversubscribe 2 cores, and the sweep of the `sequential` fixture runs once
MULTIPROCESS = pytest.mark.xdist_group("multiprocess")

FIGURES = ("val/acc", "val/acc_last", "train/loss", "val/loss", "params", "macs", "epochs")


# --------------------------------------------------------------------------- the lock


def _dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def test_a_second_sweep_on_the_same_folder_is_refused(tmp_path: Path, fake) -> None:
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        (tmp_path / "out").mkdir()
        holder = {"host": socket.gethostname(), "pid": sleeper.pid}
        (tmp_path / "out" / LOCK).write_text(json.dumps(holder))
        path = write_sweep(tmp_path, [{"name": "none"}])
        with pytest.raises(RuntimeError, match=f"in use by another sweep .*pid {sleeper.pid}"):
            run_sweep(path, tmp_path / "out", train_fn=fake, echo=lambda s: None)
        assert fake.calls == []
        assert ablate_main([str(path), "--out", str(tmp_path / "out"), "--report-only"]) == 2
    finally:
        sleeper.kill()
        sleeper.wait()


def test_a_stale_lock_is_taken_over_with_a_warning_and_released(tmp_path: Path, fake) -> None:
    (tmp_path / "out").mkdir()
    dead = _dead_pid()
    lock = tmp_path / "out" / LOCK
    lock.write_text(json.dumps({"host": socket.gethostname(), "pid": dead}))
    path = write_sweep(tmp_path, [{"name": "none"}])
    with pytest.warns(UserWarning, match=f"stale sweep lock .*pid {dead} is gone"):
        rows = run_sweep(path, tmp_path / "out", train_fn=fake, echo=lambda s: None)
    assert [r["status"] for r in rows] == ["ok", "ok"]
    assert not lock.exists()  # released at the end


def test_lock_held_while_a_sweep_runs_names_this_host_and_pid(tmp_path: Path) -> None:
    with SweepLock(tmp_path) as first:
        holder = json.loads((tmp_path / LOCK).read_text())
        assert holder["host"] == socket.gethostname() and holder["pid"] == os.getpid()
        other = SweepLock(tmp_path)
        with pytest.raises(RuntimeError, match="in use by another sweep"):
            other.acquire()
        assert first.path.exists()
    assert not (tmp_path / LOCK).exists()


def test_gpu_slots_share_devices_up_to_runs_per_device() -> None:
    assert _device_slots(3, [], 1) == [None, None, None]
    assert _device_slots(8, [0, 1], 2) == [0, 0, 1, 1]  # 2 GPUs x 2 runs: at most 4 at once
    assert _device_slots(3, [0, 1], 2) == [0, 0, 1]
    with pytest.raises(ValueError, match="must be >= 1"):
        _device_slots(0, [], 1)


# --------------------------------------------------------------------------- real runs


def _tiny_sweep(tmp_path: Path, seeds=(0, 1)) -> Path:
    data = {
        "name": "tiny_par",
        "base": [str(REPO / "configs" / "quickstart.yaml")],
        "seeds": list(seeds),
        "set": {**TINY_SET, "trainer.limit_train_batches": 3},
        "variants": [
            {"name": "none", "set": {"model.attention": None}},
            {"name": "se", "set": {"model.attention": {"name": "se"}}},
        ],
        "profile": {"batch": 4, "warmup": 0, "repeats": 1},
        "localization": False,
    }
    path = tmp_path / "sweep.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


@pytest.fixture(scope="module")
def sequential(tmp_path_factory: pytest.TempPathFactory) -> list[dict[str, str]]:
    """The sweep run one run after the other in this process, one thread per run (the thread
    count the parallel runs below get, so that float sums are ordered alike)."""
    pytest.importorskip("visattn.training.cli")
    tmp = tmp_path_factory.mktemp("seq")
    run_sweep(_tiny_sweep(tmp), tmp / "out", ExecutionPlan(threads=1), echo=lambda s: None)
    return read_csv(tmp / "out" / "results.csv")


def _figures(rows: list[dict[str, str]]) -> list[tuple]:
    return [(r["run"], r["status"], *(r[c] for c in FIGURES)) for r in rows]


@MULTIPROCESS
def test_jobs_2_gives_the_same_figures_as_jobs_1(tmp_path: Path, sequential) -> None:
    """Seed 0 of both variants, the two runs at once (each run is a fresh process, about 8 s of
    imports: the sequential fixture's seed 1 is left out here)."""
    lines: list[str] = []
    plan = ExecutionPlan(jobs=2, threads=1)
    rows = run_sweep(_tiny_sweep(tmp_path, seeds=(0,)), tmp_path / "out", plan, echo=lines.append)
    assert [r["status"] for r in rows] == ["ok"] * 2
    parallel = read_csv(tmp_path / "out" / "results.csv")
    assert _figures(parallel) == _figures([r for r in sequential if r["seed"] == "0"])
    assert all(r["val/loss"] not in ("", None) for r in parallel)
    assert sum("started on cpu, 1 thread(s)" in ln for ln in lines) == 2
    assert len(list((tmp_path / "out" / "logs").glob("*.log"))) == 2  # one worker log per run
    etas = [ln.rsplit("ETA ", 1)[1] for ln in lines if " done | elapsed " in ln]
    assert len(etas) == 2 and "?" not in etas and etas[-1] == "0s"  # nothing left at the end


@MULTIPROCESS
@pytest.mark.heavy  # 50 s; the default run keeps a Ray sweep in test_sweep_reliability.py
def test_ray_runs_two_at_once_retries_a_killed_worker_and_gives_the_same_figures(
    tmp_path: Path, sequential
) -> None:
    ray = pytest.importorskip("ray")
    out = tmp_path / "out"
    lock_file = out / "runs" / "none" / ".seed0.lock"  # names the process training the run
    killed: list[int] = []
    done = threading.Event()  # no fixed deadline: on a loaded machine Ray starts slowly

    def kill_first_worker() -> None:  # SIGKILL the worker of none/seed0 once it trains
        while not done.is_set() and not killed:
            if lock_file.is_file() and (out / "runs" / "none" / "seed0").is_dir():
                time.sleep(2.0)
                try:
                    pid = int(json.loads(lock_file.read_text())["pid"])
                    os.kill(pid, signal.SIGKILL)
                    killed.append(pid)
                except (ValueError, ProcessLookupError, FileNotFoundError):
                    pass
            time.sleep(0.2)

    killer = threading.Thread(target=kill_first_worker, daemon=True)
    killer.start()
    try:
        plan = ExecutionPlan(jobs=2, executor="ray", threads=1)
        rows = run_sweep(_tiny_sweep(tmp_path), out, plan, echo=lambda s: None)
    finally:
        done.set()
        killer.join(timeout=5)
        if ray.is_initialized():
            ray.shutdown()
    assert killed, "the worker was not killed (it finished first?)"
    assert [r["status"] for r in rows] == ["ok"] * 4
    got = read_csv(out / "results.csv")
    assert _figures(got) == _figures(sequential)
    attempts = {r["run"]: r["attempts"] for r in got}
    assert attempts["none/seed0"] == "2" and attempts["se/seed1"] == "1"


@MULTIPROCESS
@pytest.mark.heavy  # 68 s on 2 cores: the GPU machine's script, smoke-run before a release
def test_gpu_script_smoke_runs_end_to_end_on_cpu(tmp_path: Path) -> None:
    pytest.importorskip("visattn.training.cli")
    out = tmp_path / "gpu"
    proc = subprocess.run(
        ["bash", str(REPO / "benchmarks" / "gpu.sh"), "--smoke", str(out)],
        capture_output=True,
        text=True,
        timeout=900,
        env={**os.environ, "PYTHON": sys.executable},
    )
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert "!!" not in proc.stdout, proc.stdout[-3000:]
    rows = read_csv(out / "reproduce" / "results.csv")
    assert [(r["run"], r["status"]) for r in rows] == [
        ("resnet20_none/seed0", "ok"),
        ("resnet20_se/seed0", "ok"),
    ]
    assert (out / "reproduce.md").read_text().startswith("# Sweep `cifar10_reproduce_smoke`")
    for step in ("blocks_cpu_smoke", "train_cpu_smoke"):
        assert (out / f"{step}.md").stat().st_size > 0, step


def test_a_killed_worker_is_retried_with_the_reason_said(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A worker killed by a signal is started again, and the reason (the signal) is said before
    the retry; after the last retry the row is failed with the same reason."""
    from visattn.ablate import executors
    from visattn.ablate.job import RunTask

    def killed_worker(task, slot, log_dir):  # a worker that SIGKILLs itself at once
        return subprocess.Popen(["sh", "-c", "kill -KILL $$"]), None

    monkeypatch.setattr(executors, "_start_worker", killed_worker)
    task = RunTask("s.yaml", str(tmp_path), 1, 1, "none", 0, (), str(tmp_path / "runs/none/seed0"))
    retries: list[str] = []
    rows: list[dict] = []
    executors.run_local(
        [task],
        jobs=1,
        retries=1,
        on_retry=lambda t, why: retries.append(why),
        on_done=lambda t, row: rows.append(row),
        poll_s=0.01,
    )
    assert retries == ["retry 1 of 1: the last worker was killed by SIGKILL before finishing"]
    assert rows[0]["status"] == "failed"
    assert "was killed by SIGKILL" in rows[0]["error"] and rows[0]["attempts"] == 2


@pytest.mark.parametrize("text", ["garbage", "-3", "1.5", ""])
def test_a_damaged_attempts_counter_counts_again_instead_of_crashing(tmp_path, text) -> None:
    """P14: a damaged ``.seed0.attempts`` crashed every ``--jobs`` attempt with ValueError."""
    from visattn.ablate.executors import _read_attempts

    counter = tmp_path / ".seed0.attempts"
    counter.write_text(text)
    if text:
        with pytest.warns(UserWarning, match="not a count"):
            assert _read_attempts(counter) == 0
    else:
        assert _read_attempts(counter) == 0
    counter.write_text("2")
    assert _read_attempts(counter) == 2
    assert _read_attempts(tmp_path / "missing") == 0
