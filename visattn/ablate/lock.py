"""The sweep's locks: one on its output folder (:class:`SweepLock`), one per run folder
(:class:`RunLock`); both are :class:`~visattn.locks.FolderLock` files naming their owner."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ..locks import FolderLock

__all__ = ["LOCK", "FolderLock", "RunLock", "SweepLock"]

#: The sweep lock's file name in the output folder.
LOCK = ".visattn_sweep.lock"


class SweepLock(FolderLock):
    """The lock on a sweep's output folder: ``DIR/.visattn_sweep.lock``. A second sweep on the
    same folder is refused while the owner runs."""

    def __init__(self, out_dir: str | Path) -> None:
        super().__init__(Path(out_dir) / LOCK, "sweep")

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
