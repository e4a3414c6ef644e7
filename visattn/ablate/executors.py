"""Where a sweep's runs execute: one process per run, several at once on this machine
(``--jobs N``), or as tasks on a Ray cluster (``--executor ray``).

Every run executes :func:`run_task` in a fresh process (a ``python -m visattn.ablate.worker``
subprocess, or a Ray worker), which trains it exactly as the sequential runner does, writes its
completion marker and returns its results row. Only the driver writes ``results.csv``,
``report.md`` and the plots. A run's figures do not depend on how many run at once: every run
has its own process and seed, and the CPU threads given to each run (``threads``) only divide
the machine.

* Local pool: ``jobs`` runs at once. With GPUs, each run is pinned to one device through
  ``CUDA_VISIBLE_DEVICES`` (``devices``, default all visible) and at most ``runs_per_device``
  share one. A worker that dies (killed, out of memory) is retried ``retries`` times; its
  attempts are recorded in the row (``attempts``). Workers die with their driver, however it
  ends (:func:`die_with_parent`), and each holds its run's lock while it trains
  (:class:`visattn.locks.RunLock`), so no orphan trains on and no two processes write
  one run.
* Ray: each run is a task with ``num_cpus=threads`` and ``num_gpus=1/runs_per_device`` (on a
  GPU cluster); without an address a local Ray instance is started, with one the driver joins
  that cluster. The output folder must be on a file system every node sees. Ray retries a task
  whose worker died (``max_retries``). Ctrl+C (or SIGTERM) on the driver cancels the
  outstanding tasks and shuts down a local instance started by the sweep.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import subprocess
import sys
import threading
import time
import uuid
import warnings
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import torch

from ..files import atomic_write_text
from .job import RunTask, default_train_fn, read_marker, train_and_mark

__all__ = [
    "DRIVER_ENV",
    "cpu_count",
    "die_with_parent",
    "reaped_on_exit",
    "run_local",
    "run_ray",
    "run_task",
    "run_task_json",
]

#: Environment variable naming the driver's pid to a ``--jobs`` worker (:func:`die_with_parent`).
DRIVER_ENV = "VISATTN_SWEEP_DRIVER"
_PR_SET_PDEATHSIG = 1  # linux/prctl.h


def cpu_count() -> int:
    """CPUs this process may use (its affinity mask where the OS has one)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - macOS, Windows
        return os.cpu_count() or 1


def die_with_parent(parent: int, poll_s: float = 1.0) -> None:
    """Make this process end as soon as ``parent`` (the sweep's driver) is gone, however it
    ends (SIGKILL included), so that no worker trains on as an orphan.

    On Linux the kernel sends SIGKILL on the parent's death (``prctl(PR_SET_PDEATHSIG)``);
    elsewhere a daemon thread watches the parent pid. A parent already gone ends this process
    at once.
    """
    if sys.platform.startswith("linux"):
        libc = ctypes.CDLL(None, use_errno=True)
        if libc.prctl(_PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0) != 0:
            raise OSError(ctypes.get_errno(), "prctl(PR_SET_PDEATHSIG) failed")
    if os.getppid() != parent:  # the driver died before the line above
        os._exit(1)
    if sys.platform.startswith("linux"):
        return

    def watch() -> None:  # pragma: no cover - macOS, Windows
        while os.getppid() == parent:
            time.sleep(poll_s)
        os._exit(1)

    threading.Thread(target=watch, name="visattn-driver-watch", daemon=True).start()


def _attempts_file(task: RunTask) -> Path:
    root = Path(task.root)
    return root.parent / f".{root.name}.attempts"


def _read_attempts(counter: Path) -> int:
    """The attempts counted so far; a counter that is not a number (damaged, half-written by
    an older visattn) counts as none, with a warning: it only counts, it guards nothing."""
    try:
        text = counter.read_text().strip()
    except FileNotFoundError:
        return 0
    try:
        count = int(text or 0)
        if count < 0:
            raise ValueError(text)
        return count
    except ValueError:
        warnings.warn(
            f"{counter} holds {text[:40]!r}, not a count: counting again from 0", stacklevel=2
        )
        return 0


def run_task(task: RunTask) -> dict[str, Any]:
    """Train one run in this process (a worker): ``threads`` CPU threads, the run's lock held,
    the marker written, the row returned. Counts the attempt first, so a retried run records how
    often it started."""
    if task.threads is not None:
        torch.set_num_threads(int(task.threads))
    counter = _attempts_file(task)
    counter.parent.mkdir(parents=True, exist_ok=True)
    attempts = _read_attempts(counter) + 1
    atomic_write_text(counter, str(attempts))
    sweep = task.load_sweep()  # first: it imports the user's own modules (Sweep.imports)
    return train_and_mark(task, sweep, default_train_fn(), print, attempts=attempts)


def run_task_json(text: str) -> dict[str, Any]:
    """:func:`run_task` of a task given as JSON (:meth:`RunTask.to_json`): what a ``--jobs``
    worker and a Ray task receive, so that a run reaches another process or a cluster node as
    JSON data, not as a Python object for Ray to serialise."""
    return run_task(RunTask.from_json(text))


def _failed_row(task: RunTask, error: str, **extra: Any) -> dict[str, Any]:
    row = read_marker(Path(task.root))
    if row is not None:
        return row["row"]
    return {
        "run": task.key,
        "variant": task.variant,
        "seed": task.seed,
        "status": "failed",
        "error": error,
        **extra,
    }


def _device_slots(jobs: int, devices: Sequence[int] | None, runs_per_device: int) -> list[Any]:
    """One entry per concurrent run: a GPU index, or ``None`` (CPU)."""
    if jobs < 1 or runs_per_device < 1:
        raise ValueError(
            f"--jobs and --runs-per-device must be >= 1, got {jobs} and {runs_per_device}"
        )
    if devices is None:
        devices = list(range(torch.cuda.device_count())) if torch.cuda.is_available() else []
    if not devices:
        return [None] * jobs
    slots = [d for d in devices for _ in range(runs_per_device)]
    return slots[:jobs]


OnStart = Callable[[RunTask, Any], None]
OnDone = Callable[[RunTask, dict[str, Any]], None]
OnRetry = Callable[[RunTask, str], None]


def _start_worker(task: RunTask, slot: Any, log_dir: Path | None) -> tuple[subprocess.Popen, Any]:
    """A ``python -m visattn.ablate.worker`` process for ``task`` on GPU ``slot`` (or the CPU),
    its output appended to ``log_dir/<variant>_seed<k>.log``."""
    env = dict(os.environ)
    threads = str(task.threads or cpu_count())
    env.update(OMP_NUM_THREADS=threads, MKL_NUM_THREADS=threads)
    env[DRIVER_ENV] = str(os.getpid())
    if slot is not None:
        env["CUDA_VISIBLE_DEVICES"] = str(slot)
    log = None
    if log_dir is not None:
        log_dir.mkdir(parents=True, exist_ok=True)
        log = open(log_dir / f"{task.variant}_seed{task.seed}.log", "ab")  # noqa: SIM115
    proc = subprocess.Popen(
        [sys.executable, "-m", "visattn.ablate.worker", task.to_json()],
        env=env,
        stdout=log if log is not None else subprocess.DEVNULL,
        stderr=subprocess.STDOUT,
    )
    return proc, log


def _stop_workers(active: dict[subprocess.Popen, tuple[RunTask, Any, int, Any]]) -> None:
    for proc in active:
        proc.terminate()
    for proc, (_, _, _, log) in active.items():
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        if log is not None:
            log.close()


def _exit_reason(code: int) -> str:
    """``exited with code 3`` or ``was killed by SIGKILL`` for a process's return code."""
    if code < 0:
        try:
            return f"was killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"was killed by signal {-code}"
    return f"exited with code {code}"


def run_local(
    tasks: Sequence[RunTask],
    *,
    jobs: int,
    devices: Sequence[int] | None = None,
    runs_per_device: int = 1,
    retries: int = 1,
    on_start: OnStart = lambda t, d: None,
    on_done: OnDone = lambda t, r: None,
    on_retry: OnRetry = lambda t, why: None,
    log_dir: Path | None = None,
    poll_s: float = 0.2,
) -> None:
    """Run ``tasks`` in subprocesses, ``jobs`` at once (fewer when the GPUs' slots run out).

    ``on_done(task, row)`` is called in the driver as each run ends; a worker that exits
    without a marker is started again up to ``retries`` times (``on_retry(task, why)`` says why
    first: its exit code or the signal that killed it), then recorded as ``failed``.
    Ctrl+C (or any error in the driver) terminates the workers still running; the workers also
    end by themselves when the driver dies (:func:`die_with_parent`).
    """
    free = deque(_device_slots(jobs, devices, runs_per_device))
    pending = deque((t, 0) for t in tasks)
    active: dict[subprocess.Popen, tuple[RunTask, Any, int, Any]] = {}
    try:
        while pending or active:
            while pending and free:
                task, tries = pending.popleft()
                slot = free.popleft()
                proc, log = _start_worker(task, slot, log_dir)
                active[proc] = (task, slot, tries, log)
                on_start(task, slot)
            time.sleep(poll_s)
            for proc in [p for p in active if p.poll() is not None]:
                task, slot, tries, log = active.pop(proc)
                if log is not None:
                    log.close()
                free.append(slot)
                error = f"worker {_exit_reason(proc.returncode)} before finishing"
                if read_marker(Path(task.root)) is None and tries < retries:
                    on_retry(task, f"retry {tries + 1} of {retries}: the last {error}")
                    pending.appendleft((task, tries + 1))
                    continue
                row = _failed_row(task, f"{error} ({tries + 1} attempt(s))", attempts=tries + 1)
                on_done(task, row)
    finally:
        _stop_workers(active)


_REAPER_ENV = "VISATTN_RAY_SESSION"
# waits for its stdin to close (the driver closed it, or died), then SIGKILLs every process whose
# environment carries the tag given as argv[1], and scans again until three scans in a row find
# none (a daemon may start a child while the first scan runs), for 30 s at the most
_REAPER = """
import os, signal, sys, time
tag = sys.argv[1].encode()
sys.stdin.buffer.read()
def kill_tagged():
    found = 0
    for entry in os.listdir("/proc"):
        if entry.isdigit() and int(entry) != os.getpid():
            try:
                with open(f"/proc/{entry}/environ", "rb") as f:
                    if tag in f.read().split(b"\\0"):
                        os.kill(int(entry), signal.SIGKILL)
                        found += 1
            except OSError:
                pass
    return found
quiet, deadline = 0, time.monotonic() + 30
while quiet < 3 and time.monotonic() < deadline:
    quiet = 0 if kill_tagged() else quiet + 1
    time.sleep(0.2)
"""


@contextlib.contextmanager
def reaped_on_exit() -> Iterator[None]:
    """Every process started inside the block (they inherit a tag in their environment: a local
    Ray instance's daemons and workers) is killed once the block ends or this process dies,
    however it dies (SIGKILL included; Ray's DashboardAgent and RuntimeEnvAgent otherwise
    outlive a killed driver). The reaper is a small process of its own that waits on a pipe
    from this one. Linux only (it reads ``/proc``); elsewhere a no-op."""
    if not sys.platform.startswith("linux"):  # pragma: no cover
        yield
        return
    tag = f"{_REAPER_ENV}={uuid.uuid4().hex}"
    reaper = subprocess.Popen(
        [sys.executable, "-c", _REAPER, tag], stdin=subprocess.PIPE, start_new_session=True
    )
    # SPT_NOENV: Ray's agents set their process title with setproctitle, which by default
    # writes over the environment block that /proc/PID/environ shows, tag included; with it set
    # the title goes elsewhere and the tag stays readable (Ray sets it for its workers only)
    tagged = {_REAPER_ENV: tag.split("=", 1)[1], "SPT_NOENV": "1"}
    previous = {k: os.environ.get(k) for k in tagged}
    os.environ.update(tagged)
    try:
        yield
    finally:
        for key, value in previous.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
        reaper.stdin.close()
        reaper.wait(timeout=60)


def _ray_init(ray: Any, address: str | None, num_cpus: int | None) -> bool:
    """Connect to ``address`` or start a local instance; ``True`` if this call connected."""
    if ray.is_initialized():
        return False
    kwargs: dict[str, Any] = {"include_dashboard": False, "log_to_driver": False}
    if address:
        kwargs["address"] = address
    elif num_cpus is not None:
        kwargs["num_cpus"] = num_cpus
    ray.init(**kwargs)
    return True


def _ray_loop(
    ray: Any,
    remote: Any,
    tasks: Sequence[RunTask],
    jobs: int | None,
    on_start: OnStart,
    on_done: OnDone,
    num_gpus: float,
) -> None:
    pending = deque(tasks)
    inflight: dict[Any, RunTask] = {}
    limit = jobs or len(tasks)
    try:
        while pending or inflight:
            while pending and len(inflight) < limit:
                task = pending.popleft()
                threads = int(task.threads or 1)
                ref = remote.options(num_cpus=threads, num_gpus=num_gpus).remote(task.to_json())
                inflight[ref] = task
                on_start(task, "ray")
            ready, _ = ray.wait(list(inflight), num_returns=1)
            for ref in ready:
                task = inflight.pop(ref)
                try:
                    row = ray.get(ref)
                except Exception as exc:  # the task died more than `retries` times
                    row = _failed_row(task, f"Ray task failed: {type(exc).__name__}")
                on_done(task, row)
    except BaseException:
        for ref in inflight:
            ray.cancel(ref, force=True)
        raise


def run_ray(
    tasks: Sequence[RunTask],
    *,
    address: str | None = None,
    jobs: int | None = None,
    runs_per_device: int = 1,
    retries: int = 1,
    on_start: OnStart = lambda t, d: None,
    on_done: OnDone = lambda t, r: None,
    num_cpus: int | None = None,
) -> None:
    """Run ``tasks`` as Ray tasks (see the module docstring).

    A local instance started here is shut down on every way out: ``ray.shutdown()`` when the
    driver ends or is interrupted (the sweep turns SIGTERM into Ctrl+C), and a reaper process
    that kills what is left, Ray's own daemons included, even when the driver is SIGKILLed
    (:func:`reaped_on_exit`).

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
    local = not address and not ray.is_initialized()
    with reaped_on_exit() if local else contextlib.nullcontext():
        started_here = _ray_init(ray, address, num_cpus)
        try:
            gpus = ray.cluster_resources().get("GPU", 0)
            remote = ray.remote(max_retries=retries, retry_exceptions=False)(run_task_json)
            num_gpus = (1.0 / runs_per_device) if gpus else 0
            _ray_loop(ray, remote, tasks, jobs, on_start, on_done, num_gpus)
        finally:
            if started_here:
                ray.shutdown()
