"""Where a sweep's runs execute: one process per run, several at once on this machine
(``--jobs N``), or as tasks on a Ray cluster (``--executor ray``); and the output-folder lock.

Every run executes :func:`run_task` in a fresh process (a ``python -m visattn.ablate.worker``
subprocess, or a Ray worker), which trains it exactly as the sequential runner does, writes its
completion marker and returns its results row. Only the driver writes ``results.csv``,
``report.md`` and the plots. A run's figures do not depend on how many run at once: every run
has its own process and seed, and the CPU threads given to each run (``threads``) only divide
the machine.

* Local pool: ``jobs`` runs at once. With GPUs, each run is pinned to one device through
  ``CUDA_VISIBLE_DEVICES`` (``devices``, default all visible) and at most ``runs_per_device``
  share one. A worker that dies (killed, out of memory) is retried ``retries`` times; its
  attempts are recorded in the row (``attempts``).
* Ray: each run is a task with ``num_cpus=threads`` and ``num_gpus=1/runs_per_device`` (on a
  GPU cluster); without an address a local Ray instance is started, with one the driver joins
  that cluster. The output folder must be on a file system every node sees. Ray retries a task
  whose worker died (``max_retries``). Ctrl+C on the driver cancels the outstanding tasks.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
import warnings
from collections import deque
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

__all__ = ["LOCK", "SweepLock", "cpu_count", "run_local", "run_ray", "run_task"]

LOCK = ".visattn_sweep.lock"
Task = dict[str, Any]  # {"sweep", "out", "i", "n", "variant", "seed", "args", "root", "threads"}


def cpu_count() -> int:
    """CPUs this process may use (its affinity mask where the OS has one)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - macOS, Windows
        return os.cpu_count() or 1


def _attempts_file(task: Task) -> Path:
    root = Path(task["root"])
    return root.parent / f".{root.name}.attempts"


def run_task(task: Task) -> dict[str, Any]:
    """Train one run in this process (a worker): ``threads`` CPU threads, the marker written,
    the row returned. Counts the attempt first, so a retried run records how often it started."""
    import torch

    from . import runner
    from .sweep import Run, load_sweep

    torch.set_num_threads(int(task["threads"]))
    counter = _attempts_file(task)
    counter.parent.mkdir(parents=True, exist_ok=True)
    attempts = int(counter.read_text() or 0) + 1 if counter.is_file() else 1
    counter.write_text(str(attempts))
    pid_file = counter.with_suffix(".pid")
    pid_file.write_text(str(os.getpid()))
    sweep = load_sweep(task["sweep"])
    run = Run(task["variant"], int(task["seed"]), tuple(task["args"]), Path(task["root"]))
    row = runner.train_and_mark(
        run,
        task["i"],
        task["n"],
        sweep,
        Path(task["out"]),
        runner._default_train_fn(),
        print,
        attempts=attempts,
    )
    pid_file.unlink(missing_ok=True)
    return row


def _read_row(task: Task) -> dict[str, Any] | None:
    from .runner import MARKER

    try:
        return json.loads((Path(task["root"]) / MARKER).read_text())["row"]
    except (OSError, ValueError, KeyError, TypeError):
        return None


def _device_slots(jobs: int, devices: Sequence[int] | None, runs_per_device: int) -> list[Any]:
    """One entry per concurrent run: a GPU index, or ``None`` (CPU)."""
    if jobs < 1 or runs_per_device < 1:
        raise ValueError(
            f"--jobs and --runs-per-device must be >= 1, got {jobs} and {runs_per_device}"
        )
    if devices is None:
        import torch

        devices = list(range(torch.cuda.device_count())) if torch.cuda.is_available() else []
    if not devices:
        return [None] * jobs
    slots = [d for d in devices for _ in range(runs_per_device)]
    return slots[:jobs]


def run_local(
    tasks: Sequence[Task],
    *,
    jobs: int,
    devices: Sequence[int] | None = None,
    runs_per_device: int = 1,
    retries: int = 1,
    on_start: Callable[[Task, Any], None] = lambda t, d: None,
    on_done: Callable[[Task, dict[str, Any]], None] = lambda t, r: None,
    log_dir: Path | None = None,
    poll_s: float = 0.2,
) -> None:
    """Run ``tasks`` in subprocesses, ``jobs`` at once (fewer when the GPUs' slots run out).

    ``on_done(task, row)`` is called in the driver as each run ends; a worker that exits
    without a marker is started again up to ``retries`` times, then recorded as ``failed``.
    Ctrl+C (or any error in the driver) terminates the workers still running.
    """
    slots = _device_slots(jobs, devices, runs_per_device)
    free = deque(slots)
    pending = deque((t, 0) for t in tasks)
    active: dict[subprocess.Popen, tuple[Task, Any, int, Any]] = {}
    try:
        while pending or active:
            while pending and free:
                task, tries = pending.popleft()
                slot = free.popleft()
                env = dict(os.environ)
                threads = str(task["threads"])
                env.update(OMP_NUM_THREADS=threads, MKL_NUM_THREADS=threads)
                if slot is not None:
                    env["CUDA_VISIBLE_DEVICES"] = str(slot)
                log = None
                if log_dir is not None:
                    log_dir.mkdir(parents=True, exist_ok=True)
                    name = f"{task['variant']}_seed{task['seed']}.log"
                    log = open(log_dir / name, "ab")  # noqa: SIM115 (closed when it ends)
                proc = subprocess.Popen(
                    [sys.executable, "-m", "visattn.ablate.worker", json.dumps(task)],
                    env=env,
                    stdout=log if log is not None else subprocess.DEVNULL,
                    stderr=subprocess.STDOUT,
                )
                active[proc] = (task, slot, tries, log)
                on_start(task, slot)
            time.sleep(poll_s)
            for proc in [p for p in active if p.poll() is not None]:
                task, slot, tries, log = active.pop(proc)
                if log is not None:
                    log.close()
                free.append(slot)
                row = _read_row(task)
                if row is None and tries < retries:
                    pending.appendleft((task, tries + 1))
                    continue
                if row is None:
                    row = {
                        "run": f"{task['variant']}/seed{task['seed']}",
                        "variant": task["variant"],
                        "seed": task["seed"],
                        "status": "failed",
                        "error": f"worker exited with code {proc.returncode} before finishing "
                        f"({tries + 1} attempt(s))",
                        "attempts": tries + 1,
                    }
                on_done(task, row)
    finally:
        for proc in active:
            proc.terminate()
        for proc, (_, _, _, log) in active.items():
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
            if log is not None:
                log.close()


def run_ray(
    tasks: Sequence[Task],
    *,
    address: str | None = None,
    jobs: int | None = None,
    runs_per_device: int = 1,
    retries: int = 1,
    on_start: Callable[[Task, Any], None] = lambda t, d: None,
    on_done: Callable[[Task, dict[str, Any]], None] = lambda t, r: None,
    num_cpus: int | None = None,
) -> None:
    """Run ``tasks`` as Ray tasks (see the module docstring).

    Args:
        address: a running cluster (``ray start --head`` prints it); ``None`` starts a local
            instance with ``num_cpus`` CPUs.
        jobs: at most this many tasks in flight (``None``: as many as the cluster fits).
        retries: how often Ray restarts a task whose worker died.
    """
    try:
        import ray
    except ImportError as e:  # pragma: no cover - depends on the environment
        raise ImportError("--executor ray needs Ray: pip install 'visattn[cluster]'") from e
    started_here = not ray.is_initialized()
    if started_here:
        kwargs: dict[str, Any] = {"include_dashboard": False, "log_to_driver": False}
        if address:
            kwargs["address"] = address
        elif num_cpus is not None:
            kwargs["num_cpus"] = num_cpus
        ray.init(**kwargs)
    try:
        gpus = ray.cluster_resources().get("GPU", 0)
        remote = ray.remote(max_retries=retries, retry_exceptions=False)(run_task)
        num_gpus = (1.0 / runs_per_device) if gpus else 0
        pending = deque(tasks)
        inflight: dict[Any, Task] = {}
        limit = jobs or len(tasks)
        try:
            while pending or inflight:
                while pending and len(inflight) < limit:
                    task = pending.popleft()
                    ref = remote.options(num_cpus=int(task["threads"]), num_gpus=num_gpus).remote(
                        task
                    )
                    inflight[ref] = task
                    on_start(task, "ray")
                ready, _ = ray.wait(list(inflight), num_returns=1)
                for ref in ready:
                    task = inflight.pop(ref)
                    try:
                        row = ray.get(ref)
                    except Exception as exc:  # the task died more than `retries` times
                        row = _read_row(task) or {
                            "run": f"{task['variant']}/seed{task['seed']}",
                            "variant": task["variant"],
                            "seed": task["seed"],
                            "status": "failed",
                            "error": f"Ray task failed: {type(exc).__name__}",
                        }
                    on_done(task, row)
        except BaseException:
            for ref in inflight:
                ray.cancel(ref, force=True)
            raise
    finally:
        if started_here:
            ray.shutdown()


class SweepLock:
    """An exclusive lock on a sweep's output folder: ``DIR/.visattn_sweep.lock`` holding the
    owner's host and pid. A second sweep on the same folder is refused while the owner runs; a
    lock whose process is gone (same host) is taken over with a warning.

    Use as a context manager; the file is removed on exit.
    """

    def __init__(self, out_dir: str | Path) -> None:
        self.path = Path(out_dir) / LOCK
        self.owner = {"host": socket.gethostname(), "pid": os.getpid(), "since": time.time()}

    def _alive(self, holder: dict[str, Any]) -> bool:
        if holder.get("host") != self.owner["host"]:
            return True  # cannot tell from here: assume it runs
        try:
            os.kill(int(holder["pid"]), 0)
        except ProcessLookupError:
            return False
        except PermissionError:
            return True
        return True

    def acquire(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        for _ in range(3):
            try:
                fd = os.open(self.path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
            except FileExistsError:
                try:
                    holder = json.loads(self.path.read_text())
                except (OSError, ValueError):
                    holder = {}
                if holder and self._alive(holder):
                    raise RuntimeError(
                        f"{self.path.parent} is in use by another sweep (host "
                        f"{holder.get('host')}, pid {holder.get('pid')}, lock {self.path}); wait "
                        "for it to finish, or "
                        "delete the lock file if that sweep is gone"
                    ) from None
                warnings.warn(
                    f"taking over the stale sweep lock {self.path} "
                    f"(host {holder.get('host', '?')}, pid {holder.get('pid', '?')} is gone)",
                    stacklevel=2,
                )
                self.path.unlink(missing_ok=True)
                continue
            with os.fdopen(fd, "w") as f:
                json.dump(self.owner, f)
            return
        raise RuntimeError(f"could not take the sweep lock {self.path}")

    def release(self) -> None:
        try:
            holder = json.loads(self.path.read_text())
        except (OSError, ValueError):
            return
        if holder.get("pid") == self.owner["pid"] and holder.get("host") == self.owner["host"]:
            self.path.unlink(missing_ok=True)

    def __enter__(self) -> SweepLock:
        self.acquire()
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()
