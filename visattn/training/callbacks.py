"""Callbacks of every visattn run: the run's own directory, the epoch-level ``metrics.csv``, the
closing summary, the checkpoint that keeps ``last.ckpt`` current, exact resume of the random
states, the backbone freeze of fine-tuning, and attention pictures sent to the logger."""

from __future__ import annotations

import csv
import io
import math
import random
import time
import warnings
from pathlib import Path
from typing import Any

import lightning.pytorch as pl
import numpy as np
import torch
from lightning.pytorch.callbacks import Callback, ModelCheckpoint
from lightning.pytorch.utilities import rank_zero_info, rank_zero_only

from .._nets import last_stage
from ..blocks import is_block
from ..files import atomic_write_text, read_metrics_csv
from ..profile import count_macs, count_params, cpu_seconds, device_description
from ..visualize.maps import logger_pictures, validation_pictures
from .loggers import log_image, takes_images
from .parameters import attention_modules, split_parameters

__all__ = [
    "AttentionPictures",
    "BackboneFreeze",
    "BestAndLastCheckpoint",
    "EpochMetricsCSV",
    "ExactResumeRNG",
    "RunDirectory",
    "RunSummary",
    "run_directory",
]


class RunDirectory(Callback):
    """Where the run's own files go: ``metrics.csv``, ``config.yaml``, ``checkpoints/`` and the
    summary's ``log_dir``, whatever logger the run writes to (a logger's files may live
    elsewhere: an MLflow store, a W&B folder).

    ``path`` is the directory the command line chose (``<default_root_dir>/lightning_logs/
    version_N``). Processes of one run may choose differently (each scans the folder when it
    starts), so the first :meth:`resolve` of a run, made by every process at ``setup``, takes
    rank 0's and creates it there, claiming the version for this run.
    """

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self._resolved = False

    def resolve(self, trainer: pl.Trainer) -> Path:
        if not self._resolved:
            self.path = Path(trainer.strategy.broadcast(str(self.path)))
            if trainer.is_global_zero:
                self.path.mkdir(parents=True, exist_ok=True)
            self._resolved = True
        return self.path

    def setup(self, trainer: pl.Trainer, pl_module: pl.LightningModule, stage: str) -> None:
        self.resolve(trainer)


def run_directory(trainer: pl.Trainer) -> Path:
    """The run's own directory: the :class:`RunDirectory` callback's when the trainer has one
    (every ``train_cls.py`` run), else ``trainer.log_dir`` (or ``default_root_dir``), as for a
    Trainer built by hand. Call it on every process (the first call broadcasts)."""
    cb = next((c for c in trainer.callbacks if isinstance(c, RunDirectory)), None)
    if cb is not None:
        return cb.resolve(trainer)
    return Path(trainer.log_dir or trainer.default_root_dir)


#: columns always present in metrics.csv, in this order (others are appended sorted).
COLUMNS = ("epoch", "step", "lr", "train/loss", "train/acc", "val/loss", "val/acc", "val/acc5")


class EpochMetricsCSV(Callback):
    """One row per training epoch in ``metrics.csv`` in the run's directory
    (:func:`run_directory`).

    Columns: ``epoch``, ``step`` (optimizer steps so far), ``lr`` (at the epoch's start), the
    epoch means of ``train/*`` and the ``val/*`` metrics of that epoch (empty if validation did
    not run). No timing columns, so a seeded CPU run is reproducible file for file.

    The file is rewritten atomically (temporary file + ``os.replace``) after every epoch. The
    rows also travel in every checkpoint, so when a run resumes (``--ckpt_path``) the file is
    rebuilt from the checkpoint's history: rows of epochs before the restored epoch come from
    the checkpoint (a damaged or edited file on disk cannot leak into the summary), later ones
    are dropped, and the file stays one continuous row per epoch.
    """

    def __init__(self, filename: str = "metrics.csv") -> None:
        self.filename = filename
        self.rows: list[dict[str, Any]] = []
        self.path: Path | None = None
        self._restored: list[dict[str, Any]] | None = None
        self._validated: int | None = None  # the epoch whose validation ran last

    def on_validation_epoch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if not trainer.sanity_checking:
            self._validated = trainer.current_epoch

    def state_dict(self) -> dict[str, Any]:
        return {"rows": [dict(r) for r in self.rows]}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self._restored = [dict(r) for r in state_dict.get("rows", [])]
        self.rows = list(self._restored)

    def setup(self, trainer: pl.Trainer, pl_module: pl.LightningModule, stage: str) -> None:
        self.path = run_directory(trainer) / self.filename

    def on_train_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self.path = run_directory(trainer) / self.filename
        start = trainer.current_epoch
        if self._restored is not None:
            self.rows = [r for r in self._restored if r["epoch"] < start]
            self._write()
        elif self.path.is_file() and start > 0:
            self.rows = [r for r in read_metrics_csv(self.path) if r["epoch"] < start]
        else:
            self.rows = []

    def on_train_epoch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if trainer.sanity_checking or self.path is None:
            return
        row: dict[str, Any] = {"epoch": trainer.current_epoch, "step": trainer.global_step}
        validated = self._validated == trainer.current_epoch
        for key, value in trainer.callback_metrics.items():
            # epoch-level metrics only: "split/name" keys and lr (not the progress-bar "loss");
            # val/* only when this epoch validated (callback_metrics keep the last values)
            if key.startswith("test/") or ("/" not in key and key != "lr"):
                continue
            if key.startswith("val/") and not validated:
                continue
            if isinstance(value, torch.Tensor):
                if value.numel() != 1:
                    continue
                value = value.item()
            row[key] = float(value)
        self.rows = [r for r in self.rows if r["epoch"] < row["epoch"]] + [row]
        self._write()

    @rank_zero_only
    def _write(self) -> None:
        assert self.path is not None
        keys = {k for r in self.rows for k in r}
        columns = [c for c in COLUMNS if c in keys or c in ("train/loss", "val/loss", "val/acc")]
        columns += sorted(keys - set(columns))
        buf = io.StringIO()
        writer = csv.DictWriter(buf, fieldnames=columns, lineterminator="\n")
        writer.writeheader()
        for r in self.rows:
            writer.writerow({k: ("" if r.get(k) is None else _fmt(r[k])) for k in columns})
        self.path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write_text(self.path, buf.getvalue())


class BestAndLastCheckpoint(ModelCheckpoint):
    """``ModelCheckpoint`` whose ``last.ckpt`` really is the last epoch's.

    Lightning (2.6) writes ``last.ckpt`` only in a step where a top-k checkpoint was also
    saved, so after an epoch that did not improve the monitored metric, ``last.ckpt`` is older
    than the run, and ``--ckpt_path last`` silently re-trains epochs. Here ``last.ckpt`` is a
    ``ModelCheckpoint`` of its own (``monitor=None``, one file named ``last``), driven through
    its public hooks by this one, so it is written at the end of every training epoch, after
    that epoch's validation and its ``metrics.csv`` row: the checkpoint holds the epoch's whole
    history (``save_last: link`` writes a copy too).

    A run folder that was moved or copied resumes in place: the restored state's paths are
    moved into the new checkpoint folder (Lightning would drop them, then write ``last-v1.ckpt``
    and ``best-epochNNN-v1.ckpt`` beside the old files, and the next ``--ckpt_path last`` would
    restore the stale ``last.ckpt``).

    Without a ``dirpath`` the checkpoints go to ``checkpoints/`` in the run's directory
    (:func:`run_directory`), not where the logger keeps its files (Lightning's choice, which for
    MLflow is the tracking store, shared by every run). That folder is new for a new run, so
    Lightning's "exists and is not empty" warning there only ever meant a resume, and is not
    shown.
    """

    #: the ModelCheckpoint that writes ``last.ckpt`` (made at setup from ``save_last``)
    last_checkpoint: ModelCheckpoint | None = None

    def setup(self, trainer: pl.Trainer, pl_module: pl.LightningModule, stage: str) -> None:
        own = self.dirpath is None  # the run's own folder: new and empty, or this run's resumed
        if own:
            self.dirpath = str(run_directory(trainer) / "checkpoints")
        if self.save_last and self.last_checkpoint is None:
            # last.ckpt is a checkpoint of its own: the latest epoch, one file, always written;
            # this callback keeps only the ranked ones
            self.last_checkpoint = ModelCheckpoint(
                filename=self.CHECKPOINT_NAME_LAST,
                monitor=None,
                save_top_k=1,
                every_n_epochs=1,
                save_on_train_epoch_end=True,  # after the epoch's validation and its row
                save_weights_only=self.save_weights_only,
                enable_version_counter=False,
            )
            self.save_last = False
        if self.last_checkpoint is not None:
            self.last_checkpoint.dirpath = self.dirpath
        with warnings.catch_warnings():
            if own:  # Lightning's "exists and is not empty" can only mean a resume here
                warnings.filterwarnings("ignore", "Checkpoint directory .* is not empty")
            super().setup(trainer, pl_module, stage)
            if self.last_checkpoint is not None:
                self.last_checkpoint.setup(trainer, pl_module, stage)

    def state_dict(self) -> dict[str, Any]:
        state = super().state_dict()
        if self.last_checkpoint is not None:
            state["last_checkpoint"] = self.last_checkpoint.state_dict()
        return state

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        state_dict = dict(state_dict)
        last = state_dict.pop("last_checkpoint", None)  # absent in checkpoints written before
        old = state_dict.get("dirpath")
        if old and self.dirpath and Path(old) != Path(self.dirpath):
            state_dict = _moved_state(state_dict, Path(old), Path(self.dirpath))
        super().load_state_dict(state_dict)
        if last is not None and self.last_checkpoint is not None:
            old = last.get("dirpath")
            if old and self.dirpath and Path(old) != Path(self.dirpath):
                last = _moved_state(last, Path(old), Path(self.dirpath))
            self.last_checkpoint.load_state_dict(last)

    def on_train_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        super().on_train_start(trainer, pl_module)
        if self.last_checkpoint is not None:
            self.last_checkpoint.on_train_start(trainer, pl_module)

    def on_train_epoch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        every = trainer.check_val_every_n_epoch or 1
        with warnings.catch_warnings():
            if trainer.current_epoch + 1 < every:
                # Before the first scheduled validation there is no metric to rank by, so
                # nothing is ranked or saved (Lightning's behaviour), without its "could not
                # find the monitored key ... Did you call log()?", which sends users looking for
                # a bug that is not there
                warnings.filterwarnings("ignore", ".*could not find the monitored key")
            super().on_train_epoch_end(trainer, pl_module)
        if self.last_checkpoint is not None:  # after the ranked save: last.ckpt records it
            if self.dirpath:  # in the checkpoint's own state, so set before it is written
                name = f"{self.CHECKPOINT_NAME_LAST}{self.FILE_EXTENSION}"
                self.last_model_path = str(Path(self.dirpath) / name)
            self.last_checkpoint.on_train_epoch_end(trainer, pl_module)
            self.last_model_path = self.last_checkpoint.best_model_path


def _moved_state(state: dict[str, Any], old: Path, new: Path) -> dict[str, Any]:
    """``ModelCheckpoint`` state with the paths under ``old`` moved to ``new``."""

    def move(path: Any) -> Any:
        if not path or Path(path).parent != old:
            return path
        return str(new / Path(path).name)

    state = dict(state, dirpath=str(new))
    for key in ("best_model_path", "kth_best_model_path", "last_model_path"):
        state[key] = move(state.get(key))
    state["best_k_models"] = {move(k): v for k, v in (state.get("best_k_models") or {}).items()}
    return state


def _fmt(value: Any) -> str:
    if isinstance(value, float):
        return repr(value) if math.isfinite(value) else str(value)
    return str(value)


def _human(n: float) -> str:
    for unit, scale in (("G", 1e9), ("M", 1e6), ("K", 1e3)):
        if abs(n) >= scale:
            return f"{n / scale:.2f}{unit}"
    return f"{n:.0f}"


class RunSummary(Callback):
    """Measures wall time and, at the end of ``fit``/``test``, prints one summary line and keeps
    it as :attr:`summary` (a dict, the return value of ``visattn.training.cli.run``).

    ``params`` counts ``pl_module.net``; ``macs`` are multiply-accumulates of one forward pass
    per image at the data module's image shape (``visattn.profile.count_macs``).

    ``wall_s`` of a ``fit`` resumed from a checkpoint adds the earlier pieces' time, which the
    checkpoint carries (``earlier_s`` in the summary; the time after a piece's last checkpoint
    is not counted); a checkpoint written before it was recorded adds nothing. The checkpoint
    also carries that time by the processor that spent it
    (:func:`visattn.profile.device_description` of the trainer's device): ``earlier_s_by_device``
    in the summary, with ``device`` this piece's (a piece can run on another machine than the
    one before). A checkpoint that recorded only the total gives it under
    :data:`UNRECORDED_DEVICE`.

    ``cpu_s`` is the CPU time the fit spent, earlier pieces included (:func:`cpu_seconds`: this
    process's and its reaped child processes', so the time a stopped or waiting process spends
    is not counted, unlike ``wall_s``), with the earlier pieces' by processor in
    ``earlier_cpu_s_by_device``; both are ``None`` when a checkpoint the fit resumed from did
    not record it (an older visattn), so that a total is never short of a piece.
    """

    #: the processor of time a checkpoint recorded without saying where it was spent
    UNRECORDED_DEVICE = "(processor not recorded)"

    def __init__(self) -> None:
        self.summary: dict[str, Any] = {}
        self._t0: float | None = None
        self._earlier = 0.0
        self._earlier_by: dict[str, float] = {}
        self._c0 = cpu_seconds()
        self._earlier_cpu_by: dict[str, float] | None = {}
        self._device = device_description("cpu")

    def setup(self, trainer: pl.Trainer, pl_module: pl.LightningModule, stage: str) -> None:
        self._t0 = time.perf_counter()
        self._c0 = cpu_seconds()
        self._earlier = 0.0
        self._earlier_by = {}
        self._earlier_cpu_by = {}
        self._device = device_description(trainer.strategy.root_device)

    def _elapsed(self) -> float:
        return time.perf_counter() - (self._t0 or time.perf_counter())

    def _cpu_by_device(self) -> dict[str, float] | None:
        """The fit's CPU seconds by processor so far, earlier pieces included (``None``: an
        earlier piece's is unknown)."""
        if self._earlier_cpu_by is None:
            return None
        by_device = dict(self._earlier_cpu_by)
        by_device[self._device] = by_device.get(self._device, 0.0) + cpu_seconds() - self._c0
        return by_device

    def state_dict(self) -> dict[str, Any]:
        elapsed = self._elapsed()
        by_device = dict(self._earlier_by)
        by_device[self._device] = by_device.get(self._device, 0.0) + elapsed
        state = {"fit_s": self._earlier + elapsed, "fit_s_by_device": by_device}
        cpu = self._cpu_by_device()
        return state if cpu is None else {**state, "fit_cpu_s_by_device": cpu}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self._earlier = float(state_dict.get("fit_s", 0.0))
        by_device = state_dict.get("fit_s_by_device")
        if isinstance(by_device, dict):
            self._earlier_by = {str(k): float(v) for k, v in by_device.items()}
        else:
            self._earlier_by = {self.UNRECORDED_DEVICE: self._earlier} if self._earlier else {}
        cpu = state_dict.get("fit_cpu_s_by_device")
        if isinstance(cpu, dict):
            self._earlier_cpu_by = {str(k): float(v) for k, v in cpu.items()}
        else:  # an older checkpoint: its pieces' CPU time is unknown, unless it had none
            self._earlier_cpu_by = None if self._earlier else {}

    def _profile(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule
    ) -> tuple[int, int, tuple]:
        net = getattr(pl_module, "net", pl_module)
        dm = trainer.datamodule
        shape = tuple(getattr(dm, "image_shape", None) or net.default_input_size)
        return count_params(net), int(count_macs(net, (1, *shape))), shape

    def _finish(self, trainer: pl.Trainer, pl_module: pl.LightningModule, stage: str) -> None:
        earlier = self._earlier if stage == "fit" else 0.0
        wall = earlier + self._elapsed()
        if stage == "fit":
            earlier_cpu = None if self._earlier_cpu_by is None else dict(self._earlier_cpu_by)
            cpu_by = self._cpu_by_device()
        else:
            earlier_cpu, cpu_by = {}, {self._device: cpu_seconds() - self._c0}
        params, macs, shape = self._profile(trainer, pl_module)
        metrics_cb = next((c for c in trainer.callbacks if isinstance(c, EpochMetricsCSV)), None)
        ckpt = (
            trainer.checkpoint_callback
            if isinstance(trainer.checkpoint_callback, ModelCheckpoint)
            else None
        )
        rows = metrics_cb.rows if metrics_cb is not None and stage == "fit" else []
        vals = [(r["val/acc"], r["epoch"]) for r in rows if r.get("val/acc") is not None]
        best = max(vals, key=lambda v: v[0]) if vals else None
        test_acc = trainer.callback_metrics.get("test/acc") if stage == "test" else None
        metrics_csv = metrics_cb.path if metrics_cb is not None else None
        self.summary = {
            "log_dir": str(run_directory(trainer)),
            "metrics_csv": str(metrics_csv)
            if metrics_csv is not None and metrics_csv.is_file()
            else None,
            "best_val_acc": best[0] if best else None,
            "best_epoch": best[1] if best else None,
            "last_val_acc": vals[-1][0] if vals else None,
            "test_acc": float(test_acc) if test_acc is not None else None,
            "params": params,
            "macs": macs,
            "wall_s": wall,
            "earlier_s": earlier,
            "earlier_s_by_device": dict(self._earlier_by) if stage == "fit" else {},
            "cpu_s": None if cpu_by is None else sum(cpu_by.values()),
            "earlier_cpu_s_by_device": earlier_cpu,
            "device": self._device,
            "best_ckpt": (ckpt.best_model_path or None) if ckpt else None,
            "last_ckpt": (ckpt.last_model_path or None) if ckpt else None,
            "epochs": len(rows) if stage == "fit" else 0,
            "memory_format": getattr(pl_module, "memory_format", "NCHW"),
        }
        self._print(stage, shape)

    @rank_zero_only
    def _print(self, stage: str, shape: tuple) -> None:
        s = self.summary
        if stage == "fit":
            acc = (
                "n/a"
                if s["best_val_acc"] is None
                else f"{s['best_val_acc']:.4f} (epoch {s['best_epoch']})"
            )
            head = f"best val/acc {acc}"
        else:
            head = f"test/acc {s['test_acc']:.4f}" if s["test_acc"] is not None else "test/acc n/a"
        print(
            f"visattn {stage}: {head} | params {_human(s['params'])} ({s['params']:,}) | "
            f"MACs {_human(s['macs'])} per image at {'x'.join(map(str, shape))} | "
            f"{s['memory_format']} | wall {s['wall_s']:.1f} s | log_dir {s['log_dir']}",
            flush=True,
        )

    def on_fit_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self._finish(trainer, pl_module, "fit")

    def on_test_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        self._finish(trainer, pl_module, "test")


class ExactResumeRNG(Callback):
    """The global random states (torch, numpy, Python) saved in every checkpoint and restored
    at the first training epoch start after a resume (after the resumed run's sanity check,
    which draws from them), so that a run resumed at an epoch boundary draws the same shuffles
    and augmentations as the uninterrupted run. Lightning restores none of them."""

    KEY = "visattn_rng"

    def __init__(self) -> None:
        self._to_restore: dict[str, Any] | None = None

    def on_save_checkpoint(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, checkpoint: dict[str, Any]
    ) -> None:
        kind, keys, pos, has_gauss, gauss = np.random.get_state()
        version, internal, gauss_next = random.getstate()
        # tensors and plain numbers only: Lightning loads checkpoints with weights_only=True
        checkpoint[self.KEY] = {
            "torch": torch.get_rng_state(),
            "numpy": [kind, torch.from_numpy(keys.astype(np.int64)), pos, has_gauss, gauss],
            "python": [version, torch.tensor(internal, dtype=torch.int64), gauss_next],
        }

    def on_load_checkpoint(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, checkpoint: dict[str, Any]
    ) -> None:
        self._to_restore = checkpoint.get(self.KEY)

    def on_train_epoch_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        state, self._to_restore = self._to_restore, None
        if state:
            torch.set_rng_state(state["torch"])
            kind, keys, pos, has_gauss, gauss = state["numpy"]
            np.random.set_state((kind, keys.numpy().astype(np.uint32), pos, has_gauss, gauss))
            version, internal, gauss_next = state["python"]
            random.setstate((version, tuple(int(v) for v in internal.tolist()), gauss_next))


def _keeps_running_stats(m: torch.nn.Module) -> bool:
    """A norm layer that updates running statistics in train mode (every batch, instance and
    sync batch norm that tracks them, timm's ``BatchNormAct2d``, lazy ones): the public
    attributes they share, not torch's private base class."""
    return bool(getattr(m, "track_running_stats", False)) and isinstance(
        getattr(m, "running_mean", None), torch.Tensor
    )


class BackboneFreeze(Callback):
    """Keep the backbone of ``pl_module.net`` fixed for the first ``epochs`` training epochs,
    then release it (fine-tuning a trained network with new attention blocks).

    Frozen means no gradients (the optimizer skips parameters without one, so neither momentum
    nor weight decay touches them) and the backbone's norm layers in eval mode, so their running
    statistics stay too; norm layers inside attention blocks keep training. Lightning puts the
    module back in train mode after every validation, so eval mode is asserted before each
    training batch.
    """

    def __init__(self, epochs: int) -> None:
        self.epochs = int(epochs)
        self.frozen = False
        self._norms: list[torch.nn.Module] = []

    @staticmethod
    def _backbone_norms(net: torch.nn.Module) -> list[torch.nn.Module]:
        inside_attn = {id(s) for m in attention_modules(net) for s in m.modules()}
        return [m for m in net.modules() if _keeps_running_stats(m) and id(m) not in inside_attn]

    def on_train_epoch_start(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        frozen = trainer.current_epoch < self.epochs
        if frozen == self.frozen:
            return
        for _, p in split_parameters(pl_module.net)["backbone"]:
            p.requires_grad_(not frozen)
        self.frozen = frozen
        self._norms = self._backbone_norms(pl_module.net) if frozen else []
        if not frozen:
            pl_module.net.train(pl_module.training)

    def on_train_batch_start(
        self, trainer: pl.Trainer, pl_module: pl.LightningModule, batch: Any, batch_idx: int
    ) -> None:
        for m in self._norms:
            m.eval()


class AttentionPictures(Callback):
    """Every ``every_n_epochs`` training epochs (and after the last), the attention maps of a
    fixed batch of validation images and their Grad-CAM, as pictures in the run's loggers.

    The images are the first ``num_images`` of the validation set (the same ones every time,
    so the pictures show how the maps change as the network trains), side by side in one
    picture per map (:func:`visattn.visualize.maps.logger_pictures`, the maps of
    ``python -m visattn.visualize``'s panels, captured with :func:`visattn.capture_attention`):

    * ``gradcam/<stage>``: the Grad-CAM overlay of the last stage for the true label
      (Selvaraju et al., ICCV 2017; :func:`visattn.visualize.localization.gradcam`), for every
      network;
    * ``attention/<block path>``: each spatial or mixed map, overlaid on the images;
    * ``channels/<stage>``: the channel weights of the stage's blocks, a row per block.

    They go to every logger that takes images (TensorBoard, MLflow, W&B; see
    :func:`visattn.training.loggers.log_image`) at the epoch's last optimizer step; for the
    others one info message says that none are sent.

    The network runs in eval mode (its mode is restored), draws no random numbers and updates
    no statistic, so a run with pictures trains exactly as one without. Grad-CAM needs the
    ``grad-cam`` package (``visattn[ablate]``); without it the maps are drawn alone, after one
    info message. Rank 0 draws them.

    Args:
        every_n_epochs: log after epochs ``every_n_epochs - 1``, ``2 * every_n_epochs - 1``,
            ... and after the last epoch of the fit.
        num_images: how many validation images.
        gradcam: add the Grad-CAM overlay.
    """

    def __init__(self, every_n_epochs: int = 2, num_images: int = 4, gradcam: bool = True) -> None:
        if int(every_n_epochs) < 1:
            raise ValueError(
                f"AttentionPictures: every_n_epochs must be >= 1, got {every_n_epochs}"
            )
        if int(num_images) < 1:
            raise ValueError(f"AttentionPictures: num_images must be >= 1, got {num_images}")
        self.every_n_epochs = int(every_n_epochs)
        self.num_images = int(num_images)
        self.gradcam = bool(gradcam)
        self._told: set[str] = set()

    def _tell(self, key: str, message: str) -> None:
        if key not in self._told:
            self._told.add(key)
            rank_zero_info(f"AttentionPictures: {message}")

    def _due(self, trainer: pl.Trainer) -> bool:
        epoch = trainer.current_epoch
        last = trainer.max_epochs is not None and epoch == trainer.max_epochs - 1
        return (epoch + 1) % self.every_n_epochs == 0 or last

    def _use_gradcam(self, net: torch.nn.Module) -> bool:
        if not self.gradcam:
            return False
        try:
            import pytorch_grad_cam  # noqa: F401
        except ImportError:
            self._tell("gradcam", "no Grad-CAM (pip install 'visattn[ablate]'); maps only")
            return False
        try:
            last_stage(net)
        except ValueError as e:
            self._tell("gradcam", f"no Grad-CAM ({e}); maps only")
            return False
        return True

    @rank_zero_only
    def on_train_epoch_end(self, trainer: pl.Trainer, pl_module: pl.LightningModule) -> None:
        if trainer.sanity_checking or not self._due(trainer):
            return
        loggers = [lg for lg in trainer.loggers if takes_images(lg)]
        for lg in trainer.loggers:
            if lg not in loggers:
                self._tell(type(lg).__name__, f"{type(lg).__name__} takes no images; none sent")
        if not trainer.loggers:
            self._tell("none", "the run has no logger; no pictures are drawn")
        dm = trainer.datamodule
        net = getattr(pl_module, "net", pl_module)
        if not loggers:
            return
        if getattr(dm, "val_dataset", None) is None or not hasattr(dm, "denormalize"):
            self._tell("data", "the data module has no val_dataset / denormalize; none drawn")
            return
        gradcam = self._use_gradcam(net)
        if not gradcam and not any(is_block(m) for m in net.modules()):
            self._tell(
                "blocks", "the network has no attention block and no Grad-CAM; nothing to draw"
            )
            return
        self._log(trainer, loggers, dm, net, gradcam)

    def _log(
        self, trainer: pl.Trainer, loggers: list, dm: Any, net: torch.nn.Module, gradcam: bool
    ) -> None:
        indices = list(range(min(self.num_images, len(dm.val_dataset))))
        batch = validation_pictures(dm, indices)
        pictures = logger_pictures(
            net, batch["images"], batch["display"], labels=batch["labels"], gradcam=gradcam
        )
        for tag, picture in pictures.items():
            array = picture.permute(1, 2, 0).numpy()
            for lg in loggers:
                log_image(lg, tag, array, trainer.global_step)
