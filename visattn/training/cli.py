"""``train_cls.py``'s command line: a ``LightningCLI`` over ``ClassificationModule`` and
``VisattnDataModule``, plus :func:`run` to execute one subcommand in-process.

What the CLI adds to plain LightningCLI:

* ``data.num_classes`` is linked into ``model.num_classes`` (written once, by the data).
* ``checkpoint.*``: a ModelCheckpoint keeping the best ``val/acc`` and ``last.ckpt``.
* Every run writes ``metrics.csv`` (one row per epoch) and prints one summary line
  (``EpochMetricsCSV``, ``RunSummary``); the resolved config goes to ``config.yaml``.
* Every run has its own directory, ``<default_root_dir>/lightning_logs/version_N``, whatever
  the logger: ``metrics.csv``, ``config.yaml``, ``checkpoints/`` and the summary's ``log_dir``
  are there (``RunDirectory``). The default logger is TensorBoard in that directory; any
  other (``--trainer.logger``) is built by ``visattn.training.loggers`` (its own error shown,
  a CSV logger under the same tree moved to the run's ``csv/`` folder).
* ``--ckpt_path last`` resumes the newest epoch of the newest ``version_N`` that has a last
  checkpoint, in the same directory (so its metrics.csv continues), with any logger, or fails
  saying where it looked. A resumed fit keeps the run's recorded model and data options,
  warning about each given value that would not take effect (``visattn.training.resume``).
* ``seed_everything`` defaults to 0 (reproducible unless asked otherwise).
* The progress bar shows the run's version as an integer (``v_num: 0``, not ``0.000``), and
  the model summary counts FLOPs on one image at the data's size.
* A config file may start with ``_base_: [piece.yaml, ...]`` (paths relative to the file), as
  in mmpretrain: the pieces are applied first, in order, then the file itself, exactly as if
  each had been given with its own ``--config`` (later values win; dicts such as
  ``model.attention`` are replaced, not merged).
"""

from __future__ import annotations

import copy
import importlib.util
import inspect
import sys
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from jsonargparse import Namespace
from lightning.fabric.plugins import CheckpointIO
from lightning.pytorch import Trainer, seed_everything
from lightning.pytorch.callbacks import (
    Callback,
    ProgressBar,
    RichProgressBar,
    TQDMProgressBar,
)
from lightning.pytorch.cli import LightningArgumentParser, LightningCLI, SaveConfigCallback
from lightning.pytorch.utilities import rank_zero_warn

from .._safe_path import imports_or_exit
from .._values import OptionError
from ..blocks.registry import UnknownBlockError
from ..data.datamodule import VisattnDataModule
from ..data.errors import DatasetIntegrityError, DatasetLayoutError, DatasetNotFoundError
from ..data.imagefolder import BadImageError
from ..locks import RunFolderLock
from ..models.checkpoint import (
    CheckpointError,
    check_training_checkpoint,
    read_checkpoint,
    training_checkpoint,
)
from ..models.pretrained import get_pretrained
from ..models.registry import UnknownModelError
from ..models.sites import PlacementError
from .callbacks import (
    BestAndLastCheckpoint,
    EpochMetricsCSV,
    RunDirectory,
    RunSummary,
    run_directory,
)
from .loggers import TENSORBOARD, FlushLoggersOnCheckpoint, RememberRunIds, build_loggers
from .module import ClassificationModule
from .options import parse, placement_normal_form, plain, restore_recorded, to_json
from .resume import (
    RUNS,
    SealedCheckpointIO,
    checkpoint_progress,
    claim_version,
    find_last_checkpoint,
    keep_recorded_seed,
    next_version,
)

__all__ = [
    "TESTED_CHECKPOINTS",
    "SaveConfigInRun",
    "VisattnCLI",
    "checkpoint_to_test",
    "cli_main",
    "resolve_eval_transform",
    "run",
]

#: the checkpoints a fit can be tested on when it ends (:func:`run`'s ``test``): the final
#: network, or the best by ``val/acc`` (the last where none was ranked)
TESTED_CHECKPOINTS = ("best", "last")


def checkpoint_to_test(summary: dict[str, Any], which: str) -> str | None:
    """The checkpoint of a finished fit (``summary``: :func:`run`'s) that ``which`` names.

    Raises:
        RuntimeError: ``"last"`` for a fit that wrote no ``last.ckpt``.
    """
    if which == "last":
        if not summary.get("last_ckpt"):
            raise RuntimeError("test: last needs last.ckpt (keep checkpoint.save_last on)")
        return summary["last_ckpt"]
    return summary.get("best_ckpt") or summary.get("last_ckpt")


def _local_ckpt_path(cfg: Namespace) -> str | None:
    """``cfg.ckpt_path`` when it names a local file: not Lightning's ``best``, ``last``, ``hpc``
    or ``registry``, nor a URL."""
    path = str(cfg.get("ckpt_path") or "")
    keyword = path in ("best", "last", "hpc") or path.startswith("registry") or "://" in path
    return path if path and not keyword else None


def _remove_if_empty(*folders: Path) -> None:
    """Remove each folder, in order, that is empty (a claimed run folder nothing was written to,
    then its ``lightning_logs``, then a ``default_root_dir`` the run made)."""
    for folder in folders:
        try:
            folder.rmdir()
        except OSError:  # not empty (or gone): keep it
            return


class _VersionAsText:
    """Progress-bar mixin: the logger's version shown as written (``v_num: 3``); Rich formats
    every number with three decimals (``v_num: 0.000``)."""

    def get_metrics(self, trainer: Trainer, pl_module: Any) -> dict[str, Any]:
        items = super().get_metrics(trainer, pl_module)  # type: ignore[misc]
        if "v_num" in items:
            items["v_num"] = str(items["v_num"])
        return items


class VisattnRichProgressBar(_VersionAsText, RichProgressBar):
    """Lightning's Rich progress bar, showing the run's version as an integer."""


class VisattnTQDMProgressBar(_VersionAsText, TQDMProgressBar):
    """Lightning's tqdm progress bar (used when Rich is not installed)."""


def _default_progress_bar(config: dict[str, Any], callbacks: list[Callback]) -> list[Callback]:
    """Lightning's default bar (Rich when installed, else tqdm) with the version fixed, unless
    the run turns the bar off or brings its own (among ``callbacks``)."""
    if config.get("enable_progress_bar") is False or any(
        isinstance(c, ProgressBar) for c in callbacks
    ):
        return []
    rich = importlib.util.find_spec("rich") is not None
    return [VisattnRichProgressBar() if rich else VisattnTQDMProgressBar()]


def _as_list(value: Any) -> list[Any]:
    """A trainer option that takes one object or a list of them (``callbacks``, ``plugins``),
    as a new list (none for ``None``)."""
    if value is None:
        return []
    return list(value) if isinstance(value, (list, tuple)) else [value]


def resolve_eval_transform(cfg: Namespace) -> None:
    """``--data.eval_transform TAG`` or ``model`` (the tag of ``--model.model``): the tag's
    eval transform as the mapping the data module takes, so ``config.yaml`` records it."""
    data = cfg.get("data")
    value = data.get("eval_transform") if data is not None else None
    if not isinstance(value, str) or value == "dataset":
        return
    name = cfg.model.model if value == "model" else value
    if value == "model" and "." not in name:
        raise ValueError(
            f"--data.eval_transform model: --model.model {name!r} is not a pretrained tag "
            "(<model>.<tag>, visattn.list_pretrained()); give a tag or 'dataset'"
        )
    cfg_ = get_pretrained(name).pretrained_cfg()
    data.eval_transform = {
        k: list(v) if isinstance(v, tuple) else v
        for k, v in cfg_.items()
        if k in ("input_size", "crop_pct", "interpolation", "mean", "std")
    }


class SaveConfigInRun(SaveConfigCallback):
    """LightningCLI's ``config.yaml``, written into the run's directory
    (:func:`~visattn.training.callbacks.run_directory`) rather than ``trainer.log_dir``, which
    for loggers other than TensorBoard and CSV is their ``save_dir`` (for MLflow, the tracking
    store shared by every run)."""

    def setup(self, trainer: Trainer, pl_module: Any, stage: str) -> None:
        if self.already_saved:
            return
        path = run_directory(trainer) / self.config_filename  # every process: it broadcasts
        if trainer.is_global_zero:
            path.parent.mkdir(parents=True, exist_ok=True)
            self.parser.save(
                self.config,
                str(path),
                skip_none=False,
                overwrite=self.overwrite,
                multifile=self.multifile,
            )
            self.save_config(trainer, pl_module, stage)
            self.already_saved = True
        self.already_saved = trainer.strategy.broadcast(self.already_saved)


class VisattnCLI(LightningCLI):
    """LightningCLI for visattn (see the module docstring)."""

    def __init__(self, *args: Any, test_after_fit: str | None = None, **kwargs: Any) -> None:
        self._test_after_fit = test_after_fit  # a fit's checkpoint to test when it ends
        self._logger_spec: Any = None  # --trainer.logger, built in instantiate_trainer
        self._root: Path | None = None  # --trainer.default_root_dir
        self._resuming = False  # --ckpt_path last: the run and its logger runs continue
        self._version = 0  # the run's N: lightning_logs/version_N
        self._lock: RunFolderLock | None = None  # held on version_N while this process writes
        self._fresh_root: Path | None = None  # default_root_dir when this run made it
        self._resumed_at: tuple[int, int] | None = None  # (epoch, step) of the resumed ckpt
        self._run = kwargs.get("run", True)  # subcommands (fit, test) or the classes only
        self._resolved = False  # given a RunConfig: its options were parsed elsewhere
        self._held_ckpt_path: str | None = None  # kept from LightningCLI's checkpoint parse
        self._parsers: list[LightningArgumentParser] = []  # init_parser's: main, subcommands
        self._exit_on_error = True  # what the caller asked of the main parser
        kwargs.setdefault("save_config_callback", SaveConfigInRun)
        kwargs.setdefault("save_config_kwargs", {"overwrite": True})
        kwargs.setdefault("seed_everything_default", 0)
        kwargs.setdefault("auto_configure_optimizers", False)  # the module's options own them
        try:
            super().__init__(ClassificationModule, VisattnDataModule, *args, **kwargs)
        finally:
            fresh = [self._fresh_root] if self._fresh_root is not None else []
            if self._lock is not None:
                self._lock.release()
                if not self._resuming:  # a run refused before it wrote anything leaves nothing
                    _remove_if_empty(self._lock.path.parent, self._lock.path.parent.parent, *fresh)
            else:
                _remove_if_empty(*fresh)

    def init_parser(self, **kwargs: Any) -> LightningArgumentParser:
        """Every parser (the main one, each subcommand's) raises instead of exiting, so that
        :func:`~.options.parse` can name the closest option first; whether the command line
        then exits is the main parser's ``exit_on_error``, as the caller gave it."""
        if not self._parsers:
            self._exit_on_error = kwargs.get("exit_on_error", True)
        parser = super().init_parser(**{**kwargs, "exit_on_error": False})
        self._parsers.append(parser)
        return parser

    @property
    def subcommand_parsers(self) -> dict[str, LightningArgumentParser]:
        """Each subcommand's parser by name (``fit``, ``test``, ...); jsonargparse names a
        subcommand's parser ``"<prog> [options] <name>"``."""
        return {p.prog.rsplit(" ", 1)[-1]: p for p in self._parsers[1:]}

    def parse_arguments(self, parser: LightningArgumentParser, args: Any) -> None:
        resolved = resolved_namespace(args)
        if resolved is not None:  # resolved once already (a sweep's driver): no parse
            self._resolved = True
            sub = resolved.get("subcommand")
            self.config = copy.deepcopy(resolved if self._run else resolved[sub])
            if not self._run:  # the classes only: no subcommand options (ckpt_path, ...)
                known = parser.get_defaults().as_dict()
                for key in [k for k in vars(self.config) if k not in known]:
                    del self.config[key]
        elif isinstance(args, (dict, Namespace)):
            self.config = parser.parse_object(args)
            self._hold_ckpt_path()
            return
        else:
            self.config = parse(
                parser,
                sys.argv[1:] if args is None else args,
                subcommands=self.subcommand_parsers,
                exit_on_error=self._exit_on_error,
            )
        sub = self.config.get("subcommand")
        _check_seed((self.config[sub] if sub else self.config).get("seed_everything"))
        path = _local_ckpt_path(self.config[sub]) if sub else None
        if path:  # named here, before LightningCLI reads its hyper-parameters
            saved = training_checkpoint(read_checkpoint(path, mmap=True), path)
            if sub in ("test", "validate") and not self._resolved:
                _check_same_network(self.config[sub].model, saved["hyper_parameters"], path)
        self._hold_ckpt_path()

    def _hold_ckpt_path(self) -> None:
        """Right after ``parse_arguments`` LightningCLI parses the config again with a
        checkpoint's hyper-parameters over the options given: for test/validate the checkpoint
        names the network to score. A fit resumes instead, and restore_recorded
        (before_instantiate_classes) compares the given options with the recorded ones: a
        changed network is refused, a changed option named, where Lightning's parse would
        replace them without a word; resolved args are one run's own options (its test). So
        the path is held back from that parse and given back before anything is built."""
        sub = self.config.get("subcommand")
        if sub and (self._resolved or sub == "fit"):
            self._held_ckpt_path = self.config[sub].get("ckpt_path")
            self.config[sub].ckpt_path = None

    def add_arguments_to_parser(self, parser: LightningArgumentParser) -> None:
        parser.link_arguments("data.num_classes", "model.num_classes", apply_on="instantiate")
        parser.add_lightning_class_args(BestAndLastCheckpoint, "checkpoint")
        parser.set_defaults(
            {
                "checkpoint.monitor": "val/acc",
                "checkpoint.mode": "max",
                "checkpoint.save_last": True,
                # after the epoch's validation and metrics.csv row: the checkpoint holds both
                "checkpoint.save_on_train_epoch_end": True,
                "checkpoint.filename": "best-epoch{epoch:03d}",
                "checkpoint.auto_insert_metric_name": False,
            }
        )

    def before_instantiate_classes(self) -> None:
        cfg = self.config[self.subcommand] if self.subcommand else self.config
        if self._held_ckpt_path is not None:  # see _hold_ckpt_path
            cfg.ckpt_path, self._held_ckpt_path = self._held_ckpt_path, None
        resolve_eval_transform(cfg)
        trainer = cfg.trainer
        if self.subcommand == "fit":
            check_max_epochs(trainer.get("max_epochs"))
        save_dir = Path(trainer.get("default_root_dir") or ".")
        if not save_dir.exists():  # made by this run: a refusal before training removes it
            self._fresh_root = save_dir
        version = None
        if cfg.get("ckpt_path") == "last":
            # resolved here for fit and test alike: Lightning's own "last" looks only at this
            # (new) trainer's checkpoints and, finding none, would test an untrained network
            last = find_last_checkpoint(save_dir)
            if last is None:
                raise FileNotFoundError(
                    f"--ckpt_path last: no checkpoint found under {save_dir / RUNS}"
                    "/version_*/checkpoints/last.ckpt; pass the --trainer.default_root_dir of the "
                    "run, or a checkpoint path"
                    + (", or drop --ckpt_path to start afresh" if self.subcommand == "fit" else "")
                )
            if self.subcommand == "fit":
                version = last[0]  # resume into the same version: its metrics.csv continues
                self._resumed_at = checkpoint_progress(last[1])
            cfg.ckpt_path = str(last[1])
        if self.subcommand == "fit" and cfg.get("ckpt_path") and Path(cfg.ckpt_path).is_file():
            self._keep_recorded_options(cfg)
        if trainer.get("logger") in (None, True):  # the default: TensorBoard in the run
            trainer.logger = Namespace(
                class_path=TENSORBOARD,
                init_args=Namespace(save_dir=str(save_dir), name=RUNS, version=version),
            )
        self._root = save_dir
        self._resuming = version is not None  # its MLflow / W&B runs continue too
        if version is not None or trainer.get("fast_dev_run"):  # a smoke test writes nothing
            self._version = next_version(save_dir) if version is None else version
        else:  # a folder of its own, even when runs start together in one default_root_dir
            self._version = claim_version(save_dir)
        if not trainer.get("fast_dev_run"):
            self._lock = RunFolderLock(save_dir / RUNS / f"version_{self._version}")
            self._lock.acquire()  # a second process resuming the same run is refused here
        # built in instantiate_trainer (visattn.training.loggers), where its own errors show;
        # config.yaml keeps the option as given
        self._logger_spec, trainer.logger = trainer.logger, False

    @staticmethod
    def _keep_recorded_options(cfg: Namespace) -> None:
        """A resumed fit keeps the run's recorded options (see ``visattn.training.resume``);
        the checkpoint is read here, before ``config.yaml`` or anything else is written."""
        saved = training_checkpoint(read_checkpoint(cfg.ckpt_path), cfg.ckpt_path)
        kept = restore_recorded(cfg, saved, cfg.ckpt_path)
        seed = keep_recorded_seed(cfg, cfg.ckpt_path)
        if seed:  # LightningCLI seeded before this hook: seed again with the recorded value
            seed_everything(cfg.seed_everything, workers=True)
            kept.append(seed)
        if kept:
            rank_zero_warn(
                f"resuming {cfg.ckpt_path}: these options would not take effect, the run keeps "
                "its recorded values (its optimizer and schedule state come from the "
                "checkpoint; start a new run to change them): " + "; ".join(kept)
            )

    def instantiate_classes(self) -> None:
        super().instantiate_classes()
        cfg = self.config[self.subcommand] if self.subcommand else self.config
        path = _local_ckpt_path(cfg)  # "last" is a file by now (before_instantiate_classes)
        if path:  # weights of another network are named before the run starts
            check_training_checkpoint(path, self.model)

    def instantiate_trainer(self, **kwargs: Any) -> Trainer:
        """LightningCLI's public ``instantiate_trainer`` with the run's loggers (built here, in
        the run's folder), visattn's callbacks and the sealed checkpoint IO. LightningCLI then
        adds the ``checkpoint`` callback and the config saver (neither saves in a
        ``fast_dev_run``: a smoke test writes nothing)."""
        init = self.config_init[self.subcommand] if self.subcommand else self.config_init
        given = dict(init.get("trainer") or {})
        if self._root is not None:
            cfg = self.config[self.subcommand] if self.subcommand else self.config
            cfg.trainer.logger = self._logger_spec  # what config.yaml records
            kwargs["logger"] = (
                build_loggers(
                    self._logger_spec,
                    self._root,
                    self._version,
                    resume=self._resuming,
                    resumed_at=self._resumed_at,
                )
                or False
            )
        callbacks = _as_list(given.get("callbacks"))
        if given.get("fast_dev_run"):
            callbacks = [*callbacks, RunSummary()]
        else:
            run_dir = []
            if self._root is not None:
                path = self._root / RUNS / f"version_{self._version}"
                run_dir = [RunDirectory(path), RememberRunIds(path), FlushLoggersOnCheckpoint()]
            callbacks = [*run_dir, *callbacks, EpochMetricsCSV(), RunSummary()]
        kwargs["callbacks"] = callbacks + _default_progress_bar(given, callbacks)
        plugins = _as_list(given.get("plugins"))
        if not any(isinstance(p, CheckpointIO) for p in plugins):  # a user's own one stays
            kwargs["plugins"] = [*plugins, SealedCheckpointIO()]
        return super().instantiate_trainer(**kwargs)

    def after_fit(self) -> None:
        """LightningCLI's ``after_<subcommand>`` hook: with ``test_after_fit`` (``"best"`` or
        ``"last"``) the same trainer tests the fitted module on that checkpoint (its seal
        checked as every read's), so one network serves both; the summary stays the fit's,
        with its ``test_acc``."""
        if self._test_after_fit is None:
            return
        summary = next(c for c in self.trainer.callbacks if isinstance(c, RunSummary))
        fitted = dict(summary.summary)
        ckpt = checkpoint_to_test(fitted, self._test_after_fit)
        self.trainer.test(self.model, datamodule=self.datamodule, ckpt_path=ckpt)
        summary.summary = {**fitted, "test_acc": summary.summary.get("test_acc")}

    @property
    def summary(self) -> dict[str, Any]:
        """The run's summary (see :func:`run`)."""
        cb = next(c for c in self.trainer.callbacks if isinstance(c, RunSummary))
        return cb.summary


#: the seeds numpy (and so seed_everything) takes
SEED_RANGE = (0, 2**32 - 1)


def _check_seed(seed: Any) -> None:
    if seed is None or isinstance(seed, bool):
        return
    if isinstance(seed, int) and not SEED_RANGE[0] <= seed <= SEED_RANGE[1]:
        raise OptionError(
            f"seed_everything must be an integer from {SEED_RANGE[0]} to {SEED_RANGE[1]:,}, "
            f"got {seed} (--seed_everything)"
        )


#: bad input whose own message says what is wrong: train_cls.py prints it whole (the files it
#: names, the fix), without a traceback
_ONE_LINE_ERRORS = (
    PlacementError,
    CheckpointError,
    DatasetIntegrityError,
    DatasetLayoutError,
    DatasetNotFoundError,
    BadImageError,
    OptionError,
)


def check_max_epochs(epochs: int | None) -> None:
    """Refuse a fit's ``trainer.max_epochs`` that trains nothing (0, or below -1).

    Raises:
        OptionError: naming the option and its valid values.
    """
    if epochs is not None and (epochs == 0 or epochs < -1):
        raise OptionError(
            f"--trainer.max_epochs must be >= 1 (or -1 for no limit), got {epochs}: a fit of "
            f"{epochs} epochs trains nothing"
        )


def _check_same_network(given: Namespace, recorded: Mapping[str, Any], path: str) -> None:
    """Refuse to score a checkpoint whose network is not the one the options give (a CBAM
    config with an SE run's checkpoint): LightningCLI would score the checkpoint's network
    without a word. Options left at their defaults take the checkpoint's.

    Raises:
        OptionError: naming each differing option with both values.
    """
    diffs = []
    attention = given.get("attention")
    if attention is not None:
        mine = placement_normal_form(plain(attention))
        theirs = placement_normal_form(recorded.get("attention"))
        if mine != theirs:
            diffs.append(f"model.attention {to_json(mine)} given, {to_json(theirs)} recorded")
    default = inspect.signature(ClassificationModule).parameters["model"].default
    model = given.get("model")
    if model not in (default, recorded.get("model")):
        diffs.append(f"model.model {model!r} given, {recorded.get('model')!r} recorded")
    if diffs:
        raise OptionError(
            f"--ckpt_path {path} holds another network than the options give ({'; '.join(diffs)})"
            ": give the options it trained with (its run's config.yaml), or leave them out to "
            "score the network it holds"
        )


def configuration_error(exc: BaseException) -> BaseException | None:
    """The visattn error behind a model or run that could not be built from its options (an
    unknown block or model, a block's bad option, bad data), found anywhere in ``exc``'s cause
    chain (jsonargparse wraps it in "Does not validate against any of the Union subtypes");
    ``None`` where there is none."""
    seen: BaseException | None = exc
    while seen is not None:
        if isinstance(seen, (UnknownBlockError, UnknownModelError, *_ONE_LINE_ERRORS)):
            return seen
        if isinstance(seen, ValueError | TypeError) and str(seen).startswith("block '"):
            return seen
        seen = seen.__cause__
    return None


def cli_main(args: list[str] | None = None) -> VisattnCLI:
    """Entry point of ``train_cls.py`` (``args=None`` reads ``sys.argv``). A model that cannot be
    built from its options (``--model.attention.name sse``), or bad data, ends in its message
    (the reason, the close matches, the files at fault and the fix), with exit status 2 as
    argument errors, not in jsonargparse's trace."""
    prog = Path(sys.argv[0]).name
    args = imports_or_exit(sys.argv[1:] if args is None else list(args), prog)
    try:
        return VisattnCLI(args=args)
    except (ValueError, TypeError, KeyError, RuntimeError, OSError) as e:
        cause = configuration_error(e)
        if cause is None:
            raise
        print(f"{prog}: error: {cause}", file=sys.stderr)
        raise SystemExit(2) from None


def resolved_namespace(args: Any) -> Namespace | None:
    """The namespace of a run resolved already, else None: a
    :class:`~visattn.training.config.RunConfig` is the argument tuple with the namespace its
    parse gave (read by its attribute here: ``config`` sits above this module, since it parses
    with this command line's parser)."""
    namespace = getattr(args, "namespace", None)
    return namespace if isinstance(args, tuple) and isinstance(namespace, Namespace) else None


def run(
    args: Sequence[str],
    *,
    test: str | None = None,
    then: Callable[[ClassificationModule, VisattnDataModule, dict[str, Any]], None] | None = None,
) -> dict[str, Any]:
    """Run one subcommand in-process, exactly as ``python train_cls.py <args>`` would; a
    :class:`~visattn.training.config.RunConfig` is taken as resolved, without parsing it
    again.

    Example: ``run(["fit", "--config", "configs/quickstart.yaml", "--trainer.max_epochs=2",
    "--trainer.default_root_dir=DIR", '--model.attention={"name": "se"}'])``.

    Args:
        test: for ``fit``, test the network when the fit ends on its ``"best"`` or ``"last"``
            checkpoint (:data:`TESTED_CHECKPOINTS`), in the same process and trainer: the
            network is built once for both (``test_acc`` in the summary).
        then: called with the run's module, data module and summary once the subcommand (and
            its test) ended, to measure the trained network without building it again.

    Returns:
        ``log_dir``, ``metrics_csv`` (None when no epoch ran, e.g. ``test``), ``best_val_acc``,
        ``best_epoch``, ``last_val_acc``, ``test_acc`` (``test``, or ``fit`` with ``test``),
        ``params``, ``macs`` (per image at the data's image size), ``wall_s`` (a resumed
        ``fit``'s counts the earlier pieces, ``earlier_s``, by processor in
        ``earlier_s_by_device``; ``device``: this piece's processor; a test after the fit is not
        in it),
        ``best_ckpt``, ``last_ckpt``, ``epochs`` (completed, counting those before a resume).

    Raises:
        Errors propagate: argument errors as ``jsonargparse.ArgumentError`` (no ``SystemExit``),
        training errors as raised (e.g. ``NonFiniteLossError``).
    """
    if not args or args[0] not in ("fit", "test"):
        raise ValueError(f"run() needs the subcommand 'fit' or 'test' first; got {args!r}")
    if test is not None and (args[0] != "fit" or test not in TESTED_CHECKPOINTS):
        raise ValueError(
            f"run(test=...) tests a fit on one of {TESTED_CHECKPOINTS}; got {test!r} for "
            f"{args[0]!r}"
        )
    given = args if resolved_namespace(args) is not None else list(args)
    cli = VisattnCLI(args=given, parser_kwargs={"exit_on_error": False}, test_after_fit=test)
    summary = dict(cli.summary)
    if not summary:
        raise RuntimeError(f"subcommand {args[0]!r} produced no summary")
    if then is not None:
        then(cli.model, cli.datamodule, summary)
    return summary
