"""The Lightning loggers of a ``train_cls.py`` run: built from ``--trainer.logger`` so that their
own errors are shown, kept out of the run's own files, and sent pictures where they take them.

* :func:`build_loggers`: ``--trainer.logger`` (``None``/``True``: TensorBoard in the run's
  directory; ``False``: none; one ``class_path`` mapping or a list of them) as logger objects.
  A logger that refuses its options (MLflow 3 refuses a file store unless
  ``MLFLOW_ALLOW_FILE_STORE`` is set) raises :class:`LoggerConfigError` with the logger's own
  message; jsonargparse would report only that the value "does not validate against any of
  the Union subtypes".
* A logger that would write into the run's directory (TensorBoard or CSV under
  ``<default_root_dir>/lightning_logs`` without a version) is given the run's version, so it
  shares the run's ``version_N`` instead of starting another; a ``CSVLogger`` there writes into
  the run's ``csv/`` folder, since its own ``metrics.csv`` would replace visattn's per-epoch one.
* A resumed run (``--ckpt_path last``) continues its logger runs: :class:`RememberRunIds` writes
  the id of each logger run that has one (MLflow's ``run_id``, W&B's ``id``) into the run's
  directory (:data:`RUN_IDS`) when the fit starts, and :func:`build_loggers` with ``resume=True``
  passes them back, so metrics and pictures go on in the same MLflow / W&B run instead of a new
  one. An id given on the command line wins.
* A resumed run's CSV log goes on in the same file: Lightning's CSV writer deletes an existing
  ``metrics.csv`` when it starts, so a resumed run's CSV logger writes back the rows
  up to the checkpoint it resumes from (:func:`continue_csv`; later rows, logged after
  that checkpoint by the run that was killed, are dropped, since the resumed run logs them
  again), and :class:`FlushLoggersOnCheckpoint` writes every logger's buffered rows whenever a
  checkpoint is saved, so that a kill after a checkpoint loses none of the rows it covers.
* :func:`log_image`: one picture to a logger that takes images (TensorBoard's ``add_image``,
  MLflow's ``log_image``, W&B's ``log_image``); False for the others.
"""

from __future__ import annotations

import csv
import importlib
import json
import warnings
from pathlib import Path
from typing import Any

import lightning.pytorch as pl
import numpy as np
from jsonargparse import Namespace
from lightning.pytorch.callbacks import Callback
from lightning.pytorch.loggers import (
    CSVLogger,
    Logger,
    MLFlowLogger,
    TensorBoardLogger,
    WandbLogger,
)
from lightning.pytorch.loggers.csv_logs import ExperimentWriter

from ..files import atomic_write_text
from .resume import RUNS

__all__ = [
    "RUN_IDS",
    "TENSORBOARD",
    "FlushLoggersOnCheckpoint",
    "LoggerConfigError",
    "RememberRunIds",
    "build_loggers",
    "log_image",
    "read_run_ids",
    "takes_images",
]

#: the default logger's class path
TENSORBOARD = "lightning.pytorch.loggers.TensorBoardLogger"
#: the file in a run's directory that keeps its logger runs' ids, ``{class path: id}``
RUN_IDS = "logger_runs.json"


def _id_option(cls: type) -> str | None:
    """The option that makes a logger of class ``cls`` continue an existing run (``None``: it
    has no run of its own to continue; TensorBoard and CSV continue through the directory)."""
    if issubclass(cls, MLFlowLogger):
        return "run_id"
    if issubclass(cls, WandbLogger):
        return "id"
    return None


def _class_path(cls: type) -> str:
    return f"{cls.__module__}.{cls.__qualname__}"


def _run_id(logger: Logger) -> str | None:
    """The id of the run ``logger`` writes to, creating that run if it has not started yet."""
    if isinstance(logger, MLFlowLogger):
        return logger.run_id
    if isinstance(logger, WandbLogger):
        return str(logger.experiment.id)
    return None


def read_run_ids(run_dir: str | Path) -> dict[str, list[str]]:
    """``{logger class path: [ids, one per logger of that class, in order]}`` recorded in
    ``run_dir`` (empty when the run recorded none)."""
    path = Path(run_dir) / RUN_IDS
    if not path.is_file():
        return {}
    try:
        data = json.loads(path.read_text())
    except json.JSONDecodeError as e:
        raise LoggerConfigError(
            f"{path} is not valid JSON ({e}); delete it to resume into new logger runs"
        ) from e
    return {str(k): [str(i) for i in v] for k, v in data.items()}


class RememberRunIds(Callback):
    """Writes the ids of the run's logger runs into its directory (:data:`RUN_IDS`) when the
    fit starts, for :func:`build_loggers` to continue them on ``--ckpt_path last``."""

    def __init__(self, run_dir: str | Path) -> None:
        self.run_dir = Path(run_dir)

    def on_fit_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if not trainer.is_global_zero:
            return
        ids: dict[str, list[str]] = {}
        for logger in trainer.loggers:
            run_id = _run_id(logger)
            if run_id is not None:
                ids.setdefault(_class_path(type(logger)), []).append(run_id)
        if ids:
            atomic_write_text(self.run_dir / RUN_IDS, json.dumps(ids, indent=2) + "\n")


class FlushLoggersOnCheckpoint(Callback):
    """Writes every logger's buffered rows out whenever a checkpoint is saved (Lightning's CSV
    logger otherwise writes every ``flush_logs_every_n_steps`` steps, TensorBoard's writer every
    two minutes), so that a run killed after a checkpoint has every row that checkpoint covers
    on disk for its resume."""

    def on_save_checkpoint(self, trainer: pl.Trainer, pl_module: Any, checkpoint: dict) -> None:
        if trainer.is_global_zero:
            for logger in trainer.loggers:
                logger.save()  # CSV: its buffered rows; TensorBoard: flush the event file


def continue_csv(logger: CSVLogger, epoch: int, step: int) -> None:
    """Make a CSV logger continue a resumed run's ``metrics.csv``: its rows after the checkpoint
    the run resumes from (epoch ``> epoch``, or without an epoch, step ``>= step``), which the
    resumed run logs again, are dropped, and new rows are appended under the same header.

    Lightning's writer deletes the file when it is created (through the logger's public
    ``experiment``); the rows are read before and written back after, and the writer's public
    ``metrics_keys`` is given the header, so that its appends keep every column."""
    path = Path(logger.log_dir) / ExperimentWriter.NAME_METRICS_FILE
    kept: list[dict[str, str]] = []
    keys: list[str] = []
    if path.is_file():
        with open(path, newline="") as f:
            reader = csv.DictReader(f)
            keys = list(reader.fieldnames or [])
            kept = [r for r in reader if _before(r, epoch, step)]
    with warnings.catch_warnings():  # "exists and is not empty": the run's own folder, resumed
        warnings.filterwarnings("ignore", "Experiment logs directory .* exists and is not empty")
        writer = logger.experiment
    if keys:
        with open(path, "w", newline="") as f:
            out = csv.DictWriter(f, fieldnames=keys)
            out.writeheader()
            out.writerows(kept)
        writer.metrics_keys = keys


def _before(row: dict[str, str], epoch: int, step: int) -> bool:
    """Whether a CSV log row was logged up to the end of ``epoch`` (at most ``step`` steps)."""
    try:
        if row.get("epoch") not in (None, ""):
            return float(row["epoch"]) <= epoch
        return float(row.get("step") or 0) < step
    except ValueError:
        return True


class LoggerConfigError(ValueError):
    """A ``--trainer.logger`` that could not be built; the message is the logger's own."""


def _plain(value: Any) -> Any:
    return value.as_dict() if isinstance(value, Namespace) else value


def _logger_class(class_path: str) -> type:
    module, _, name = class_path.rpartition(".")
    try:
        cls = getattr(importlib.import_module(module), name)
    except (ImportError, AttributeError, ValueError) as e:
        raise LoggerConfigError(f"--trainer.logger {class_path}: no such class ({e})") from e
    if not (isinstance(cls, type) and issubclass(cls, Logger)):
        raise LoggerConfigError(f"--trainer.logger {class_path} is not a Lightning Logger")
    return cls


def _into_run(cls: type, args: dict[str, Any], root: Path, version: int) -> dict[str, Any]:
    """The options of a TensorBoard or CSV logger whose versions would live in the run tree
    ``root/lightning_logs``, set to write into the run ``version_<version>``: TensorBoard there
    (no file in common with visattn's), CSV in its ``csv/`` folder (its ``metrics.csv`` would
    replace visattn's). Other loggers' options are returned as they are."""
    if not issubclass(cls, (TensorBoardLogger, CSVLogger)) or args.get("save_dir") is None:
        return args
    name = args.get("name", RUNS)
    if Path(args["save_dir"], name or "").resolve() != (root / RUNS).resolve():
        return args
    given = args.get("version")
    if issubclass(cls, TensorBoardLogger):
        return args if given is not None else {**args, "version": version}
    if given is None or str(given) in (str(version), f"version_{version}"):
        return {
            **args,
            "save_dir": str(root / RUNS / f"version_{version}"),
            "name": "",
            "version": "csv",
        }
    return args


def _build_one(
    spec: Any, root: Path, version: int, ids: dict[str, list[str]], resume: bool
) -> Logger:
    if isinstance(spec, Logger):
        return spec
    spec = _plain(spec)
    if not isinstance(spec, dict) or "class_path" not in spec:
        raise LoggerConfigError(f"--trainer.logger: expected a class_path mapping, got {spec!r}")
    cls = _logger_class(spec["class_path"])
    args = _into_run(
        cls, {k: _plain(v) for k, v in (spec.get("init_args") or {}).items()}, root, version
    )
    if resume and issubclass(cls, TensorBoardLogger):
        args.setdefault("default_hp_metric", False)  # its placeholder is there from the start
    option = _id_option(cls)
    recorded = ids.get(_class_path(cls))
    if option is not None and recorded and args.get(option) is None:
        args = {**args, option: recorded.pop(0)}  # the resumed run continues its logger run
    try:
        return cls(**args)
    except Exception as e:
        raise LoggerConfigError(
            f"--trainer.logger {spec['class_path']} could not be created: {e}"
        ) from e


def build_loggers(
    spec: Any,
    root: str | Path,
    version: int,
    *,
    resume: bool = False,
    resumed_at: tuple[int, int] | None = None,
) -> list[Logger]:
    """The loggers of a run whose directory is ``root/lightning_logs/version_<version>``.

    Args:
        spec: the ``trainer.logger`` option: ``None`` or ``True`` (TensorBoard in the run's
            directory), ``False`` (none), a ``{"class_path", "init_args"}`` mapping (or
            Namespace, or a Logger), or a list of them.
        root: the run's ``default_root_dir``.
        version: the run's ``N``.
        resume: the run continues (``--ckpt_path last``): an MLflow or W&B logger without an
            id of its own continues the run recorded in the run's :data:`RUN_IDS`.
        resumed_at: ``(epoch, global step)`` of the checkpoint a resumed run starts from: a CSV
            logger continues its ``metrics.csv`` up to there (:func:`continue_csv`).

    Raises:
        LoggerConfigError: a logger could not be created (its own message follows), or the
            recorded ids cannot be read.
    """
    root = Path(root)
    if spec is False:
        return []
    if spec is None or spec is True:
        spec = {"class_path": TENSORBOARD, "init_args": {"save_dir": str(root), "name": RUNS}}
    specs = spec if isinstance(spec, (list, tuple)) else [spec]
    ids = read_run_ids(root / RUNS / f"version_{version}") if resume else {}
    loggers = [_build_one(s, root, version, ids, resume) for s in specs]
    if resume and resumed_at is not None:
        for logger in loggers:
            if isinstance(logger, CSVLogger):
                continue_csv(logger, *resumed_at)
    return loggers


def _hwc_uint8(image: np.ndarray) -> np.ndarray:
    if image.ndim != 3 or image.shape[-1] not in (1, 3, 4):
        raise ValueError(f"log_image needs an (H, W, 1|3|4) picture, got shape {image.shape}")
    if image.dtype != np.uint8:
        image = (np.clip(image, 0.0, 1.0) * 255).round().astype(np.uint8)
    return image


def takes_images(logger: Logger) -> bool:
    """True for the loggers :func:`log_image` sends pictures to."""
    return isinstance(logger, (TensorBoardLogger, MLFlowLogger, WandbLogger))


def log_image(logger: Logger, key: str, image: np.ndarray, step: int) -> bool:
    """Send one ``(H, W, 3)`` picture (``uint8``, or floats in ``[0, 1]``) to ``logger`` under
    ``key`` at ``step``. Returns False, sending nothing, for a logger that takes no images."""
    image = _hwc_uint8(image)
    if isinstance(logger, TensorBoardLogger):
        logger.experiment.add_image(key, image, global_step=step, dataformats="HWC")
    elif isinstance(logger, MLFlowLogger):
        logger.experiment.log_image(logger.run_id, image, key=key.replace("/", "_"), step=step)
    elif isinstance(logger, WandbLogger):
        logger.log_image(key=key, images=[image], step=step)
    else:
        return False
    return True
