"""Resuming a fit run (``--ckpt_path``): which checkpoint ``last`` means, and which options a
resumed run keeps.

* ``last`` is the newest epoch of the newest ``version_N``: among ``last.ckpt`` and the
  ``last-vK.ckpt`` that Lightning writes beside it when a run folder was moved or copied, the
  one of the latest epoch and step (:func:`find_last_checkpoint`).
* A resumed run continues the recorded run: its optimizer and schedule state come from the
  checkpoint, so new values of the optimizer, schedule, loss or data options would not take
  effect (or only half: the new values sit in ``config.yaml`` while the old ones train). Such
  options are set back to the recorded values, and one warning names each
  (:func:`visattn.training.config.restore_recorded`); options that say where the data is or
  how the run is executed (``config.FREE_ON_RESUME``) may change, and so may every
  ``trainer.*`` option (e.g. ``max_epochs``, the point of resuming). A different network is
  refused.
* The checkpoint is read before anything is written, so a damaged one fails without touching
  the run's ``config.yaml``.
"""

from __future__ import annotations

import hashlib
import io
import os
import re
from pathlib import Path
from typing import Any

import torch
import yaml
from jsonargparse import Namespace
from lightning.fabric.plugins.io.torch_io import TorchCheckpointIO

from ..files import atomic_write_bytes, atomic_write_text
from ..locks import is_secondary_rank
from ..models.checkpoint import (
    SEAL_SUFFIX,
    CheckpointError,
    check_seal,
    read_checkpoint,
    read_seal,
)

__all__ = [
    "RUNS",
    "SEAL_SUFFIX",
    "VERSION_ENV",
    "SealedCheckpointIO",
    "check_seal",
    "checkpoint_progress",
    "claim_version",
    "find_last_checkpoint",
    "keep_recorded_seed",
    "next_version",
]

#: the folder under ``default_root_dir`` that holds the runs, one ``version_N`` each
RUNS = "lightning_logs"

#: the lock file a training process holds in its ``version_N`` folder
#: the version rank 0 claimed, passed to the processes it launches (DDP's other ranks)
VERSION_ENV = "VISATTN_RUN_VERSION"


class SealedCheckpointIO(TorchCheckpointIO):
    """Checkpoints written whole or not at all, each sealed with its SHA-256.

    A checkpoint is serialised in memory, then written to a temporary file in the same folder
    and renamed over the old one (:func:`visattn.files.atomic_write_bytes`): a full disk or a
    killed process leaves the previous checkpoint, never half of a new one. Its digest goes
    beside it (``NAME.sha256``), and every read checks the file against it
    (:func:`~visattn.models.checkpoint.check_seal`), so bytes changed after the write (a bad
    copy, a disk error) are named instead of used. Remote paths (``s3://``, ...) are left to
    Lightning's own writer.

    The pair is crash-consistent: the seal first lists the new digest beside the old one, then
    the checkpoint is replaced, then the seal keeps the new digest alone; whenever the process
    stops, the checkpoint on disk is one the seal names.
    """

    def save_checkpoint(
        self, checkpoint: dict[str, Any], path: Any, storage_options: Any | None = None
    ) -> None:
        if storage_options is not None or "://" in str(path):
            return super().save_checkpoint(checkpoint, path, storage_options)
        buffer = io.BytesIO()
        torch.save(checkpoint, buffer)
        data = buffer.getvalue()
        new = f"{hashlib.sha256(data).hexdigest()}  {len(data)}\n"
        seal = f"{path}{SEAL_SUFFIX}"
        try:
            old = "".join(f"{d}  {s}\n" for d, s in read_seal(path) or () if s is not None)
        except CheckpointError:  # a damaged seal names nothing worth keeping
            old = ""
        if old and Path(path).exists():
            atomic_write_text(seal, old + new)  # either file passes while it is replaced
        else:
            Path(path).parent.mkdir(parents=True, exist_ok=True)
            atomic_write_text(seal, new)
        atomic_write_bytes(path, data)
        atomic_write_text(seal, new)

    def remove_checkpoint(self, path: Any) -> None:
        super().remove_checkpoint(path)
        Path(f"{path}{SEAL_SUFFIX}").unlink(missing_ok=True)


def checkpoint_progress(path: str | Path) -> tuple[int, int]:
    """``(epoch, global step)`` recorded in a training checkpoint (``(-1, -1)`` when not one)."""
    ckpt = read_checkpoint(path, mmap=True)  # epoch and step only: no full read
    if not isinstance(ckpt, dict):
        return (-1, -1)
    return int(ckpt.get("epoch", -1)), int(ckpt.get("global_step", -1))


def next_version(save_dir: str | Path, name: str = RUNS) -> int:
    """The first unused ``N`` of ``save_dir/name/version_N`` (one more than the highest)."""
    try:
        names = [d.name for d in (Path(save_dir) / name).iterdir() if d.is_dir()]
    except (FileNotFoundError, NotADirectoryError):  # no runs yet (or the folder just went)
        names = []
    taken = [int(m.group(1)) for n in names if (m := re.fullmatch(r"version_(\d+)", n))]
    return max(taken, default=-1) + 1


def claim_version(save_dir: str | Path, name: str = RUNS) -> int:
    """Create ``save_dir/name/version_N`` for a new run and return ``N``: the first unused ``N``,
    taken by an exclusive ``mkdir``, so that runs started together in one ``save_dir`` (a shell
    loop, a job array) each get a folder of their own, never the same one, and never fail because
    another run removed the (then empty) ``name`` folder in between.

    In a process launched by rank 0 of a multi-process run (DDP: ``LOCAL_RANK``/``NODE_RANK`` >
    0), the version rank 0 claimed (:data:`VERSION_ENV`) is returned and nothing is created.
    """
    if is_secondary_rank() and os.environ.get(VERSION_ENV, "").isdigit():
        return int(os.environ[VERSION_ENV])
    root = Path(save_dir) / name
    n = next_version(save_dir, name)
    while True:
        try:
            (root / f"version_{n}").mkdir()
        except FileExistsError:
            n += 1
            continue
        except FileNotFoundError:
            # no root yet, or a run in this save_dir that failed before writing anything just
            # removed its empty version folder and then the empty root: create it and retry
            root.mkdir(parents=True, exist_ok=True)
            continue
        os.environ[VERSION_ENV] = str(n)  # for the ranks this process launches
        return n


def keep_recorded_seed(config: Namespace, ckpt_path: str | Path) -> str | None:
    """A resumed fit keeps the seed its run trained with: ``config.seed_everything`` is set back
    to the one in the run's ``config.yaml`` (beside ``checkpoints/``) when it differs; returns
    the line for the warning, or ``None``. Without a recorded config nothing is compared."""
    recorded_path = Path(ckpt_path).resolve().parent.parent / "config.yaml"
    try:
        recorded = yaml.safe_load(recorded_path.read_text())
    except (OSError, yaml.YAMLError):
        return None
    old = recorded.get("seed_everything") if isinstance(recorded, dict) else None
    given = config.get("seed_everything")
    if old is None or isinstance(old, bool) or given == old:
        return None
    config.seed_everything = old
    return f"--seed_everything {given!r} (the run keeps {old!r})"


def find_last_checkpoint(save_dir: str | Path, name: str = RUNS) -> tuple[int, Path] | None:
    """``(N, path)``: the newest last checkpoint under ``save_dir/name/version_N/checkpoints``
    (highest ``N``; among its ``last.ckpt`` and ``last-vK.ckpt`` the latest epoch and step), or
    None when there is none."""
    found: dict[int, list[Path]] = {}
    for ckpt in (Path(save_dir) / name).glob("version_*/checkpoints/last*.ckpt"):
        m = re.fullmatch(r"version_(\d+)", ckpt.parent.parent.name)
        if m and re.fullmatch(r"last(-v\d+)?\.ckpt", ckpt.name):
            found.setdefault(int(m.group(1)), []).append(ckpt)
    if not found:
        return None
    version = max(found)
    candidates = sorted(found[version])
    if len(candidates) == 1:
        return version, candidates[0]  # not read here: Lightning reads it once, to resume
    return version, max(candidates, key=checkpoint_progress)
