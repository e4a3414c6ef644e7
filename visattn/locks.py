"""Every lock file visattn writes, so that no two processes ever write into the same place: a
training run's folder (:class:`RunFolderLock`), a sweep's output folder (:class:`SweepLock`)
and each of its runs (:class:`RunLock`), all :class:`FolderLock` files.

A lock is a small JSON file naming its owner: host, pid and, where the OS tells it, the
process's start time (so a pid reused by an unrelated process does not keep a dead owner's lock
alive). Acquisition is atomic: the JSON is written to a private temporary file first, then
hard-linked to the lock's name, which fails when the name exists; nobody ever sees a lock file
half written. A lock whose owner is gone (same host, pid not running, or running since another
time) is stale and taken over with a warning; the check and the removal of a stale lock happen
under an advisory lock on the folder (``flock``, where the OS has it), so that two processes
finding the same stale lock cannot both take it over. A lock held on another host is assumed
alive: only that host can tell.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import time
import uuid
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

try:
    import fcntl
except ImportError:  # pragma: no cover - Windows: no guard around the takeover of a stale lock
    fcntl = None

__all__ = [
    "RUN_LOCK",
    "SWEEP_LOCK",
    "FolderLock",
    "RunFolderLock",
    "RunLock",
    "SweepLock",
    "is_secondary_rank",
]

#: the lock file of a training run's folder ``version_N``
RUN_LOCK = ".visattn_run.lock"
#: the sweep lock's file name in a sweep's output folder
SWEEP_LOCK = ".visattn_sweep.lock"


def _start_time(pid: int) -> int | None:
    """Clock ticks since boot at which ``pid`` started (Linux), else ``None``."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return int(stat.rsplit(")", 1)[1].split()[19])


@contextlib.contextmanager
def _guard(folder: Path) -> Iterator[None]:
    """Hold an exclusive advisory lock on ``folder`` (a no-op where ``flock`` is missing)."""
    if fcntl is None:  # pragma: no cover
        yield
        return
    fd = os.open(folder, os.O_RDONLY)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # closing releases the flock


class FolderLock:
    """An exclusive lock file at ``path`` for ``what`` (named in messages, e.g. ``"sweep"``).

    Use as a context manager, or :meth:`acquire` / :meth:`release`; the file is removed on
    release (only if this process still owns it).

    Raises:
        RuntimeError: on :meth:`acquire`, the lock is held by a live process (named with its host
            and pid).
    """

    def __init__(self, path: str | Path, what: str) -> None:
        self.path = Path(path)
        self.what = what
        pid = os.getpid()
        self.owner = {"host": socket.gethostname(), "pid": pid, "since": time.time()}
        started = _start_time(pid)
        if started is not None:
            self.owner["started"] = started

    def alive(self, holder: dict[str, Any]) -> bool:
        """Whether the process ``holder`` names still runs (``True`` when this host cannot
        tell: another host, or a pid it may not signal)."""
        if holder.get("host") != self.owner["host"]:
            return True
        try:
            pid = int(holder["pid"])
            os.kill(pid, 0)
        except (KeyError, TypeError, ValueError, ProcessLookupError):
            return False
        except PermissionError:
            return True
        started = _start_time(pid)
        recorded = holder.get("started")
        return recorded is None or started is None or started == recorded

    def holder(self) -> dict[str, Any] | None:
        """The lock file's content (``{}`` when unreadable), or ``None`` when there is none."""
        try:
            data = json.loads(self.path.read_text())
        except FileNotFoundError:
            return None
        except (OSError, ValueError):
            return {}
        return data if isinstance(data, dict) else {}

    def busy_message(self, holder: dict[str, Any]) -> str:
        return (
            f"{self.what} is in use by another process (host {holder.get('host')}, pid "
            f"{holder.get('pid')}, lock {self.path}); wait for it to finish, or stop it, or "
            "delete the lock file if that process is gone"
        )

    def acquire(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_name(f".{self.path.name}.{uuid.uuid4().hex}.tmp")
        tmp.write_text(json.dumps(self.owner))
        try:
            for _ in range(10):
                try:
                    os.link(tmp, self.path)  # atomic: fails if the lock exists
                    return
                except FileExistsError:
                    pass
                with _guard(self.path.parent):
                    holder = self.holder()
                    if holder is None:  # released meanwhile: try again
                        continue
                    if holder and self.alive(holder):
                        raise RuntimeError(self.busy_message(holder))
                    warnings.warn(
                        f"taking over the stale {self.what} lock {self.path} (host "
                        f"{holder.get('host', '?')}, pid {holder.get('pid', '?')} is gone)",
                        stacklevel=2,
                    )
                    self.path.unlink(missing_ok=True)
            raise RuntimeError(f"could not take the {self.what} lock {self.path}")
        finally:
            tmp.unlink(missing_ok=True)

    def release(self) -> None:
        holder = self.holder()
        if holder and all(holder.get(k) == self.owner[k] for k in ("host", "pid")):
            self.path.unlink(missing_ok=True)

    def __enter__(self) -> FolderLock:
        self.acquire()
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()


# ------------------------------------------------------------------------- the locks visattn takes


def is_secondary_rank() -> bool:
    """Whether this process is a rank other than 0 of a multi-process run."""
    return any(os.environ.get(k, "0") not in ("", "0") for k in ("LOCAL_RANK", "NODE_RANK", "RANK"))


class RunFolderLock(FolderLock):
    """The lock of one training run folder ``version_N`` (``version_N/.visattn_run.lock``), held
    by the process that trains or tests into it, so that a second process (a second resume of
    the same run, say) is refused with the holder named instead of writing into the same files.
    Ranks other than 0 of a multi-process run take no lock: rank 0 holds it for the run."""

    def __init__(self, run_dir: str | Path) -> None:
        super().__init__(Path(run_dir) / RUN_LOCK, f"run folder {run_dir}")

    def busy_message(self, holder: dict[str, Any]) -> str:
        return (
            f"run folder {self.path.parent} is being written by another process (host "
            f"{holder.get('host')}, pid {holder.get('pid')}); wait for it to finish, or start a "
            f"new run (without --ckpt_path), or delete {self.path} if that process is gone"
        )

    def acquire(self) -> None:
        if not is_secondary_rank():
            super().acquire()


class SweepLock(FolderLock):
    """The lock on a sweep's output folder: ``DIR/.visattn_sweep.lock``. A second sweep on the
    same folder is refused while the owner runs."""

    def __init__(self, out_dir: str | Path) -> None:
        super().__init__(Path(out_dir) / SWEEP_LOCK, "sweep")

    def busy_message(self, holder: dict[str, Any]) -> str:
        return (
            f"{self.path.parent} is in use by another sweep (host {holder.get('host')}, pid "
            f"{holder.get('pid')}, lock {self.path}); wait for it to finish, or delete the lock "
            "file if that sweep is gone"
        )


class RunLock(FolderLock):
    """The lock of one run folder ``DIR/runs/<variant>/seed<k>``, next to it as
    ``DIR/runs/<variant>/.seed<k>.lock`` (the folder itself is emptied before training), held
    by the process that trains the run: the sweep's driver, a ``--jobs`` worker or a Ray task.
    """

    def __init__(self, root: str | Path, key: str) -> None:
        root = Path(root)
        super().__init__(root.parent / f".{root.name}.lock", f"run {key}")
