"""Exclusive lock files (:class:`FolderLock`), so that no two processes ever write into the same
place: a training run's folder (:class:`visattn.training.resume.RunFolderLock`), a sweep's
output folder and each of its runs (:mod:`visattn.ablate.lock`).

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

__all__ = ["FolderLock"]


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
