"""A finished run, loaded back: the trained network and the data module of a checkpoint written
by ``train_cls.py`` (or the ablation runner). Used by export, the visualiser and the sweeps."""

from __future__ import annotations

import inspect
import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import torch.nn as nn
from lightning.pytorch.cli import instantiate_module

from .._safe_path import IMPORTED
from ..data.datamodule import VisattnDataModule
from ..models.checkpoint import (
    CheckpointError,
    check_state_dict_matches,
    read_checkpoint,
    training_checkpoint,
)
from .module import DATA_RECORD, IMPORTS_RECORD, ClassificationModule

__all__ = ["LoadedRun", "build_datamodule", "load_run", "load_weights"]


@dataclass
class LoadedRun:
    """A trained run: its network (eval mode, on the requested device), the Lightning module's
    hyper-parameters and the data module rebuilt from the checkpoint (not yet set up; None when
    the checkpoint was written without a data module)."""

    net: nn.Module
    hparams: dict[str, Any]
    datamodule: VisattnDataModule | None
    data: dict[str, Any] | None = None  # the data's facts recorded at save (class names, ...)
    data_options: dict[str, Any] | None = None  # the data module's saved options


def build_datamodule(options: Mapping[str, Any], **overrides: Any) -> VisattnDataModule:
    """The data module of a run's saved data options (``LoadedRun.data_options``), with
    ``num_workers=0`` and ``overrides`` applied (e.g. ``root`` when the data moved)."""
    return _from_hparams(VisattnDataModule, options, **{"num_workers": 0, **overrides})


def _from_hparams(cls: type, hparams: Mapping[str, Any], **overrides: Any) -> Any:
    """``cls`` built from a checkpoint's saved hyper-parameters, as Lightning's
    ``load_from_checkpoint`` builds it: keys ``cls`` does not take are dropped, and LightningCLI's
    instantiator is used when the checkpoint records it (it parses nested option types); a
    recorded subclass (``_class_path``) is not followed."""
    names = inspect.signature(cls.__init__).parameters
    kwargs = {k: v for k, v in {**hparams, **overrides}.items() if k in names}
    if hparams.get("_instantiator") == "lightning.pytorch.cli.instantiate_module":
        return instantiate_module(cls, kwargs)
    return cls(**kwargs)


def load_run(
    ckpt_path: str | os.PathLike,
    *,
    data_overrides: Mapping[str, Any] | None = None,
    device: str = "cpu",
    with_data: bool = True,
) -> LoadedRun:
    """Load a checkpoint written by ``train_cls.py`` (or the ablation runner).

    The file is read once, weights-only (:func:`~visattn.models.checkpoint.read_checkpoint`: no
    code in it runs), and that one object rebuilds the network from its saved hyper-parameters
    and loads its weights; the data module is rebuilt from the saved data options with
    ``num_workers=0`` and ``data_overrides`` applied (e.g. ``{"root": "/data/cifar"}`` when the
    data moved since training).

    Raises:
        FileNotFoundError: ``ckpt_path`` does not exist.
        CheckpointError: (a ``ValueError``) a file that is no usable training checkpoint,
            naming the file and what is wrong (empty, damaged, a plain state_dict, the
            weights of another network, ...).
    """
    saved = training_checkpoint(read_checkpoint(ckpt_path), ckpt_path)  # the only read
    check_imports(saved, ckpt_path)
    module = _from_hparams(ClassificationModule, saved["hyper_parameters"])
    dm = None
    if with_data and saved.get("datamodule_hyper_parameters"):
        dm = build_datamodule(saved["datamodule_hyper_parameters"], **dict(data_overrides or {}))
    return _with_weights(module, dm, saved, ckpt_path, device)


def _with_weights(
    module: ClassificationModule,
    dm: VisattnDataModule | None,
    saved: Mapping[str, Any],
    ckpt_path: str | os.PathLike,
    device: str,
) -> LoadedRun:
    check_state_dict_matches(
        module, saved["state_dict"], ckpt_path, "Its hyper-parameters build another network."
    )
    module.load_state_dict(saved["state_dict"])
    net = module.net.to(device).eval()
    data, options = saved.get(DATA_RECORD), saved.get("datamodule_hyper_parameters")
    return LoadedRun(
        net=net,
        hparams=dict(module.hparams),
        datamodule=dm,
        data=dict(data) if isinstance(data, dict) else None,
        data_options=dict(options) if options else None,
    )


def check_imports(saved: Mapping[str, Any], source: Any) -> None:
    """Refuse a checkpoint whose network needs modules of the user's own (recorded from
    ``--import`` when it trained) that this process has not imported, naming them. A module
    named only by a file is never imported: the user names it again.

    Raises:
        CheckpointError: naming the modules and the option that imports them.
    """
    recorded = saved.get(IMPORTS_RECORD) or []
    missing = [str(m) for m in recorded if str(m) not in IMPORTED]
    if missing:
        raise CheckpointError(
            f"{source} was trained with blocks from your own module(s) {', '.join(missing)}; "
            f"a module named only by a checkpoint is never imported: if you trust it, add "
            f"{' '.join('--import ' + m for m in missing)}"
        )


def load_weights(
    module: ClassificationModule,
    datamodule: VisattnDataModule | None,
    ckpt_path: str | os.PathLike,
    *,
    device: str = "cpu",
) -> LoadedRun:
    """A run's ``module`` and ``datamodule``, already built from its options (a sweep's worker
    has them resolved), with the weights of ``ckpt_path`` loaded: :func:`load_run` without
    rebuilding anything from the checkpoint's recorded hyper-parameters.

    Raises:
        CheckpointError: as :func:`load_run`; also when the weights belong to another network.
    """
    saved = training_checkpoint(read_checkpoint(ckpt_path), ckpt_path)
    return _with_weights(module, datamodule, saved, ckpt_path, device)
