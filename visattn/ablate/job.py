"""One run of a sweep: what it needs (:class:`RunTask`), the settings that decide its result, its
completion marker, the check whether it is already done, and train-and-mark (the body of every
executor: in the driver, a ``--jobs`` worker or a Ray task).

Layout of one run under the sweep's output folder ``DIR``::

    DIR/runs/<variant>/seed<k>/              the run's trainer.default_root_dir
    DIR/runs/<variant>/seed<k>/result.json   completion marker: its row, arguments and settings
    DIR/runs/<variant>/.seed<k>.lock         held while a process trains it (visattn.locks)
    DIR/runs/<variant>/.seed<k>.attempts     how often a worker started it

The marker is written atomically once a run has finished (``ok`` or ``failed``). It records
what the run cost (``cost``: CPU threads, and the seconds of its pieces by processor), the
run's arguments, its settings (:func:`visattn.training.config.settings`: the resolved options
that differ from the defaults, ``_base_`` pieces of base configs included, independent of where
files live) and the checkpoint's size and SHA-256. A run is done when its marker says ``ok``,
its settings are unchanged and its ``metrics.csv`` and intact checkpoint still exist
(:func:`completed`); any other run is trained again from scratch in a clean folder. The driver
resolves each run once; a worker receives the run's spec and resolved namespace, as JSON, in its
:class:`RunTask` and parses nothing.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import shutil
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from jsonargparse import Namespace

from .._safe_path import IMPORTED
from ..files import atomic_write_text, file_digest, read_metrics_csv
from ..locks import RunLock
from ..profile import cpu_seconds, device_description, measure_latency
from ..training import cli
from ..training import config as run_config
from ..training.callbacks import RunSummary
from ..training.load import load_run, load_weights
from ..training.resume import checkpoint_progress, find_last_checkpoint
from ..visualize.localization import score_gradcam, score_model
from .resolve import error_summary
from .sweep import Run, Sweep, load_sweep

__all__ = [
    "CHANGED",
    "MARKER",
    "RunTask",
    "TrainFn",
    "completed",
    "default_train_fn",
    "evaluate_run",
    "fmt_time",
    "read_marker",
    "train_and_mark",
]

MARKER = "result.json"
#: how :func:`completed` begins the reason of a finished run whose settings changed
CHANGED = "its settings changed: "
#: written when a run starts: its settings, so a run cut off later can resume if they still hold
STARTED = "started.json"
#: how a run trains: ``visattn.training.cli.run``'s signature (``args``, then ``test`` and
#: ``then`` by keyword)
TrainFn = Callable[..., dict[str, Any]]


@dataclass(frozen=True)
class RunTask:
    """Everything a process needs to train run ``i`` of ``n`` of the sweep file ``sweep`` into
    the output folder ``out``; plain data, so it travels as JSON to a worker or a Ray task.

    ``threads``: CPU threads for the run (``None``: leave torch's setting).
    """

    sweep: str
    out: str
    i: int
    n: int
    variant: str
    seed: int
    args: tuple[str, ...]
    root: str
    threads: int | None = None
    #: the run's namespace as the driver resolved it (JSON): the worker parses nothing
    resolved: str = ""
    #: what the run computes, :class:`~visattn.training.config.RunSpec` as JSON: the settings
    #: the worker's marker records and compares
    spec: str = ""
    #: the driver's :class:`Sweep` (JSON): the worker does not read the sweep file
    sweep_state: str = ""

    @classmethod
    def of(cls, run: Run, sweep: Sweep, out: Path, i: int, n: int, threads: int | None) -> RunTask:
        namespace = _namespace_json(run.resolved.namespace)
        return cls(
            str(sweep.path),
            str(out),
            i,
            n,
            run.variant,
            run.seed,
            tuple(run.args),
            str(run.root),
            threads,
            namespace,
            run_config.RunSpec.of(run.settings).to_json(),
            sweep.to_json(),
        )

    @classmethod
    def from_json(cls, text: str) -> RunTask:
        data = json.loads(text)
        return cls(**{**data, "args": tuple(data["args"])})

    def to_json(self) -> str:
        return json.dumps(dataclasses.asdict(self))

    @property
    def run(self) -> Run:
        """The run, resolved as the driver resolved it (when the task carries it)."""
        args: tuple[str, ...] = tuple(self.args)
        if self.resolved:
            args = run_config.RunConfig(args, _namespace_from_json(self.resolved))
        run = Run(self.variant, int(self.seed), args, Path(self.root))
        if self.spec:  # Run.settings, as the driver had them
            run.__dict__["settings"] = dict(run_config.RunSpec.from_json(self.spec).settings)
        return run

    @property
    def key(self) -> str:
        return self.run.key

    def load_sweep(self) -> Sweep:
        """The driver's sweep (without reading its file again, when the task carries it)."""
        return Sweep.from_json(self.sweep_state) if self.sweep_state else load_sweep(self.sweep)


#: the key that marks a namespace (not a dict-valued option) in a namespace's JSON
_NAMESPACE = "__namespace__"


def _tagged(value: Any) -> Any:
    if isinstance(value, Namespace):
        return {_NAMESPACE: {k: _tagged(v) for k, v in vars(value).items()}}
    if isinstance(value, dict):
        return {k: _tagged(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_tagged(v) for v in value]
    return value


def _untagged(data: dict[str, Any]) -> Any:
    if set(data) != {_NAMESPACE}:
        return data
    namespace = Namespace()
    for key, value in data[_NAMESPACE].items():
        setattr(namespace, key, value)
    return namespace


def _namespace_json(namespace: Namespace) -> str:
    """A resolved namespace as JSON, its nested namespaces marked apart from dict-valued options
    (a placement's ``args``), the ``--config`` files' paths (which only say where the options
    came from) left out."""
    plain = namespace.clone()
    plain[plain.subcommand].pop("config", None)
    return json.dumps(_tagged(plain))


def _namespace_from_json(text: str) -> Namespace:
    return json.loads(text, object_hook=_untagged)


def default_train_fn() -> TrainFn:
    """``visattn.training.cli.run``, the code path of train_cls.py."""
    return cli.run


def fmt_time(seconds: float) -> str:
    """``1h02m03s``, ``2m03s``, ``3s``; ``?`` for ``nan``."""
    if math.isnan(seconds):
        return "?"
    seconds = round(seconds)
    h, rem = divmod(seconds, 3600)
    m, s = divmod(rem, 60)
    return f"{h}h{m:02d}m{s:02d}s" if h else (f"{m}m{s:02d}s" if m else f"{s}s")


def estimate_eta(run_s: float, running_for: Sequence[float], waiting: int, slots: int) -> float:
    """Seconds until the last run ends if every run takes ``run_s``: the running ones finish
    what they have left (``running_for``: how long each has run), then each waiting run starts
    on the first of ``slots`` free (as many runs at once as the sweep runs); ``nan`` without a
    duration to go by."""
    if math.isnan(run_s):
        return math.nan
    free = sorted(max(0.0, run_s - age) for age in running_for)
    free += [0.0] * max(0, slots - len(free))
    for _ in range(waiting):
        free[0] += run_s
        free.sort()
    return max(free, default=0.0)


# --------------------------------------------------------------------------- the marker


def read_marker(root: Path) -> dict[str, Any] | None:
    """The completion marker of the run in ``root`` (``row``, ``args``, ``settings``), or
    ``None`` when it is missing or unreadable."""
    try:
        record = json.loads((Path(root) / MARKER).read_text())
        if not isinstance(record["row"], dict) or not isinstance(record["args"], list):
            return None
        return record
    except (OSError, ValueError, KeyError, TypeError):
        return None


def _finished(records: Iterable[dict[str, Any] | None]) -> Iterator[dict[str, Any]]:
    """The markers of the runs that finished (``ok``), from ``records`` as :func:`read_marker`
    gives them (``None`` for a run without one)."""
    return (r for r in records if r is not None and r["row"].get("status") == "ok")


def spent(records: Iterable[dict[str, Any] | None]) -> dict[tuple[str, int | None], float]:
    """Seconds the finished (``ok``) runs trained, by ``(processor, threads)``, from their
    markers (``records``, as :func:`read_marker` gives them; ``None`` for a run without one) and
    their ``cost`` (:func:`run_cost`). A marker written before visattn recorded the cost counts
    its ``wall_s`` under the processor that timed the run (``profile_cpu``) with threads ``None``
    (not recorded)."""
    total: dict[tuple[str, int | None], float] = {}
    for record in _finished(records):
        cost = record.get("cost")
        if isinstance(cost, dict) and isinstance(cost.get("wall_s_by_device"), dict):
            threads = cost.get("threads")
            pieces = [((str(d), threads), float(s)) for d, s in cost["wall_s_by_device"].items()]
        else:
            row = record["row"]
            processor = str(row.get("profile_cpu") or RunSummary.UNRECORDED_DEVICE)
            pieces = [((processor, None), float(row.get("wall_s") or 0.0))]
        for key, seconds in pieces:
            total[key] = total.get(key, 0.0) + seconds
    return total


def spent_cpu(records: Iterable[dict[str, Any] | None]) -> tuple[dict[str, float], int, int]:
    """CPU seconds the finished (``ok``) runs spent, by processor, from the markers that record
    them (``cost.cpu_s_by_device``, :func:`run_cost`); with how many finished runs recorded them
    and how many finished runs there are."""
    total: dict[str, float] = {}
    recorded = finished = 0
    for record in _finished(records):
        finished += 1
        cpu = (record.get("cost") or {}).get("cpu_s_by_device")
        if isinstance(cpu, dict):
            recorded += 1
            for device, seconds in cpu.items():
                total[str(device)] = total.get(str(device), 0.0) + float(seconds)
    return total, recorded, finished


def _damaged_checkpoint(row: dict[str, Any], out: Path) -> str:
    if not row.get("ckpt_sha256"):
        return ""
    ckpt = out / row["ckpt"]
    if ckpt.stat().st_size != row.get("ckpt_size"):
        return (
            f"its checkpoint {row['ckpt']} is damaged ({ckpt.stat().st_size} bytes, "
            f"{row.get('ckpt_size')} when it finished)"
        )
    if file_digest(ckpt)["sha256"] != row["ckpt_sha256"]:
        return f"its checkpoint {row['ckpt']} is damaged (SHA-256 differs)"
    return ""


def resume_point(run: Run) -> int | None:
    """The last finished epoch (1-based) of a run that was cut off, if it can go on from its
    last checkpoint: it recorded its settings when it started (:data:`STARTED`), they are the
    run's settings now, and a ``last.ckpt`` is there. ``None``: it trains again from scratch."""
    if (run.root / MARKER).exists():  # it finished (ok or failed): never resumed
        return None
    try:
        started = json.loads((run.root / STARTED).read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(started, dict) or run_config.changed_settings(started, run.settings):
        return None
    try:
        last = find_last_checkpoint(run.root)
        epoch = checkpoint_progress(last[1])[0] if last is not None else -1
    except (OSError, ValueError, RuntimeError):  # a damaged last checkpoint: start afresh
        return None
    return epoch + 1 if epoch >= 0 else None


def completed(run: Run, out: Path) -> tuple[dict[str, Any] | None, str]:
    """The run's recorded ok row if it can be skipped, else ``None`` and why it must run.

    A run is skipped when its marker says ``ok``, its settings
    (:func:`visattn.training.config.settings`; a marker of an older visattn is resolved for the
    comparison, :func:`~visattn.training.config.changed_settings`) are unchanged, its
    ``metrics.csv`` exists and its checkpoint either has the size and SHA-256 recorded when it
    finished or is not there at all: a sweep's results move between machines
    as their markers, ``metrics.csv`` files and ``results.csv`` (a git commit, a copy without
    the ``*.ckpt`` files), and a run that finished stays finished without its checkpoint. A
    checkpoint that is there but damaged is refused and the run trains again.
    """
    if not (run.root / MARKER).is_file():
        if not run.root.exists():
            return None, "new"
        resumable = resume_point(run)
        if resumable is not None:
            return None, f"cut off after epoch {resumable}: resumes from its last checkpoint"
        return None, "cut off before it finished"
    record = read_marker(run.root)
    if record is None:  # results.csv is no witness: it is a table anyone may edit
        return None, "its completion marker is unreadable: it trains again"
    row = record["row"]
    changed = run_config.changed_settings(record, run.settings)
    if changed:
        return None, f"{CHANGED}{changed}"
    if row.get("status") != "ok":
        return None, "it failed before"
    if not row.get("metrics_csv") or not (out / row["metrics_csv"]).is_file():
        intact = row.get("ckpt") and (out / row["ckpt"]).is_file()
        if not intact or _damaged_checkpoint(row, out):
            return None, "its metrics.csv is missing"
        # the marker says what it measured and the checkpoint is the one it finished with:
        # only the learning curve is lost, not the run
        return row, "done (its metrics.csv is missing: its curve is left out of the plots)"
    if not row.get("ckpt"):
        return None, "it recorded no checkpoint"
    if not (out / row["ckpt"]).is_file():
        # Results are committed without checkpoints (they are large and never tracked): the
        # run finished, and its row and metrics.csv say what it measured.
        return row, "done (its checkpoint was not kept)"
    damage = _damaged_checkpoint(row, out)
    return (None, damage) if damage else (row, "done")


# --------------------------------------------------------------------------- training


@torch.no_grad()
def evaluate_run(
    summary: dict[str, Any], sweep: Sweep, built: tuple[Any, Any] | None = None
) -> dict[str, Any]:
    """Columns measured on the trained network of one run (``summary`` from ``cli.run``).

    Loads the best (else the last) checkpoint into ``built``, the run's own
    ``(ClassificationModule, VisattnDataModule)`` (the ones it trained: nothing is built
    again), or without them with :func:`~visattn.training.load.load_run` (rebuilt from the
    hyper-parameters saved in the checkpoint), then measures
    latency at batch 1 and at ``sweep.profile["batch"]`` (``visattn.profile.measure_latency``,
    eval mode, the validation images' size) and, when the validation set has ``boxes``, the
    localization scores of the attention maps (``visattn.visualize.localization.score_model``)
    and of Grad-CAM at the last stage (``visattn.visualize.localization.score_gradcam``, every
    network).

    Raises:
        RuntimeError: the run saved no checkpoint.
    """
    ckpt = summary.get("best_ckpt") or summary.get("last_ckpt")
    if not ckpt or not Path(ckpt).is_file():
        raise RuntimeError(
            "the run saved no checkpoint; the sweep needs one to measure the trained network "
            "(keep trainer.enable_checkpointing on)"
        )
    loaded = load_run(ckpt) if built is None else load_weights(*built, ckpt)
    net, hp, dm = loaded.net, loaded.hparams, loaded.datamodule
    dm.setup("validate")
    val = dm.val_dataset
    shape = tuple(torch.as_tensor(val[0][0]).shape)  # (C, H, W)

    prof = sweep.profile
    device = torch.device(prof["device"])
    net.to(device)
    t1 = measure_latency(net, (1, *shape), warmup=prof["warmup"], repeats=prof["repeats"])
    batch = int(prof["batch"])
    tb = measure_latency(net, (batch, *shape), warmup=prof["warmup"], repeats=prof["repeats"])
    cols: dict[str, Any] = {
        "model": hp.get("model", ""),
        "attention": json.dumps(hp.get("attention")),
        "latency_ms": t1,
        "batch_latency_ms": tb,
        "throughput": 1000.0 * batch / tb,
        "throughput_batch": batch,
        "profile_device": str(device),
        "profile_cpu": device_description(device),
        "profile_load": _load_average(),
        "profile_threads": torch.get_num_threads(),
        "num_classes": int(hp.get("num_classes") or 0) or None,
    }
    boxes = getattr(val, "boxes", None)
    if sweep.localization is not None and boxes is not None:
        cols.update(_localization(net, val, torch.as_tensor(boxes), sweep.localization))
    net.cpu()
    return cols


def _load_average() -> float | None:
    """The machine's 1-minute load average while the latency was measured (``None`` where the
    system has none): above the run's threads, other work shared the cores with the
    measurement."""
    try:
        return round(os.getloadavg()[0], 2)
    except (AttributeError, OSError):
        return None


def _localization(net: Any, val: Any, boxes: torch.Tensor, options: dict) -> dict[str, Any]:
    loc = {k: options[k] for k in ("max_images", "tolerance")}
    scores = score_model(net, val, boxes, **loc)
    cols: dict[str, Any] = {"loc/blocks": len(scores)}
    if scores:
        cols["loc/pointing"] = sum(s["pointing"] for s in scores.values()) / len(scores)
        energies = [s["energy"] for s in scores.values() if not math.isnan(s["energy"])]
        cols["loc/energy"] = sum(energies) / len(energies) if energies else math.nan
    cam = score_gradcam(net, val, boxes, **loc)
    cols["gradcam/pointing"] = cam["pointing"]
    cols["gradcam/energy"] = cam["energy"]
    return cols


def _rel(path: str | Path | None, out: Path) -> str:
    if not path:
        return ""
    p = Path(path).resolve()
    try:
        return str(p.relative_to(out))
    except ValueError:
        return str(p)


def _last_losses(metrics_csv: str | None) -> dict[str, float | None]:
    rows = read_metrics_csv(metrics_csv) if metrics_csv and Path(metrics_csv).is_file() else []
    last = rows[-1] if rows else {}
    return {"train/loss": last.get("train/loss"), "val/loss": last.get("val/loss")}


def _train_one(
    run: Run, sweep: Sweep, out: Path, train_fn: TrainFn, resume: bool = False
) -> tuple[dict[str, Any], dict[str, Any]]:
    """Train (``resume``: go on from the run's last checkpoint), test (if asked) and evaluate
    one run. An ``Exception`` makes a ``failed`` row; ``KeyboardInterrupt`` and ``SystemExit``
    (Ctrl+C, and SIGTERM, which the sweep turns into Ctrl+C) stop the sweep, leaving the run
    without a marker so that the next pass retries it. Returns the row and what the run cost
    (:func:`run_cost`)."""
    row: dict[str, Any] = {"run": run.key, "variant": run.variant, "seed": run.seed}
    t0, c0 = time.perf_counter(), cpu_seconds()
    measured: dict[str, Any] = {}

    def evaluate(module: Any, datamodule: Any, summary: dict[str, Any]) -> None:
        cost = run_cost(summary, time.perf_counter() - t0, cpu_seconds() - c0)
        # every piece's time: this one's and the earlier ones' the checkpoint carried
        measured["wall"] = sum(cost["wall_s_by_device"].values())
        measured["cost"] = cost
        measured["cols"] = evaluate_run(summary, sweep, (module, datamodule))

    try:
        args = run.resolved
        given = args.but(options={"ckpt_path": "last"}) if resume else args
        summary = train_fn(given, test=sweep.test or None, then=evaluate)
        if "cols" not in measured:
            raise RuntimeError("the train function returned without calling then(...)")
        wall, cols = measured["wall"], measured["cols"]
    except Exception as exc:
        piece = time.perf_counter() - t0
        row.update(status="failed", error=error_summary(exc), wall_s=piece)
        return row, run_cost({}, piece, cpu_seconds() - c0)
    row.update(
        status="ok",
        error="",
        params=summary.get("params"),
        macs=summary.get("macs"),
        wall_s=wall,
        epochs=summary.get("epochs"),
        **{
            "val/acc": summary.get("best_val_acc"),
            "val/acc_last": summary.get("last_val_acc"),
            "test/acc": summary.get("test_acc"),
        },
        **_last_losses(summary.get("metrics_csv")),
        log_dir=_rel(summary.get("log_dir"), out),
        metrics_csv=_rel(summary.get("metrics_csv"), out),
        ckpt=_rel(summary.get("best_ckpt") or summary.get("last_ckpt"), out),
        **cols,
    )
    return row, measured["cost"]


def run_cost(
    summary: dict[str, Any], piece_s: float, piece_cpu_s: float | None = None
) -> dict[str, Any]:
    """What a run cost, for its marker's ``cost``: ``threads`` (the CPU threads this process
    trains with) and ``wall_s_by_device``, the seconds of its pieces by the processor that ran
    them (:func:`visattn.profile.device_description`). The earlier pieces' come from the
    summary (``earlier_s_by_device``, which the checkpoint carried; a bare ``earlier_s`` counts
    under ``RunSummary.UNRECORDED_DEVICE``), this piece's ``piece_s`` under the summary's
    ``device`` (this process's CPU where the train function names none).

    ``cpu_s_by_device``, the same for CPU seconds (:func:`visattn.profile.cpu_seconds`: time
    the run was stopped or waiting is not in it), only where every piece's is known: this
    piece's ``piece_cpu_s`` and, for a resumed run, the earlier pieces' that the checkpoint
    carried (``earlier_cpu_s_by_device``)."""
    by_device = {str(k): float(v) for k, v in (summary.get("earlier_s_by_device") or {}).items()}
    if not by_device and summary.get("earlier_s"):
        by_device[RunSummary.UNRECORDED_DEVICE] = float(summary["earlier_s"])
    here = summary.get("device") or device_description("cpu")
    cost: dict[str, Any] = {"threads": torch.get_num_threads(), "wall_s_by_device": by_device}
    earlier_cpu = summary.get("earlier_cpu_s_by_device", {} if not by_device else None)
    if piece_cpu_s is not None and isinstance(earlier_cpu, dict):
        cpu = {str(k): float(v) for k, v in earlier_cpu.items()}
        cpu[here] = cpu.get(here, 0.0) + piece_cpu_s
        cost["cpu_s_by_device"] = cpu
    by_device[here] = by_device.get(here, 0.0) + piece_s
    return cost


def _settings_record(run: Run) -> dict[str, Any]:
    return {
        "args": list(run.args),
        "settings_format": run_config.SETTINGS_FORMAT,
        "settings": run.settings,
        "execution": run.execution,
        # the user's own modules this process imported (their blocks): what it needs again
        **({"imports": list(IMPORTED)} if IMPORTED else {}),
    }


#: what a sweep holds the same for all its runs (:func:`run_mode`), each with what a record
#: that does not hold it means: the arithmetic (settings leave a default out) and whether the
#: network is compiled
MODE_KEYS = {"trainer.precision": "(default)", "model.compile": "false"}


def run_mode(record: dict[str, Any]) -> dict[str, str]:
    """``{key: JSON}`` of :data:`MODE_KEYS` as a marker (or a run's start record) holds them;
    a key it does not hold was at its default (markers written before ``execution`` was
    recorded ran uncompiled: nothing compiled then)."""
    given = {**(record.get("settings") or {}), **(record.get("execution") or {})}
    return {k: given.get(k, default) for k, default in MODE_KEYS.items()}


def train_and_mark(
    task: RunTask,
    sweep: Sweep,
    train_fn: TrainFn,
    echo: Callable[[str], None],
    *,
    attempts: int = 1,
) -> dict[str, Any]:
    """Train ``task``'s run while holding its lock (:class:`~visattn.locks.RunLock`),
    write its marker and return its row. A run cut off earlier with the same settings and a
    last checkpoint goes on from there (:func:`resume_point`: exact, as ``--ckpt_path last``);
    any other run starts in a clean folder.

    Raises:
        RuntimeError: another live process holds the run's lock (it is training the run).
    """
    run, out = task.run, Path(task.out)
    with RunLock(run.root, run.key):
        resume = run.root.exists() and resume_point(run) is not None
        if not resume:
            if run.root.exists():
                shutil.rmtree(run.root)
            run.root.mkdir(parents=True)
            started = _settings_record(run)
            atomic_write_text(run.root / STARTED, json.dumps(started, indent=1))
        row, cost = _train_one(run, sweep, out, train_fn, resume)
        if not run.root.is_dir():  # writing the marker would recreate the folder elsewhere
            raise RuntimeError(
                f"run {run.key}: its folder {run.root} disappeared while it trained (the sweep "
                "folder was moved or deleted?); no marker written"
            )
        row["attempts"] = attempts
        if row["status"] == "ok" and row.get("ckpt") and (out / row["ckpt"]).is_file():
            digest = file_digest(out / row["ckpt"])
            row.update(ckpt_size=digest["size"], ckpt_sha256=digest["sha256"])
        record = {"row": row, "cost": cost, **_settings_record(run)}
        atomic_write_text(run.root / MARKER, json.dumps(record, indent=1, default=str))
    tag = f"[{sweep.name}] run {task.i}/{task.n} {run.key}"
    if row["status"] == "ok":
        value = row.get(sweep.metric)
        acc = "?" if value is None else f"{value:.4f}"
        echo(f"{tag}: ok, {sweep.metric} {acc}, {fmt_time(row['wall_s'])}")
    else:
        echo(f"{tag}: FAILED ({row['error']})")
    return row
