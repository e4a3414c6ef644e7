"""A finished run, loaded back: the trained network and the data module of a checkpoint written
by ``train_cls.py`` (or the ablation runner). Used by export, the visualiser and the sweeps."""

from __future__ import annotations

import io
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import torch.nn as nn

from ..data.datamodule import VisattnDataModule
from .module import ClassificationModule

__all__ = ["LoadedRun", "load_run"]


@dataclass
class LoadedRun:
    """A trained run: its network (eval mode, on the requested device), the Lightning module's
    hyper-parameters and the data module rebuilt from the checkpoint (not yet set up; None when
    the checkpoint was written without a data module)."""

    net: nn.Module
    hparams: dict[str, Any]
    datamodule: VisattnDataModule | None


def _read_checkpoint_bytes(path: Path) -> bytes:
    """The file's bytes, once: everything below parses this copy, so the file cannot change
    between two reads."""
    if not path.is_file():
        raise FileNotFoundError(f"checkpoint {path} does not exist")
    data = path.read_bytes()
    if data[:2] != b"PK" and data[:1] != b"\x80":  # torch.save: a zip archive or a raw pickle
        raise ValueError(
            f"{path} is not a checkpoint (expected a .ckpt written by train_cls.py, e.g. "
            "<run>/lightning_logs/version_0/checkpoints/last.ckpt)"
        )
    return data


def load_run(
    ckpt_path: str | os.PathLike,
    *,
    data_overrides: Mapping[str, Any] | None = None,
    device: str = "cpu",
) -> LoadedRun:
    """Load a checkpoint written by ``train_cls.py`` (or the ablation runner).

    The file is read once; the network comes from ``ClassificationModule.load_from_checkpoint``
    (its hyper-parameters rebuild it), the data module from
    ``VisattnDataModule.load_from_checkpoint`` with ``num_workers=0`` and ``data_overrides``
    applied (e.g. ``{"root": "/data/cifar"}`` when the data moved since training).

    Raises:
        FileNotFoundError: ``ckpt_path`` does not exist.
        ValueError: the file is not a training checkpoint (e.g. a YAML config).
    """
    path = Path(ckpt_path)
    data = _read_checkpoint_bytes(path)
    module = ClassificationModule.load_from_checkpoint(io.BytesIO(data), map_location="cpu")
    net = module.net.to(device).eval()
    saved = torch.load(io.BytesIO(data), map_location="cpu", weights_only=True)
    dm = None
    if saved.get("datamodule_hyper_parameters"):
        overrides = {"num_workers": 0, **dict(data_overrides or {})}
        dm = VisattnDataModule.load_from_checkpoint(
            io.BytesIO(data), map_location="cpu", **overrides
        )
    return LoadedRun(net=net, hparams=dict(module.hparams), datamodule=dm)
