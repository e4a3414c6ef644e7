"""``ClassificationModule``: loss, metrics, optimizer and schedule around a visattn model."""

from __future__ import annotations

import inspect
import math
from typing import Any

import lightning.pytorch as pl
import torch
import torch.nn.functional as F
from lightning.pytorch.utilities import rank_zero_warn
from torchmetrics.classification import MulticlassAccuracy

from .._safe_path import IMPORTED
from .._values import OptionError
from ..models import create_model
from ..models.placement import Placement, normalize_placements, placements_to_config
from .callbacks import BackboneFreeze, ExactResumeRNG
from .optimizers import optimizer_spec
from .parameters import PARAM_KINDS, split_parameters

__all__ = ["DEFAULT_NUM_CLASSES", "ClassificationModule", "NonFiniteLossError", "lr_factor"]

#: the checkpoint entry that records the data's facts a deployed network needs
DATA_RECORD = "visattn_data"
#: the checkpoint key listing the user's own modules the run imported (``--import``)
IMPORTS_RECORD = "visattn_imports"
#: the class count a module built without ``num_classes`` starts with, until a data module says
DEFAULT_NUM_CLASSES = 10

SCHEDULES = ("multistep", "cosine", "linear", "constant")


def _defaults(options: dict[str, Any]) -> dict[str, Any]:
    """The :class:`ClassificationModule` defaults of ``options``' keys (its signature's)."""
    params = inspect.signature(ClassificationModule.__init__).parameters
    return {k: params[k].default for k in options}


class NonFiniteLossError(FloatingPointError):
    """The training loss became NaN or infinite."""


def lr_factor(
    epoch: float,
    *,
    schedule: str,
    max_epochs: float,
    milestones: list[int] | tuple[int, ...] = (),
    gamma: float = 0.1,
    warmup_epochs: float = 0.0,
    warmup_start: float = 0.01,
    min_lr_ratio: float = 0.0,
) -> float:
    """Learning-rate multiplier at (fractional) ``epoch``.

    * warm-up: for ``epoch < warmup_epochs`` a linear ramp from ``warmup_start`` to 1
      (Goyal et al., "Accurate, Large Minibatch SGD", 2017);
    * ``multistep``: ``gamma ** (number of milestones <= epoch)`` (He et al., CVPR 2016);
    * ``cosine``: ``min + (1 - min) * (1 + cos(pi * t)) / 2`` with ``t`` the fraction of the
      epochs after warm-up (Loshchilov & Hutter, SGDR, ICLR 2017, without restarts);
    * ``linear``: ``1 - (1 - min) * t``, a straight decay to ``min`` over the same ``t`` (with
      the warm-up, the triangular one-cycle shape of Smith & Topin, "Super-Convergence", 2019);
    * ``constant``: 1.
    """
    if warmup_epochs > 0 and epoch < warmup_epochs:
        return warmup_start + (1.0 - warmup_start) * epoch / warmup_epochs
    if schedule == "multistep":
        return gamma ** sum(epoch >= m for m in milestones)
    if schedule in ("cosine", "linear"):
        span = max(max_epochs - warmup_epochs, 1e-8)
        t = min(max((epoch - warmup_epochs) / span, 0.0), 1.0)
        if schedule == "linear":
            return 1.0 - (1.0 - min_lr_ratio) * t
        return min_lr_ratio + (1.0 - min_lr_ratio) * 0.5 * (1.0 + math.cos(math.pi * t))
    return 1.0


def _check_rates(lr: float, weight_decay: float, lr_mult: dict[str, float] | None) -> None:
    """Refuse a learning rate, weight decay or per-kind multiplier that would train nothing or
    diverge at the first step: 0, negative, NaN or infinite (naming the option)."""
    if not 0 < lr < math.inf:  # 0 would train nothing, silently; NaN fails this too
        raise OptionError(f"--model.lr must be a finite number > 0, got {lr}")
    if not 0 <= weight_decay < math.inf:  # negative decay grows the weights; NaN fails too
        raise OptionError(
            f"weight_decay must be a finite number >= 0 (model.weight_decay), got {weight_decay}"
        )
    unknown = set(lr_mult or {}) - set(PARAM_KINDS)
    if unknown:
        raise OptionError(
            f"lr_mult: unknown parameter kind(s) {sorted(unknown)}; use {list(PARAM_KINDS)}"
        )
    if any(
        isinstance(v, bool) or not isinstance(v, (int, float)) or not 0 <= v < math.inf
        for v in (lr_mult or {}).values()
    ):  # NaN and infinity too: they stop the run at its first step
        raise OptionError(f"lr_mult values must be finite numbers >= 0, got {lr_mult}")


class ClassificationModule(pl.LightningModule):
    """Image classification with a ``visattn.create_model`` network in ``self.net``.

    Loss: cross-entropy with label smoothing ``label_smoothing`` (Szegedy et al., CVPR 2016).
    Random states are saved in every checkpoint and restored on resume
    (:class:`~visattn.training.callbacks.ExactResumeRNG`), so a run resumed at an epoch boundary
    continues exactly as the uninterrupted run.

    Metrics: top-1/top-5 accuracy (torchmetrics, one object per split; top-5 becomes top-k with
    ``k = min(5, num_classes)``), logged as ``train/loss``, ``train/acc``, ``val/loss``,
    ``val/acc``, ``val/acc5``, ``test/loss``, ``test/acc``, ``test/acc5`` (epoch means) and
    ``lr``.

    The learning rate follows :func:`lr_factor` evaluated per optimizer step at the fractional
    epoch ``step / steps_per_epoch`` (``lr_interval="step"``, smooth warm-up and cosine) or at the
    integer epoch (``"epoch"``: constant within an epoch, as torch's MultiStepLR). Multi-step
    milestones fall on epoch boundaries either way.

    Args:
        model: a name from ``visattn.list_models()``.
        num_classes: output classes (linked from ``data.num_classes`` by the CLI). ``None``: the
            data module's count, taken in :meth:`setup` (10 until then); given, it must match
            the data module's (see :meth:`setup`).
        attention: a placement (:class:`~visattn.models.placement.Placement` or the same
            mapping) or a list of them, a block name (``"se"``: the block with its default
            placement, as ``{name: se}``), or None; LightningCLI parses it as one of these.
        model_kwargs: extra keyword arguments for ``visattn.create_model`` (e.g.
            ``checkpoint_path`` to start from trained weights).
        channels_last: run the network in channels-last memory format. ``None`` (default)
            picks it automatically: channels-last for the convolutional backbones (every visattn
            model), where it is faster on CPU and CUDA; pass ``false`` to keep NCHW.
        compile: wrap the network's forward in ``torch.compile`` (``self.net`` stays the plain
            module, so checkpoints hold ``net.*`` keys).
        optimizer: ``"sgd"`` or ``"adamw"``, or any ``torch.optim.Optimizer`` class as
            ``{"class_path": ..., "init_args": {...}}`` (LightningCLI's spelling) or a bare
            class path (:mod:`visattn.training.optimizers`).
        lr, momentum, nesterov, weight_decay, betas: optimizer settings (momentum/nesterov for
            SGD, betas for AdamW; a class path's own options go in its ``init_args``; ``lr``
            and ``weight_decay`` apply to every optimizer).
        no_weight_decay_norm_bias: no weight decay for 1-d parameters (norm scales/shifts,
            biases).
        lr_mult: learning-rate multipliers by parameter kind, ``{"backbone": .., "attention":
            .., "head": ..}`` (missing kinds: 1.0), for fine-tuning a trained network with new
            attention blocks: e.g. ``{"backbone": 0.1}``.
        freeze_backbone_epochs: keep the backbone fixed (no gradient, its norm layers in eval
            mode, so their running statistics stay) for this many epochs, then release it
            (the :class:`~visattn.training.callbacks.BackboneFreeze` callback).
        schedule: ``"multistep"``, ``"cosine"`` or ``"constant"``.
        milestones, gamma: multi-step epochs and factor.
        warmup_epochs, warmup_start: linear warm-up length (epochs, may be fractional) and
            starting factor.
        min_lr_ratio: cosine's final learning rate as a fraction of ``lr``.
        lr_interval: ``"step"`` or ``"epoch"`` (see above).
        label_smoothing: in ``[0, 1)``.
        check_finite_every: check the loss for NaN/inf every this many steps (1 = every step;
            larger values avoid a host sync per step on accelerators and report the first bad
            step late).
    """

    def __init__(
        self,
        model: str = "resnet20_cifar",
        num_classes: int | None = None,
        attention: Placement | list[Placement] | str | None = None,
        model_kwargs: dict | None = None,
        channels_last: bool | None = None,
        compile: bool = False,
        optimizer: str | dict[str, Any] = "sgd",
        lr: float = 0.1,
        momentum: float = 0.9,
        nesterov: bool = False,
        weight_decay: float = 1e-4,
        betas: tuple[float, float] = (0.9, 0.999),
        no_weight_decay_norm_bias: bool = False,
        lr_mult: dict[str, float] | None = None,
        freeze_backbone_epochs: int = 0,
        schedule: str = "multistep",
        milestones: list[int] | None = None,
        gamma: float = 0.1,
        warmup_epochs: float = 0.0,
        warmup_start: float = 0.01,
        min_lr_ratio: float = 0.0,
        lr_interval: str = "step",
        label_smoothing: float = 0.0,
        check_finite_every: int = 1,
    ) -> None:
        super().__init__()
        named = {"momentum": momentum, "nesterov": nesterov, "betas": betas}
        self._optimizer = optimizer_spec(optimizer, named, _defaults(named))
        if schedule not in SCHEDULES:
            raise OptionError(f"unknown schedule {schedule!r}; choose from {list(SCHEDULES)}")
        if lr_interval not in ("step", "epoch"):
            raise OptionError(f"lr_interval must be 'step' or 'epoch', got {lr_interval!r}")
        if not 0.0 <= label_smoothing < 1.0:
            raise OptionError(
                f"--model.label_smoothing must be in [0, 1) (the share of the target spread over "
                f"the other classes), got {label_smoothing}"
            )
        if check_finite_every < 1:
            raise OptionError(f"check_finite_every must be >= 1, got {check_finite_every}")
        _check_rates(lr, weight_decay, lr_mult)
        # the schedule multiplies lr: a negative factor would train uphill, silently
        for key, value, zero in (
            ("gamma", gamma, False),  # 0: nothing trains after the first milestone
            ("min_lr_ratio", min_lr_ratio, True),
            ("warmup_start", warmup_start, True),
        ):
            if not (0.0 <= value <= 1.0 and (zero or value > 0)):  # NaN fails this too
                span = "[0, 1]" if zero else "(0, 1]"
                raise OptionError(
                    f"{key} must be in {span} (model.{key}: a factor of model.lr), got {value}"
                )
        if not warmup_epochs >= 0:
            raise OptionError(
                f"warmup_epochs must be >= 0 (model.warmup_epochs), got {warmup_epochs}"
            )
        if any(not isinstance(m, int) or m < 0 for m in (milestones or [])):
            raise OptionError(f"milestones must be epochs (integers >= 0), got {milestones}")
        if freeze_backbone_epochs < 0:
            raise OptionError(f"freeze_backbone_epochs must be >= 0, got {freeze_backbone_epochs}")
        if num_classes is not None and (isinstance(num_classes, bool) or num_classes < 1):
            raise OptionError(f"num_classes must be an integer >= 1, got {num_classes}")
        # the placements go to create_model as they are; the record holds plain mappings
        self._placements = normalize_placements(attention)
        attention = placements_to_config(attention)  # same shape as given: one, or a list
        self._num_classes_given = num_classes is not None
        self.save_hyperparameters()
        self.channels_last = True if channels_last is None else bool(channels_last)
        self._build(num_classes or DEFAULT_NUM_CLASSES)
        self._bad_step: torch.Tensor | None = None
        self._val_bad = torch.zeros((), dtype=torch.bool)

    def _build(self, num_classes: int) -> None:
        """The network and the metrics for ``num_classes`` classes."""
        h = self.hparams
        self.hparams["num_classes"] = num_classes  # what the checkpoint records
        self.net = create_model(
            h.model, num_classes=num_classes, attention=self._placements, **(h.model_kwargs or {})
        )
        if self.channels_last:
            self.net = self.net.to(memory_format=torch.channels_last)
        # kept out of the module tree so state_dict holds only ``net.*``
        self.__dict__["_forward_net"] = torch.compile(self.net) if h.compile else self.net
        k = min(5, num_classes)
        self.train_acc = MulticlassAccuracy(num_classes, top_k=1, average="micro")
        self.val_acc = MulticlassAccuracy(num_classes, top_k=1, average="micro")
        self.val_acc5 = MulticlassAccuracy(num_classes, top_k=k, average="micro")
        self.test_acc = MulticlassAccuracy(num_classes, top_k=1, average="micro")
        self.test_acc5 = MulticlassAccuracy(num_classes, top_k=k, average="micro")

    def setup(self, stage: str) -> None:
        """Check the class count against the data module's, then give one example image at the
        data's size (``example_input_array``), so that Lightning's model summary counts the
        network's FLOPs and shows tensor sizes (not with ``compile``: that forward would compile
        the network once more for a batch of one).

        ``num_classes`` not given: the data module's count is taken (the network is built for
        it here, before any weights are loaded or optimizers made). Given and different from the
        data's: refused with both numbers (a silent 10-way head on 9-class data would train and
        test without a word).

        Raises:
            ValueError: ``num_classes`` was given and differs from the data module's.
        """
        dm = self._datamodule()
        n = getattr(dm, "num_classes", None)
        if isinstance(n, int) and n != self.hparams.num_classes:
            if self._num_classes_given:
                raise ValueError(
                    f"ClassificationModule(num_classes={self.hparams.num_classes}) but the data "
                    f"module has {n} classes ({type(dm).__name__}); pass num_classes={n}, or "
                    "leave it out to take the data's"
                )
            self._build(n)
        if self.example_input_array is not None or self.hparams.compile:
            return
        shape = getattr(dm, "image_shape", None) or getattr(self.net, "default_input_size", None)
        if shape is not None:
            self.example_input_array = torch.zeros(1, *shape)

    @property
    def memory_format(self) -> str:
        """``"channels_last"`` or ``"NCHW"``: the format the network runs in."""
        return "channels_last" if self.channels_last else "NCHW"

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.channels_last:
            x = x.contiguous(memory_format=torch.channels_last)
        return self._forward_net(x)

    # ---- steps -------------------------------------------------------------------------------

    def _loss(self, logits: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return F.cross_entropy(logits, y, label_smoothing=self.hparams.label_smoothing)

    def training_step(
        self, batch: tuple[torch.Tensor, torch.Tensor], batch_idx: int
    ) -> torch.Tensor:
        x, y = batch
        logits = self(x)
        loss = self._loss(logits, y)
        self._check_finite(loss, batch_idx)
        self.train_acc(logits, y)
        self.log("train/loss", loss, on_step=False, on_epoch=True, sync_dist=True)
        self.log("train/acc", self.train_acc, on_step=False, on_epoch=True)
        self.log("loss", loss, on_step=True, on_epoch=False, prog_bar=True, logger=False)
        return loss

    def _check_finite(self, loss: torch.Tensor, batch_idx: int) -> None:
        """Stop at a NaN/inf loss. On-device bookkeeping of the first bad step; the host reads
        it every ``check_finite_every`` steps (every step by default)."""
        step = self.global_step
        bad = ~torch.isfinite(loss.detach())
        if self._bad_step is None or self._bad_step.device != loss.device:
            self._bad_step = torch.full((), -1, dtype=torch.long, device=loss.device)
        first = torch.where(
            bad & (self._bad_step < 0), torch.tensor(step, device=loss.device), self._bad_step
        )
        self._bad_step = first
        if (batch_idx + 1) % self.hparams.check_finite_every and not self.trainer.is_last_batch:
            return
        bad_step = int(first.item())
        if bad_step >= 0:
            raise NonFiniteLossError(
                f"training loss became non-finite (nan/inf) at optimizer step {bad_step} "
                f"(epoch {self.current_epoch}). Try a lower learning rate (--model.lr), "
                "gradient clipping (--trainer.gradient_clip_val 1.0), or full precision "
                "(--trainer.precision 32-true); check the data for NaNs."
            )

    def validation_step(self, batch: tuple[torch.Tensor, torch.Tensor], batch_idx: int) -> None:
        x, y = batch
        logits = self(x)
        self.val_acc(logits, y)
        self.val_acc5(logits, y)
        loss = self._loss(logits, y)
        if self._val_bad.device != loss.device:
            self._val_bad = self._val_bad.to(loss.device)
        self._val_bad |= ~torch.isfinite(loss.detach())
        self.log("val/loss", loss, on_epoch=True, sync_dist=True)
        self.log("val/acc", self.val_acc, on_epoch=True, prog_bar=True)
        self.log("val/acc5", self.val_acc5, on_epoch=True)

    def on_validation_epoch_end(self) -> None:
        """Stop a diverging run at the first validation with a non-finite loss, before any
        checkpoint of that epoch is written (so no NaN network is ever saved as best)."""
        bad = bool(self._val_bad.item())
        self._val_bad = torch.zeros((), dtype=torch.bool, device=self._val_bad.device)
        if bad:
            raise NonFiniteLossError(
                f"validation loss became non-finite (nan/inf) at epoch {self.current_epoch} "
                "while the training loss was finite: the run diverged (running statistics or "
                "weights overflowed). Try a lower learning rate (--model.lr), gradient clipping "
                "(--trainer.gradient_clip_val 1.0), or full precision (--trainer.precision "
                "32-true)."
            )

    def test_step(self, batch: tuple[torch.Tensor, torch.Tensor], batch_idx: int) -> None:
        x, y = batch
        logits = self(x)
        self.test_acc(logits, y)
        self.test_acc5(logits, y)
        self.log("test/loss", self._loss(logits, y), on_epoch=True, sync_dist=True)
        self.log("test/acc", self.test_acc, on_epoch=True, prog_bar=True)
        self.log("test/acc5", self.test_acc5, on_epoch=True)

    def predict_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        x = batch[0] if isinstance(batch, (tuple, list)) else batch
        return self(x).softmax(-1)

    def configure_callbacks(self) -> list[pl.Callback]:
        """Exact resume (random states in every checkpoint) and, with
        ``freeze_backbone_epochs``, the backbone freeze: callbacks that every trainer of this
        module gets."""
        callbacks: list[pl.Callback] = [ExactResumeRNG()]
        if self.hparams.freeze_backbone_epochs:
            callbacks.append(BackboneFreeze(self.hparams.freeze_backbone_epochs))
        return callbacks

    def on_train_epoch_start(self) -> None:
        group = self.trainer.optimizers[0].param_groups[0]  # the base lr: undo the group's mult
        base = group["lr"] / group["lr_mult"] if group.get("lr_mult") else group["lr"]
        self.log("lr", base, on_epoch=True)

    # ---- optimisation ------------------------------------------------------------------------

    def _param_groups(self) -> list[dict[str, Any]]:
        """One group per (kind, decay) pair that has parameters: kinds from
        :func:`split_parameters` with their ``lr_mult``; no weight decay on 1-d parameters
        (norms, biases) when ``no_weight_decay_norm_bias``. Each group carries ``name`` and
        ``lr_mult``."""
        h = self.hparams
        mult = {k: 1.0 for k in PARAM_KINDS} | dict(h.lr_mult or {})
        groups = []
        for kind, named in split_parameters(self.net).items():
            params = [p for _, p in named]
            if h.no_weight_decay_norm_bias:
                parts = [("decay", [p for p in params if p.ndim > 1], h.weight_decay)]
                parts.append(("no_decay", [p for p in params if p.ndim <= 1], 0.0))
            else:
                parts = [("decay", params, h.weight_decay)]
            for tag, ps, wd in parts:
                if ps:
                    groups.append(
                        {
                            "params": ps,
                            "weight_decay": wd,
                            "lr": h.lr * mult[kind],
                            "lr_mult": mult[kind],
                            "name": f"{kind}/{tag}",
                        }
                    )
        return groups

    def _datamodule(self) -> Any:
        """The data module of the Trainer this module is attached to (``None``: not attached,
        or no data module), through Lightning's public ``trainer`` property, which raises
        while no Trainer is attached."""
        try:
            trainer = self.trainer
        except RuntimeError:
            return None
        return getattr(trainer, "datamodule", None)

    def on_save_checkpoint(self, checkpoint: dict[str, Any]) -> None:
        """Record what a deployed network needs from the data, so that an export reads it from
        the checkpoint, not from a data folder that may have changed or be elsewhere:
        ``checkpoint["visattn_data"]`` = class names, input shape, mean and std; and the
        modules of the user's own named with ``--import`` (``checkpoint["visattn_imports"]``)."""
        if IMPORTED:  # the user's own modules (their blocks): a load names them when missing
            checkpoint[IMPORTS_RECORD] = list(IMPORTED)
        dm = self._datamodule()
        if dm is None or not hasattr(dm, "image_shape"):
            return
        classes = getattr(dm, "classes", None)
        checkpoint[DATA_RECORD] = {
            "class_names": list(classes) if classes else None,
            "input_shape": list(dm.image_shape),
            "mean": [float(m) for m in dm.mean],
            "std": [float(v) for v in dm.std],
            "dataset": dm.source.name,
        }

    def configure_optimizers(self) -> dict[str, Any]:
        h = self.hparams
        groups = self._param_groups()
        opt = self._optimizer.build(groups, h.lr)
        max_epochs = self.trainer.max_epochs
        if h.schedule in ("cosine", "linear") and (max_epochs is None or max_epochs < 1):
            raise ValueError(
                f"schedule {h.schedule!r} needs --trainer.max_epochs (its length in epochs)"
            )
        if h.warmup_epochs > 0 and max_epochs is not None and h.warmup_epochs >= max_epochs > 0:
            rank_zero_warn(
                f"model.warmup_epochs {h.warmup_epochs} is not shorter than the run "
                f"(trainer.max_epochs {max_epochs}): the learning rate never reaches model.lr "
                f"{h.lr}; shorten the warm-up or train longer"
            )
        steps_per_epoch = self._steps_per_epoch()
        kwargs = dict(
            schedule=h.schedule,
            max_epochs=float(max_epochs or 0),
            milestones=list(h.milestones or []),
            gamma=h.gamma,
            warmup_epochs=h.warmup_epochs,
            warmup_start=h.warmup_start,
            min_lr_ratio=h.min_lr_ratio,
        )
        if h.lr_interval == "step":

            def fn(step: int) -> float:
                return lr_factor(step / steps_per_epoch, **kwargs)

        else:

            def fn(epoch: int) -> float:
                return lr_factor(float(epoch), **kwargs)

        sched = torch.optim.lr_scheduler.LambdaLR(opt, fn)
        return {"optimizer": opt, "lr_scheduler": {"scheduler": sched, "interval": h.lr_interval}}

    def _steps_per_epoch(self) -> float:
        """Optimizer steps per epoch (after ``limit_train_batches`` and accumulation)."""
        trainer = self.trainer
        _ = trainer.estimated_stepping_batches  # loads the train loader: num_training_batches
        batches = trainer.num_training_batches
        if not math.isfinite(batches) or batches < 1:
            raise ValueError("the learning-rate schedule needs a train loader with a known length")
        return float(math.ceil(batches / trainer.accumulate_grad_batches))
