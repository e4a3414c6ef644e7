"""Run a sweep: every run through ``visattn.training.cli.run`` (the code path of train_cls.py),
then profile the trained network, score its attention maps, and record one results row.

Layout of the output folder ``DIR``::

    DIR/results.csv                      one row per finished run (see visattn.ablate.results)
    DIR/report.md, DIR/*.png             the report and its plots
    DIR/runs/<variant>/seed<k>/          the run's trainer.default_root_dir (logs, checkpoints)
    DIR/runs/<variant>/seed<k>/result.json   completion marker: the run's row and arguments
    DIR/.visattn_sweep.lock              held by the driver while the sweep runs

One run (its settings, marker, lock and train-and-mark) is :mod:`visattn.ablate.job`. Running
the sweep again skips a run whose marker says ``ok``, whose settings are unchanged and whose
``metrics.csv`` still exists, with its checkpoint intact or not there at all (results committed
or copied without ``*.ckpt`` files stay finished). A run cut off mid-training (Ctrl+C, SIGTERM,
a killed worker, a machine that went away) whose settings are unchanged goes on from its last
checkpoint (exactly, as ``--ckpt_path last``); any other run (failed, cut off before its
marker, artefacts deleted or damaged, or its settings edited, in which case the changed keys
are named) is trained again from scratch in a clean folder. A sweep folder that was copied or
moved resumes as it was. A run whose lock is held by a live process (a worker left by a driver
that was killed) stops the sweep before anything trains. SIGTERM is handled as Ctrl+C: the
workers are stopped, the outputs written and the lock released.
results.csv and report.md are rewritten atomically after every run, so an interrupted sweep
loses at most the run in progress; the plots are drawn (atomically too) when the sweep ends, or
by ``python -m visattn.ablate SWEEP --out DIR --report-only``.
"""

from __future__ import annotations

import contextlib
import csv
import json
import math
import re
import shlex
import signal
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from ..files import atomic_write_text
from ..locks import RunLock, SweepLock
from .executors import cpu_count, run_local, run_ray
from .job import (
    CHANGED,
    MARKER,
    RunTask,
    TrainFn,
    completed,
    default_train_fn,
    estimate_eta,
    evaluate_run,
    fmt_time,
    read_marker,
    run_mode,
    spent,
    spent_cpu,
    train_and_mark,
)
from .plots import write_plots
from .report import near_chance, write_report
from .resolve import check_variants
from .results import read_results, write_results
from .sweep import Run, Sweep, load_sweep

__all__ = [
    "OWNER_FILE",
    "ExecutionPlan",
    "SweepFolderMoved",
    "SweepFolderTaken",
    "claim_folder",
    "cost_note",
    "evaluate_run",
    "folder_owner",
    "report_kwargs",
    "rows_for_report",
    "run_sweep",
    "write_outputs",
]

EXECUTORS = ("local", "ray")
#: the file in a sweep's output folder that names the sweep the folder belongs to
OWNER_FILE = "sweep.json"
_REPORT_TITLE = re.compile(r"^# Sweep `([^`]+)`")


class SweepFolderTaken(ValueError):
    """The output folder belongs to another sweep (a typo in ``--out``, or two sweeps that
    share a folder): running this one there would replace that sweep's finished runs."""


def folder_owner(out: str | Path) -> str | None:
    """The name of the sweep that made the folder ``out``: its :data:`OWNER_FILE`, or, for a
    folder written before that file, the title of its ``report.md``; ``None`` for a new folder."""
    out = Path(out)
    try:
        owner = json.loads((out / OWNER_FILE).read_text())["sweep"]
        if not isinstance(owner, str) or not owner:
            raise TypeError(f"'sweep' must be a sweep's name, got {owner!r}")
        return owner
    except FileNotFoundError:
        pass
    except (ValueError, KeyError, TypeError) as exc:
        raise SweepFolderTaken(
            f"{out / OWNER_FILE} is damaged ({exc}); it names the sweep this folder belongs "
            'to: write {"sweep": "NAME"} into it, or remove it to let the next sweep claim '
            "the folder"
        ) from None
    try:
        first = (out / "report.md").read_text().split("\n", 1)[0]
    except (FileNotFoundError, NotADirectoryError):
        return None
    found = _REPORT_TITLE.match(first)
    return found.group(1) if found else None


def claim_folder(out: str | Path, sweep: Sweep, *, take_over: bool = False, write: bool = True):
    """Check that ``out`` is a new folder or belongs to ``sweep`` (by name), then record that
    it does (``write``).

    Raises:
        SweepFolderTaken: ``out`` belongs to another sweep and ``take_over`` is not set.
    """
    out = Path(out)
    owner = folder_owner(out)
    if owner is not None and owner != sweep.name and not take_over:
        raise SweepFolderTaken(
            f"{out} holds the runs of sweep {owner!r}, not of {sweep.name!r}: running "
            f"{sweep.name!r} there would replace its finished runs whose settings differ and "
            f"rewrite its report. Check --out; to let {sweep.name!r} take the folder over, "
            "pass --take-over"
        )
    if write and (owner != sweep.name or not (out / OWNER_FILE).is_file()):
        out.mkdir(parents=True, exist_ok=True)
        atomic_write_text(out / OWNER_FILE, json.dumps({"sweep": sweep.name}) + "\n")


class SweepFolderMoved(RuntimeError):
    """The sweep's output folder was moved or deleted while the sweep ran."""


@dataclass(frozen=True)
class ExecutionPlan:
    """Where a sweep's runs execute and how many at once.

    Attributes:
        jobs: runs at once, each in its own process (:func:`visattn.ablate.executors.run_local`);
            1 trains in the driver, one run after the other.
        executor: ``"local"`` or ``"ray"`` (:func:`visattn.ablate.executors.run_ray`).
        devices: GPU indices for ``jobs > 1`` (default: all visible).
        runs_per_device: how many runs share one GPU.
        ray_address: a Ray cluster to join (default: start a local instance).
        threads: CPU threads per run (default: this machine's CPUs divided by ``jobs``; with
            ``jobs=1`` and no ``threads``, torch's own setting). A run's figures are
            bit-identical across ``jobs`` when its thread count is the same: float sums are
            ordered by thread, so with the default (a thread count that changes with ``jobs``)
            losses can differ in their last digits.

    Raises:
        ValueError: an unknown executor, or a count below 1.
    """

    jobs: int = 1
    executor: str = "local"
    devices: Sequence[int] | None = None
    runs_per_device: int = 1
    ray_address: str | None = None
    threads: int | None = None

    def __post_init__(self) -> None:
        if self.executor not in EXECUTORS:
            raise ValueError(f"executor must be one of {list(EXECUTORS)}, got {self.executor!r}")
        counts = {"jobs": self.jobs, "runs_per_device": self.runs_per_device}
        if self.threads is not None:
            counts["threads"] = self.threads
        bad = {k: v for k, v in counts.items() if isinstance(v, bool) or not isinstance(v, int)}
        bad.update({k: v for k, v in counts.items() if k not in bad and v < 1})
        if bad:
            raise ValueError(f"execution plan: {bad} must be integers >= 1")
        if self.devices is not None:
            object.__setattr__(self, "devices", tuple(int(d) for d in self.devices))

    @property
    def parallel(self) -> bool:
        """Whether runs execute in processes of their own (``--jobs`` > 1 or Ray)."""
        return self.executor == "ray" or self.jobs > 1

    @property
    def threads_per_run(self) -> int:
        return self.threads or max(1, cpu_count() // self.jobs)


def report_kwargs(sweep: Sweep, overrides: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The :func:`~visattn.ablate.report.render_report` keywords a sweep implies (name,
    baselines, description, equal-budget notes and pairs)."""
    budget = sweep.budget(overrides) if any(v.match for v in sweep.variants) else {}
    return {
        "name": sweep.name,
        "baseline": sweep.baselines,
        "description": sweep.description,
        "notes": [m.note(name) for name, m in budget.items()],
        "budget": {name: m.of for name, m in budget.items()},
        "metric": sweep.metric,
    }


def write_outputs(
    sweep: Sweep,
    out_dir: str | Path,
    rows: Sequence[dict[str, Any]] | None,
    *,
    overrides: Mapping[str, Any] | None = None,
    plots: bool = False,
    notes: Sequence[str] = (),
) -> None:
    """Write a sweep's outputs into ``out_dir``: ``results.csv`` from ``rows`` (``None``: keep
    the file as it is), ``report.md`` computed from results.csv (with ``notes`` added), and with
    ``plots`` the PNGs."""
    out = Path(out_dir)
    runs = sweep.runs(out, overrides)
    if rows is not None:
        keys = {r.key for r in runs}
        kept = [r for r in _readable_rows(out / "results.csv") if r.get("run") not in keys]
        write_results(out / "results.csv", [*rows, *kept], baseline=sweep.baselines)
    reported, left_out = _reported_rows(read_results(out / "results.csv"), runs)
    kwargs = report_kwargs(sweep, overrides)
    markers = [read_marker(r.root) for r in runs]
    compute = cost_note(spent(markers), spent_cpu(markers))
    waiting = pending_note(runs, reported, out)
    kwargs["notes"] = [*kwargs["notes"], *left_out, *notes, *waiting, *compute]
    write_report(reported, out / "report.md", planned=len(runs), **kwargs)
    if plots and reported:
        write_plots(reported, out, baseline=sweep.baselines, metric=sweep.metric)


def pending_note(runs: Sequence[Run], reported: Sequence[dict[str, Any]], out: Path) -> list[str]:
    """The report's line on the planned runs without a row: each with why it must run, as the
    console says it (:func:`~visattn.ablate.job.completed`: ``new`` for a run added to the sweep
    or not started, ``cut off after epoch N`` ...), grouped by that reason and by variant."""
    have = {r.get("run") for r in reported}
    groups: dict[str, dict[str, list[int]]] = {}
    for run in runs:
        if run.key not in have:
            why = completed(run, out)[1]
            groups.setdefault(why, {}).setdefault(run.variant, []).append(run.seed)
    if not groups:
        return []
    parts = [
        f"{why}: " + ", ".join(f"{v} ({_seeds(seeds)})" for v, seeds in variants.items())
        for why, variants in groups.items()
    ]
    count = sum(len(s) for variants in groups.values() for s in variants.values())
    return [f"**Not run yet** ({count} of {len(runs)} runs), by why: " + "; ".join(parts) + "."]


def _seeds(seeds: Sequence[int]) -> str:
    return f"seed{'s' if len(seeds) > 1 else ''} {', '.join(map(str, seeds))}"


def cost_note(
    total: Mapping[tuple[str, int | None], float],
    cpu: tuple[Mapping[str, float], int, int] | None = None,
) -> list[str]:
    """The report's line on what the finished runs spent (:func:`~visattn.ablate.job.spent`):
    run-hours by processor, with thread-hours where the markers recorded the threads (one sum per
    processor, whatever thread counts its runs used); and, from
    ``cpu`` (:func:`~visattn.ablate.job.spent_cpu`), the CPU-hours of the runs whose markers
    recorded them, which leave out the time a run was stopped or waiting."""
    if not total:
        return []
    ordered = sorted(total.items(), key=lambda kv: -kv[1])
    spans: dict[str, list[str]] = {}  # per processor: "2.0 h x 1 thread(s)", ...
    thread_s: dict[str, float] = {}
    for (processor, threads), seconds in ordered:
        if threads is not None:
            spans.setdefault(processor, []).append(f"{seconds / 3600:.1f} h x {threads} thread(s)")
            thread_s[processor] = thread_s.get(processor, 0.0) + seconds * threads
    parts = [
        f"{p}: {' + '.join(spans[p])} = {thread_s[p] / 3600:.1f} thread-hours"
        for p in sorted(thread_s, key=lambda p: -thread_s[p])
    ]
    older = [(p, seconds) for (p, threads), seconds in ordered if threads is None]
    if older:
        parts.append(
            "runs whose markers predate this record (threads not recorded; each under the "
            "processor that timed it, which may not have run all of it): "
            + ", ".join(f"{seconds / 3600:.1f} h on {p}" for p, seconds in older)
        )
    return [
        f"**Compute spent** by the finished runs: {sum(total.values()) / 3600:.1f} run-hours "
        "(the time after a cut-off piece's last checkpoint is not counted); "
        + "; ".join(parts)
        + "."
        + _cpu_sentence(cpu)
    ]


def _cpu_sentence(cpu: tuple[Mapping[str, float], int, int] | None) -> str:
    if cpu is None or not cpu[1]:
        return ""
    by_device, recorded, finished = cpu
    ordered = sorted(by_device.items(), key=lambda kv: -kv[1])
    return (
        f" CPU time, which leaves out the time a run was stopped or waiting: "
        f"{sum(by_device.values()) / 3600:.1f} CPU-hours ("
        + ", ".join(f"{seconds / 3600:.1f} on {p}" for p, seconds in ordered)
        + f"), recorded by {recorded} of the {finished} finished runs."
    )


def _readable_rows(path: Path) -> list[dict[str, Any]]:
    """results.csv's rows, or none when it is missing or unreadable."""
    try:
        return read_results(path)
    except (OSError, ValueError, TypeError, UnicodeDecodeError, csv.Error):
        return []


def _first_runs(rows: Sequence[dict[str, Any]], most: int = 4) -> str:
    """The runs of ``rows``, the first ``most`` of them, for a note."""
    names = ", ".join(str(r.get("run", "?")) for r in rows[:most])
    return names + (", ..." if len(rows) > most else "")


def _reported_rows(
    rows: Sequence[dict[str, Any]], runs: Sequence[Run]
) -> tuple[list[dict[str, Any]], list[str]]:
    """The rows a report may count: those of runs the sweep plans now that have a completion
    marker, in results.csv's order (hand edits of their values kept). The others stay in
    results.csv and are counted in the returned notes: rows of runs the sweep no longer has (a
    seed or variant removed from the file), and rows without a marker (nothing says that run
    finished)."""
    planned = {r.key: r for r in runs}
    gone = [r for r in rows if r.get("run") not in planned]
    unmarked = [
        r for r in rows if r.get("run") in planned and read_marker(planned[r["run"]].root) is None
    ]
    left_out = {id(r) for r in (*gone, *unmarked)}
    notes = []
    if gone:
        notes.append(
            f"{len(gone)} row(s) of results.csv belong to runs this sweep no longer has "
            f"({_first_runs(gone)}): kept in results.csv, left out of this report."
        )
    if unmarked:
        notes.append(
            f"{len(unmarked)} row(s) of results.csv have no completion marker "
            f"({_first_runs(unmarked)}): nothing says those runs finished, so they are left "
            "out of this report."
        )
    return [r for r in rows if id(r) not in left_out], notes


# --------------------------------------------------------------------------- --report-only

_REQUIRED = ("run", "variant", "seed", "status")


def _results_problem(rows: list[dict[str, Any]], markers: Mapping[str, Any]) -> str:
    """Why results.csv's ``rows`` cannot be reported as they are ('' when they can)."""
    columns = set().union(*(r.keys() for r in rows)) if rows else set()
    lacking = [c for c in _REQUIRED if rows and c not in columns]
    if lacking or None in columns:
        return f"is damaged (columns {lacking} missing or extra cells)"
    if any(r[c] in (None, "") for r in rows for c in _REQUIRED):
        return "is damaged (rows with empty run, variant, seed or status)"
    pairs = [(r["variant"], r["seed"]) for r in rows]
    twice = sorted({f"{v}/seed{s}" for v, s in pairs if pairs.count((v, s)) > 1})
    if twice:
        return f"is damaged (duplicate rows for {', '.join(twice)})"
    lost = set(markers) - {r["run"] for r in rows}
    if lost:
        return f"lacks {len(lost)} finished run(s) that have completion markers (truncated?)"
    return ""


def rows_for_report(
    sweep: Sweep,
    out_dir: str | Path,
    overrides: Mapping[str, Any] | None = None,
    echo: Callable[[str], None] = print,
) -> list[dict[str, Any]]:
    """The rows ``--report-only`` reports: ``DIR/results.csv`` when it is sound, else rebuilt
    (and rewritten) from the runs' completion markers.

    results.csv is sound when it parses, has the columns ``run``, ``variant``, ``seed`` and
    ``status``, holds each (variant, seed) once (a duplicated row would count as another seed)
    and holds every run that has a readable marker (a truncated file loses rows). The markers
    are what the runs wrote: a value of a sound file that differs from its run's marker (a
    hand edit) is named and replaced, as a normal pass replaces it, so both give the same
    report; the paired differences are computed again for the sweep's baselines as they are
    now (a changed baseline).

    Raises:
        ValueError: results.csv is missing or damaged and no marker exists to rebuild it from.
    """
    out = Path(out_dir).resolve()
    runs = sweep.runs(out, overrides)
    markers = {}
    for run in runs:
        record = read_marker(run.root)
        if record is not None:
            markers[run.key] = record["row"]
    path = out / "results.csv"
    try:
        rows = read_results(path)
        problem = _results_problem(rows, markers)
    except FileNotFoundError:
        problem = "is missing"
    except (ValueError, TypeError, UnicodeDecodeError, csv.Error) as e:
        problem = f"is unreadable ({type(e).__name__}: {e})"
    if not problem:
        return _trusting_markers(sweep, path, rows, markers, echo)
    if not markers:
        raise ValueError(
            f"{path} {problem}, and no completion markers ({out / 'runs'}/<variant>/seed<k>/"
            f"{MARKER}) exist to rebuild it from; run the sweep without --report-only to train "
            "the runs again"
        )
    rows = [markers[r.key] for r in runs if r.key in markers]
    echo(f"[{sweep.name}] {path} {problem}: rebuilt from {len(rows)} completion markers")
    write_results(path, rows, baseline=sweep.baselines)
    return read_results(path)


def _trusting_markers(
    sweep: Sweep,
    path: Path,
    rows: list[dict[str, Any]],
    markers: Mapping[str, dict[str, Any]],
    echo: Callable[[str], None],
) -> list[dict[str, Any]]:
    """``rows`` with each marked run's values taken from its marker (the differences named),
    written back with paired differences for the current baselines."""
    changed = []
    fixed = []
    for row in rows:
        marker = markers.get(row["run"])
        if marker is None:
            fixed.append(row)
            continue
        for key, value in marker.items():
            if key.endswith("_diff") or key not in row:
                continue
            if not _same_cell(row[key], value):
                changed.append(f"{row['run']} {key} {row[key]!r} (marker: {value!r})")
        fixed.append(dict(marker))
    if changed:
        echo(
            f"[{sweep.name}] {path} differs from the runs' completion markers in "
            f"{len(changed)} cell(s) ({'; '.join(changed[:3])}{'; ...' if len(changed) > 3 else ''}"
            "): the report uses the markers, what the runs wrote, and results.csv is rewritten"
        )
    write_results(path, fixed, baseline=sweep.baselines)
    return read_results(path)


def _same_cell(a: Any, b: Any) -> bool:
    if a in (None, "") and b in (None, ""):
        return True
    if isinstance(a, float) or isinstance(b, float):
        try:
            fa, fb = float(a), float(b)
        except (TypeError, ValueError):
            return False
        return fa == fb or (math.isnan(fa) and math.isnan(fb))
    return str(a) == str(b)


# --------------------------------------------------------------------------- running


@contextlib.contextmanager
def sigterm_as_interrupt() -> Iterator[None]:
    """Within the block, SIGTERM (what ``timeout``, SLURM and Kubernetes send) raises
    ``KeyboardInterrupt`` as Ctrl+C does, so the same clean-up runs. Main thread only."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def interrupt(signum: int, frame: Any) -> None:
        raise KeyboardInterrupt(f"signal {signal.Signals(signum).name}")

    previous = signal.signal(signal.SIGTERM, interrupt)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


@dataclass
class _Session:
    """One pass over a sweep: its runs, the rows known so far, where outputs go."""

    sweep: Sweep
    out: Path
    runs: list[Run]
    overrides: Mapping[str, Any] | None
    echo: Callable[[str], None]
    rows: dict[str, dict[str, Any]] = field(default_factory=dict)
    todo: list[tuple[int, Run, str]] = field(default_factory=list)
    reasons: dict[str, str] = field(default_factory=dict)  # each run's state, from plan()
    without_ckpt: int = 0  # finished runs whose checkpoints were not kept (results moved)
    origin: tuple[int, int] | None = None  # (device, inode) of the output folder at the start
    start: float = field(default_factory=time.perf_counter)

    @property
    def tag(self) -> str:
        return f"[{self.sweep.name}]"

    def ordered(self) -> list[dict[str, Any]]:
        return [self.rows[r.key] for r in self.runs if r.key in self.rows]

    def record(self, row: dict[str, Any]) -> None:
        self.check_in_place()
        self.rows[row["run"]] = row
        chance = near_chance(row, self.sweep.metric)
        if chance is not None:
            self.echo(
                f"{self.tag} WARNING {row['run']} ended near chance ({self.sweep.metric} "
                f"{row[self.sweep.metric]:.3f}, chance {chance:.3f}): it did not learn; see its "
                "log for the recipe's warnings (the report lists such runs)"
            )
        write_outputs(self.sweep, self.out, self.ordered(), overrides=self.overrides)

    def pin(self) -> None:
        """Remember which folder the output folder is (device and inode), for
        :meth:`check_in_place`."""
        st = self.out.stat()
        self.origin = (st.st_dev, st.st_ino)

    def check_in_place(self) -> None:
        """Stop when the output folder is no longer the one the sweep started in (moved,
        renamed or deleted): writing there would recreate it and report runs whose files are
        elsewhere.

        Raises:
            SweepFolderMoved: the folder was moved or deleted.
        """
        try:
            st = self.out.stat()
            here = (st.st_dev, st.st_ino)
        except FileNotFoundError:
            here = None
        if self.origin is not None and here != self.origin:
            raise SweepFolderMoved(
                f"sweep {self.sweep.name}: its output folder {self.out} was moved or deleted "
                "while the sweep ran; nothing more is written there. Run the sweep again on the "
                "folder's new place (--out NEW_PLACE): its finished runs are kept"
            )

    def plan(self) -> None:
        """Sort the runs into done (their rows kept) and to do (with the reason)."""
        for i, run in enumerate(self.runs, 1):
            row, why = completed(run, self.out)
            if why.startswith("cut off"):
                lock = RunLock(run.root, run.key)
                holder = lock.holder()
                if holder and lock.alive(holder):
                    why = f"being trained now by pid {holder.get('pid')} on {holder.get('host')}"
            self.reasons[run.key] = why
            if row is not None:
                self.rows[run.key] = row
                self.without_ckpt += why != "done"
                continue
            self.todo.append((i, run, why))
            record = read_marker(run.root)  # a failed run's old row stays until retried
            if record is not None:
                self.rows[run.key] = record["row"]

    def check_run_locks(self) -> None:
        """Refuse to start while a live process still trains one of the runs to do."""
        busy = []
        for _, run, _ in self.todo:
            lock = RunLock(run.root, run.key)
            holder = lock.holder()
            if holder and lock.alive(holder):
                busy.append(lock.busy_message(holder))
        if busy:
            raise RuntimeError(
                f"sweep {self.sweep.name}: {len(busy)} run(s) are being trained by other "
                "processes, nothing was started:\n  " + "\n  ".join(busy)
            )

    def tasks(self, threads: int | None) -> list[RunTask]:
        n = len(self.runs)
        return [RunTask.of(run, self.sweep, self.out, i, n, threads) for i, run, _ in self.todo]


def _train_here(session: _Session, plan: ExecutionPlan, train_fn: TrainFn) -> None:
    """Train the runs to do in this process, one after the other."""
    threads = plan.threads_per_run if plan.threads is not None else None
    if threads is not None:  # as a worker would: the same figures
        torch.set_num_threads(threads)
    todo = session.todo
    took: list[float] = []  # the finished runs' durations (_run_duration)
    for done, task in enumerate(session.tasks(threads)):
        elapsed = time.perf_counter() - session.start
        eta = estimate_eta(sum(took) / done if done else math.nan, [], len(todo) - done, 1)
        session.echo(
            f"{session.tag} run {task.i}/{task.n} {task.key} ({todo[done][2]}) | {done}/"
            f"{len(todo)} trained this session | elapsed {fmt_time(elapsed)} | ETA {fmt_time(eta)}"
        )
        t0 = time.perf_counter()
        row = train_and_mark(task, session.sweep, train_fn, session.echo)
        took.append(_run_duration(row, time.perf_counter() - t0))
        session.record(row)


def _run_duration(row: dict[str, Any], here_s: float) -> float:
    """What a finished run took, for the ETA: its row's ``wall_s``, which counts the pieces
    before a resume (a run that went on from its checkpoint took longer than its last piece),
    or how long it ran here where the row has none."""
    wall = row.get("wall_s")
    return float(wall) if row.get("status") == "ok" and wall else here_s


def _outcome(row: dict[str, Any], metric: str) -> str:
    """``ok, test/acc 0.9123`` (the sweep's metric, ``?`` where the run has none) or
    ``FAILED (why)``."""
    if row["status"] != "ok":
        return f"FAILED ({row.get('error')})"
    value = row.get(metric)
    return f"ok, {metric} {'?' if value is None else f'{value:.4f}'}"


def _train_elsewhere(session: _Session, plan: ExecutionPlan) -> None:
    """Train the runs to do with a process per run; the driver records each row as it arrives."""
    threads = plan.threads_per_run
    tasks = session.tasks(threads)
    why = {run.key: w for _, run, w in session.todo}
    finished = 0
    running: dict[str, float] = {}  # key: when it started
    took: list[float] = []  # the finished runs' durations (_run_duration)
    at_once = 1  # the most runs seen running together: the sweep's slots

    def eta(now: float) -> float:
        mean = sum(took) / len(took) if took else math.nan
        ages = [now - t for t in running.values()]
        return estimate_eta(mean, ages, len(tasks) - finished - len(running), at_once)

    def on_start(task: RunTask, where: Any) -> None:
        nonlocal at_once
        running[task.key] = time.perf_counter()
        at_once = max(at_once, len(running))
        place = "cpu" if where is None else (f"cuda:{where}" if isinstance(where, int) else where)
        session.echo(
            f"{session.tag} run {task.i}/{task.n} {task.key} ({why[task.key]}) started on "
            f"{place}, {threads} thread(s)"
        )

    def on_done(task: RunTask, row: dict[str, Any]) -> None:
        nonlocal finished
        finished += 1
        session.record(row)
        now = time.perf_counter()
        took.append(_run_duration(row, now - running.pop(task.key, session.start)))
        elapsed = now - session.start
        state = _outcome(row, session.sweep.metric)
        session.echo(
            f"{session.tag} run {task.i}/{task.n} {row['run']}: {state} | {finished}/"
            f"{len(tasks)} done | elapsed {fmt_time(elapsed)} | ETA {fmt_time(eta(now))}"
        )

    def on_retry(task: RunTask, reason: str) -> None:
        why[task.key] = reason  # said when it starts again
        session.echo(f"{session.tag} run {task.i}/{task.n} {task.key}: {reason}")

    callbacks = {"on_start": on_start, "on_done": on_done}
    if plan.executor == "ray":
        jobs = plan.jobs if plan.jobs > 1 else None
        run_ray(
            tasks,
            address=plan.ray_address,
            jobs=jobs,
            **callbacks,
            runs_per_device=plan.runs_per_device,
        )
    else:
        run_local(
            tasks,
            jobs=plan.jobs,
            devices=plan.devices,
            log_dir=session.out / "logs",
            runs_per_device=plan.runs_per_device,
            on_retry=on_retry,
            **callbacks,
        )


def _execute(session: _Session, plan: ExecutionPlan, train_fn: TrainFn) -> None:
    """Train the runs to do (the caller holds the sweep lock), with SIGTERM as Ctrl+C; the
    outputs (plots included) are written however it ends."""
    driver_threads = torch.get_num_threads()
    sweep, out, overrides = session.sweep, session.out, session.overrides
    with sigterm_as_interrupt():
        try:
            session.check_run_locks()
            if session.rows:
                write_outputs(sweep, out, session.ordered(), overrides=overrides)
            session.start = time.perf_counter()
            if plan.parallel:
                _train_elsewhere(session, plan)
            else:
                _train_here(session, plan, train_fn)
        finally:
            torch.set_num_threads(driver_threads)
            if session.rows and _still_in_place(session):
                write_outputs(sweep, out, session.ordered(), overrides=overrides, plots=True)


def _still_in_place(session: _Session) -> bool:
    try:
        session.check_in_place()
    except SweepFolderMoved:
        return False
    return True


def _dry_run(session: _Session) -> list[dict[str, Any]]:
    n = len(session.runs)
    session.plan()
    for i, run in enumerate(session.runs, 1):
        why = session.reasons[run.key]
        args = shlex.join(run.args)
        session.echo(f"{session.tag} run {i}/{n} {run.key} ({why}): python train_cls.py {args}")
    session.echo(_plan_line(session))
    changed = _changed_finished(session)
    if changed:
        session.echo(f"{session.tag} WARNING {_changed_message(session, changed)}")
    return []


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}{'' if n == 1 else 's'}"


def _plan_line(session: _Session) -> str:
    """``[name] N runs (V variants x S seeds): D done earlier, T to run; output in DIR``."""
    n, todo, sweep = len(session.runs), len(session.todo), session.sweep
    kept = f" ({session.without_ckpt} without their checkpoints)" if session.without_ckpt else ""
    return (
        f"{session.tag} {_count(n, 'run')} ({_count(len(sweep.variants), 'variant')} x "
        f"{_count(len(sweep.seeds), 'seed')}): "
        f"{n - todo} done earlier{kept}, {todo} to run; output in {session.out}"
    )


def changed_runs_note(sweep: Sweep, out: Path, overrides: Mapping[str, Any] | None) -> str:
    """A note naming the finished runs in ``out`` whose recorded settings differ from what the
    sweep gives them now ('' when none do): ``--report-only`` reports them as they ran."""
    session = _Session(sweep, out, sweep.runs(out, overrides), overrides, print)
    session.plan()
    changed = [f"{run.key} ({what})" for run, what in _changed_finished(session)]
    if not changed:
        return ""
    shown = "; ".join(changed[:4]) + ("; ..." if len(changed) > 4 else "")
    return (
        f"{len(changed)} finished run(s) ran with other settings than the sweep now gives "
        f"them: {shown}. They are reported as they ran; a normal pass refuses to train them "
        "again unless --retrain-changed is given."
    )


def _changed_finished(session: _Session) -> list[tuple[Run, str]]:
    """The runs to do that finished ``ok`` with other settings than they would have now."""
    changed = []
    for _, run, why in session.todo:
        record = read_marker(run.root)
        if record is not None and record["row"].get("status") == "ok" and why.startswith(CHANGED):
            changed.append((run, why[len(CHANGED) :]))
    return changed


def _changed_message(session: _Session, changed: list[tuple[Run, str]]) -> str:
    shown = "\n  ".join(f"{run.key}: {what}" for run, what in changed[:8])
    more = f"\n  ... and {len(changed) - 8} more" if len(changed) > 8 else ""
    return (
        f"{len(changed)} finished run(s) of sweep {session.sweep.name!r} have other settings "
        f"than this pass would train them with:\n  {shown}{more}\nTraining them again "
        "deletes their results. Undo the change (a --set, an edited sweep or base config), "
        "give the changed runs a sweep (or variant) of their own, or pass --retrain-changed "
        "to train them again"
    )


def check_changed(session: _Session, retrain: bool) -> None:
    """Refuse a pass that would train finished runs again because their settings changed,
    unless ``retrain`` (``--retrain-changed``) says to.

    Raises:
        ChangedRunsError: naming each such run and what changed.
    """
    changed = _changed_finished(session)
    if changed and not retrain:
        raise ChangedRunsError(_changed_message(session, changed))


class ChangedRunsError(ValueError):
    """Finished runs would be trained again (their results deleted) because settings changed."""


def _plan_and_check(session: _Session, retrain_changed: bool, validate: bool) -> None:
    """Sort the runs into done and to do, refuse to retrain changed finished runs unless told
    (:func:`check_changed`), and with ``validate`` build one run of every variant to do."""
    _check_test_checkpoint(session)
    session.pin()
    session.plan()
    check_changed(session, retrain_changed)
    check_one_mode(session)
    if validate:
        check_variants([run for _, run, _ in session.todo], f"sweep {session.sweep.path}")


def check_one_mode(session: _Session) -> None:
    """Refuse to train runs whose precision or compile setting (:data:`~.job.MODE_KEYS`)
    differs from the sweep's finished runs': one sweep, one arithmetic, never mixed.

    Raises:
        ValueError: naming the finished runs' setting and the one this pass would use.
    """
    todo = {run.key for _, run, _ in session.todo}
    finished = {}
    for run in session.runs:
        record = read_marker(run.root) if run.key not in todo else None
        if record is not None and record["row"].get("status") == "ok":
            finished.setdefault(json.dumps(run_mode(record), sort_keys=True), run.key)
    planned = {}
    for _, run, _ in session.todo:
        if _parse_error(run) is None:  # a run that does not parse is check_variants' to report
            mode = run_mode({"settings": run.settings, "execution": run.execution})
            planned.setdefault(json.dumps(mode, sort_keys=True), run.key)
    if planned and len({*finished, *planned}) > 1:
        said = "; ".join(f"{mode} (e.g. {key})" for mode, key in finished.items()) or "none"
        raise ValueError(
            f"sweep {session.sweep.name}: its runs must share one precision and compile "
            f"setting; finished runs have {said}, this pass would train with "
            f"{'; '.join(f'{mode} (e.g. {key})' for mode, key in planned.items())}. Run the new "
            "runs as the finished ones ran, or give them a sweep of their own"
        )


def _check_test_checkpoint(session: _Session) -> None:
    """Refuse, once and before anything trains, a sweep that tests ``last.ckpt`` with runs that
    write no checkpoint (``trainer.fast_dev_run``)."""
    if session.sweep.test != "last" or not session.runs:
        return
    first = session.runs[0]
    if _parse_error(first) is not None:  # check_variants reports it with the others
        return
    trainer = first.resolved.config.get("trainer")
    if trainer is not None and trainer.get("fast_dev_run"):
        raise ValueError(
            f"sweep {session.sweep.name}: test: last scores each run's last.ckpt, and "
            "trainer.fast_dev_run writes none; drop fast_dev_run (limit_train_batches and "
            "max_epochs make a short run), or set test: false"
        )


def _parse_error(run: Run) -> Exception | None:
    """Why ``run``'s arguments do not parse, or ``None``. The cheap checks that read settings
    before :func:`~.resolve.check_variants` skip such runs, so that every variant's errors are
    still reported together (or, without validation, the run fails as it trains)."""
    try:
        run.resolved  # noqa: B018 (parsed once, cached)
    except Exception as exc:  # every kind of bad input
        return exc
    return None


def _check_profile_device(sweep: Sweep) -> None:
    device = torch.device(sweep.profile["device"])
    if device.type == "cuda" and not torch.cuda.is_available():
        raise ValueError(
            f"sweep {sweep.path}: profile.device is {sweep.profile['device']!r} but CUDA is not "
            "available here; set profile: {device: cpu} (or run on a GPU machine)"
        )


def run_sweep(
    sweep_path: str | Path | Sweep,
    out_dir: str | Path,
    plan: ExecutionPlan | None = None,
    *,
    overrides: Mapping[str, Any] | None = None,
    dry_run: bool = False,
    train_fn: TrainFn | None = None,
    echo: Callable[[str], None] = print,
    validate: bool | None = None,
    take_over: bool = False,
    retrain_changed: bool = False,
) -> list[dict[str, Any]]:
    """Run (or resume) the sweep in ``sweep_path`` into ``out_dir``.

    Args:
        sweep_path: a sweep file (:mod:`visattn.ablate.sweep`) or a read one (a join's).
        out_dir: output folder (created).
        plan: where and how many runs at once (:class:`ExecutionPlan`; default: one after the
            other in this process).
        overrides: dotted overrides applied to every run after the sweep's own, e.g.
            ``{"data.root": "/data/cifar"}`` (part of each run's arguments, so resuming needs the
            same ones).
        dry_run: only print each run's state and ``train_cls.py`` arguments, after checking
            every variant as the real pass does (unless ``validate`` is ``False``).
        train_fn: the training call (tests), ``visattn.training.cli.run``'s signature.
        echo: where progress lines go.
        validate: before the first run, parse and build one run of every variant that has runs
            to do, and load its validation data (:func:`visattn.ablate.resolve.check_variants`),
            so that a misspelt key, a bad placement or an image size the data cannot give in the
            last variant fails before the first one trains. Default: when ``train_fn`` is the
            real one.
        take_over: let this sweep use a folder that another sweep made (see
            :func:`claim_folder`).
        retrain_changed: train again (deleting their results) the finished runs whose
            settings differ from this pass's; without it such a pass is refused
            (:func:`check_changed`) before anything is written.

    Raises:
        ValueError: a variant fails validation (every failing variant is named), or the
            profile device is CUDA on a machine without it.
        SweepFolderTaken: (a ``ValueError``) ``out_dir`` belongs to another sweep.
        ChangedRunsError: (a ``ValueError``) finished runs have other settings now and
            ``retrain_changed`` is not set.
        RuntimeError: another sweep holds the output folder, or a live process still trains
            one of the runs to do.
        KeyboardInterrupt: Ctrl+C or SIGTERM; the run in progress is left without a marker.

    Returns:
        The results rows (one dict per finished run, :data:`~visattn.ablate.results.RESULT_COLUMNS`
        keys), in sweep order, as written to ``results.csv``.
    """
    plan = plan or ExecutionPlan()
    sweep = sweep_path if isinstance(sweep_path, Sweep) else load_sweep(sweep_path)
    out = Path(out_dir).resolve()
    claim_folder(out, sweep, take_over=take_over, write=False)
    session = _Session(sweep, out, sweep.runs(out, overrides), overrides, echo)
    if dry_run:  # resolved and checked as the real pass would, then only printed
        if validate is not False:
            check_variants(session.runs, f"sweep {sweep.path}")
        return _dry_run(session)
    _check_profile_device(sweep)
    real_training = train_fn is None
    if plan.parallel and not real_training:
        raise ValueError("jobs > 1 and the Ray executor run train_cls.py's own training call")
    train_fn = train_fn or default_train_fn()
    out.mkdir(parents=True, exist_ok=True)
    with SweepLock(out):  # before anything is written: a folder in use stays as it is
        claim_folder(out, sweep, take_over=take_over, write=False)
        _plan_and_check(session, retrain_changed, real_training if validate is None else validate)
        claim_folder(out, sweep, take_over=take_over)
        echo(_plan_line(session))
        _execute(session, plan, train_fn)
    final = session.ordered()
    failed = sum(r["status"] != "ok" for r in final)
    echo(
        f"{session.tag} finished in {fmt_time(time.perf_counter() - session.start)}: "
        f"{len(final) - failed} ok, {failed} failed; report {out / 'report.md'}"
    )
    return final
