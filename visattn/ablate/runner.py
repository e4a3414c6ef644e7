"""Run a sweep: every run through ``visattn.training.cli.run`` (the code path of train_cls.py),
then profile the trained network, score its attention maps, and record one results row.

Layout of the output folder ``DIR``::

    DIR/results.csv                      one row per finished run (see visattn.ablate.results)
    DIR/report.md, DIR/*.png             the report and its plots
    DIR/runs/<variant>/seed<k>/          the run's trainer.default_root_dir (logs, checkpoints)
    DIR/runs/<variant>/seed<k>/result.json   completion marker: the run's row and arguments

The marker is written atomically once a run has finished (``ok`` or ``failed``); it records the
run's settings (:func:`run_settings`: overrides and base configs by content, not by path) and the
checkpoint's size and SHA-256. Running the sweep again skips a run whose marker says ``ok``,
whose settings are unchanged and whose ``metrics.csv`` and intact checkpoint still exist; any
other run (failed, cut off before its marker, artefacts deleted or damaged, or its settings
edited, in which case the changed keys are named) is trained again from scratch in a clean
folder. A sweep folder that was copied or moved resumes as it was.
results.csv and report.md are rewritten atomically after every run, so an interrupted sweep
loses at most the run in progress; the plots are drawn (atomically too) when the sweep ends, or
by ``python -m visattn.ablate SWEEP --out DIR --report-only``.
"""

from __future__ import annotations

import contextlib
import csv
import json
import math
import os
import shlex
import shutil
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import torch

from .._errors import first_line
from ..files import atomic_write_text, file_digest, read_metrics_csv
from ..localization import score_gradcam, score_model
from ..profile import measure_latency
from .executors import SweepLock, cpu_count, run_local, run_ray
from .plots import write_plots
from .report import write_report
from .resolve import check_variants
from .results import read_results, write_results
from .sweep import Run, Sweep, load_sweep

__all__ = [
    "MARKER",
    "evaluate_run",
    "report_kwargs",
    "rows_for_report",
    "run_settings",
    "run_sweep",
]

MARKER = "result.json"
TrainFn = Callable[[list[str]], dict[str, Any]]


def _fmt_time(seconds: float) -> str:
    if math.isnan(seconds):
        return "?"
    seconds = round(seconds)
    h, rem = divmod(seconds, 3600)
    m, s = divmod(rem, 60)
    return f"{h}h{m:02d}m{s:02d}s" if h else (f"{m}m{s:02d}s" if m else f"{s}s")


def _rel(path: str | os.PathLike | None, out: Path) -> str:
    if not path:
        return ""
    p = Path(path).resolve()
    try:
        return str(p.relative_to(out))
    except ValueError:
        return str(p)


def _default_train_fn() -> TrainFn:
    from ..training import cli  # imported here: training is optional for sweep parsing

    return cli.run


@torch.no_grad()
def evaluate_run(summary: dict[str, Any], sweep: Sweep) -> dict[str, Any]:
    """Columns measured on the trained network of one run (``summary`` from ``cli.run``).

    Loads the best (else the last) checkpoint with :func:`training.load.load_run` (network and
    data module rebuilt from the hyper-parameters saved in it), then measures latency at batch 1
    and at ``sweep.profile["batch"]`` (``visattn.profile.measure_latency``, eval mode, the
    validation images' size) and, when the validation set has ``boxes``, the localization
    scores of the attention maps (``visattn.localization.score_model``) and of Grad-CAM at the
    last stage (``visattn.localization.score_gradcam``, every network).

    Raises:
        RuntimeError: the run saved no checkpoint.
    """
    ckpt = summary.get("best_ckpt") or summary.get("last_ckpt")
    if not ckpt or not Path(ckpt).is_file():
        raise RuntimeError(
            "the run saved no checkpoint; the sweep needs one to measure the trained network "
            "(keep trainer.enable_checkpointing on)"
        )
    from ..training.load import load_run  # imported here: training is optional for sweep parsing

    loaded = load_run(ckpt)
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
    }
    boxes = getattr(val, "boxes", None)
    if sweep.localization is not None and boxes is not None:
        boxes = torch.as_tensor(boxes)
        loc = {k: sweep.localization[k] for k in ("max_images", "tolerance")}
        scores = score_model(net, val, boxes, **loc)
        cols["loc/blocks"] = len(scores)
        if scores:
            cols["loc/pointing"] = sum(s["pointing"] for s in scores.values()) / len(scores)
            energies = [s["energy"] for s in scores.values() if not math.isnan(s["energy"])]
            cols["loc/energy"] = sum(energies) / len(energies) if energies else math.nan
        cam = score_gradcam(net, val, boxes, **loc)
        cols["gradcam/pointing"] = cam["pointing"]
        cols["gradcam/energy"] = cam["energy"]
    net.cpu()
    return cols


def run_settings(args: Sequence[str]) -> dict[str, str]:
    """What decides a run's result, from its ``train_cls.py`` arguments, independent of where
    the sweep folder and the config files live: every ``--key=value`` except the log directory,
    and each ``--config`` file by name and content hash (a YAML string as written).

    A copied or moved sweep folder (or a repository cloned elsewhere) therefore resumes; an
    edited override or base config does not.
    """
    settings: dict[str, str] = {}
    items = list(args[1:] if args and not str(args[0]).startswith("--") else args)
    i = n_config = 0
    while i < len(items):
        item = items[i]
        if item == "--config" and i + 1 < len(items):
            value = items[i + 1]
            path = Path(value)
            try:
                is_file = path.is_file()
            except OSError:  # a YAML string too long for a file name
                is_file = False
            if is_file:
                value = f"{path.name} sha256:{file_digest(path)['sha256'][:16]}"
            settings[f"config[{n_config}]"] = value
            n_config += 1
            i += 2
            continue
        key, _, value = item.partition("=")
        if key != "--trainer.default_root_dir":
            settings[key.removeprefix("--")] = value
        i += 1
    return settings


def _changes(old: Mapping[str, str], new: Mapping[str, str]) -> str:
    parts = []
    for key in dict.fromkeys([*old, *new]):
        a, b = old.get(key, "(unset)"), new.get(key, "(unset)")
        if a != b:
            parts.append(f"{key}: {_short(a)} -> {_short(b)}")
    return "; ".join(parts)


def _short(text: str, limit: int = 60) -> str:
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _read_marker(run: Run) -> dict[str, Any] | None:
    try:
        record = json.loads((run.root / MARKER).read_text())
        if not isinstance(record["row"], dict) or not isinstance(record["args"], list):
            return None
        return record
    except (OSError, ValueError, KeyError, TypeError):
        return None


def _completed(run: Run, out: Path) -> tuple[dict[str, Any] | None, str]:
    """The run's recorded ok row if it can be skipped, else ``None`` and why it must run.

    A run is skipped when its marker says ``ok``, its settings (:func:`run_settings`) are
    unchanged, its ``metrics.csv`` exists and its checkpoint has the size and SHA-256 recorded
    when it finished.
    """
    marker = run.root / MARKER
    if not marker.is_file():
        return None, "new" if not run.root.exists() else "cut off before it finished"
    record = _read_marker(run)
    if record is None:
        return None, "its completion marker is unreadable"
    row = record["row"]
    old = record.get("settings") or run_settings(record["args"])
    changed = _changes(old, run_settings(run.args))
    if changed:
        return None, f"its settings changed: {changed}"
    if row.get("status") != "ok":
        return None, "it failed before"
    for key in ("metrics_csv", "ckpt"):
        if not row.get(key) or not (out / row[key]).is_file():
            return None, f"its {key.replace('_', '.')} is missing"
    if row.get("ckpt_sha256"):
        ckpt = out / row["ckpt"]
        if ckpt.stat().st_size != row.get("ckpt_size"):
            return None, (
                f"its checkpoint {row['ckpt']} is damaged ({ckpt.stat().st_size} bytes, "
                f"{row.get('ckpt_size')} when it finished)"
            )
        if file_digest(ckpt)["sha256"] != row["ckpt_sha256"]:
            return None, f"its checkpoint {row['ckpt']} is damaged (SHA-256 differs)"
    return row, "done"


def _train_one(run: Run, sweep: Sweep, out: Path, train_fn: TrainFn) -> dict[str, Any]:
    """Train, test (if asked) and evaluate one run. An ``Exception`` makes a ``failed`` row;
    ``KeyboardInterrupt`` and ``SystemExit`` (Lightning turns Ctrl+C and SIGTERM into these) stop
    the sweep, leaving the run without a marker so that the next pass retries it."""
    row: dict[str, Any] = {"run": run.key, "variant": run.variant, "seed": run.seed}
    t0 = time.perf_counter()
    try:
        summary = train_fn(list(run.args))
        if sweep.test and summary.get("test_acc") is None:
            ckpt = summary.get("best_ckpt") or summary.get("last_ckpt")
            test_args = ["test", *run.args[1:-1], f"--trainer.default_root_dir={run.root / 'test'}"]
            summary["test_acc"] = train_fn([*test_args, f"--ckpt_path={ckpt}"]).get("test_acc")
        wall = time.perf_counter() - t0
        cols = evaluate_run(summary, sweep)
    except Exception as exc:
        row.update(status="failed", error=first_line(exc), wall_s=time.perf_counter() - t0)
        return row
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
    return row


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
    }


_REQUIRED = ("run", "variant", "seed", "status")


def rows_for_report(
    sweep: Sweep,
    out_dir: str | Path,
    overrides: Mapping[str, Any] | None = None,
    echo: Callable[[str], None] = print,
) -> list[dict[str, Any]]:
    """The rows ``--report-only`` reports: ``DIR/results.csv`` when it is sound, else rebuilt
    (and rewritten) from the runs' completion markers.

    results.csv is sound when it parses, has the columns ``run``, ``variant``, ``seed`` and
    ``status``, and holds every run that has a readable marker (a truncated file loses rows).
    Hand edits of a sound file are kept.

    Raises:
        ValueError: results.csv is missing or damaged and no marker exists to rebuild it from.
    """
    out = Path(out_dir).resolve()
    runs = sweep.runs(out, overrides)
    markers = {}
    for run in runs:
        record = _read_marker(run)
        if record is not None:
            markers[run.key] = record["row"]
    path = out / "results.csv"
    problem = ""
    rows: list[dict[str, Any]] = []
    try:
        rows = read_results(path)
        columns = set().union(*(r.keys() for r in rows)) if rows else set()
        lacking = [c for c in _REQUIRED if rows and c not in columns]
        if lacking or None in columns:
            problem = f"is damaged (columns {lacking} missing or extra cells)"
        elif any(r[c] in (None, "") for r in rows for c in _REQUIRED):
            problem = "is damaged (rows with empty run, variant, seed or status)"
        elif set(markers) - {r["run"] for r in rows}:
            problem = (
                f"lacks {len(set(markers) - {r['run'] for r in rows})} finished run(s) that have "
                "completion markers (truncated?)"
            )
    except FileNotFoundError:
        problem = "is missing"
    except (ValueError, TypeError, UnicodeDecodeError, csv.Error) as e:
        problem = f"is unreadable ({type(e).__name__}: {e})"
    if not problem:
        return rows
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


def _last_losses(metrics_csv: str | None) -> dict[str, float | None]:
    rows = read_metrics_csv(metrics_csv) if metrics_csv and Path(metrics_csv).is_file() else []
    last = rows[-1] if rows else {}
    return {"train/loss": last.get("train/loss"), "val/loss": last.get("val/loss")}


def _write_outputs(
    sweep: Sweep,
    out: Path,
    rows: list[dict[str, Any]],
    planned: int,
    overrides: Mapping[str, Any] | None,
) -> None:
    write_results(out / "results.csv", rows, baseline=sweep.baselines)
    write_report(
        out / "results.csv", out / "report.md", planned=planned, **report_kwargs(sweep, overrides)
    )


def train_and_mark(
    run: Run,
    i: int,
    n: int,
    sweep: Sweep,
    out: Path,
    train_fn: TrainFn,
    echo: Callable[[str], None],
    *,
    attempts: int = 1,
) -> dict[str, Any]:
    """Train run ``i`` of ``n`` in a clean folder, write its marker and return its row (the
    body of every executor: in-process, a ``--jobs`` worker or a Ray task)."""
    if run.root.exists():
        shutil.rmtree(run.root)
    run.root.mkdir(parents=True)
    row = _train_one(run, sweep, out, train_fn)
    row["attempts"] = attempts
    if row["status"] == "ok" and row.get("ckpt") and (out / row["ckpt"]).is_file():
        digest = file_digest(out / row["ckpt"])
        row.update(ckpt_size=digest["size"], ckpt_sha256=digest["sha256"])
    record = {"row": row, "args": list(run.args), "settings": run_settings(run.args)}
    atomic_write_text(run.root / MARKER, json.dumps(record, indent=1, default=str))
    tag = f"[{sweep.name}] run {i}/{n} {run.key}"
    if row["status"] == "ok":
        acc = "?" if row["val/acc"] is None else f"{row['val/acc']:.4f}"
        echo(f"{tag}: ok, val/acc {acc}, {_fmt_time(row['wall_s'])}")
    else:
        echo(f"{tag}: FAILED ({row['error']})")
    return row


def _run_parallel(
    todo: list[tuple[int, Run, str]],
    sweep: Sweep,
    out: Path,
    n: int,
    rows: dict[str, dict[str, Any]],
    runs: list[Run],
    overrides: Mapping[str, Any] | None,
    echo: Callable[[str], None],
    *,
    executor: str,
    jobs: int,
    devices: Sequence[int] | None,
    runs_per_device: int,
    ray_address: str | None,
    threads: int,
) -> None:
    """Train ``todo`` with a process per run; the driver records each row as it arrives."""
    tasks = [
        {
            "sweep": str(sweep.path),
            "out": str(out),
            "i": i,
            "n": n,
            "variant": run.variant,
            "seed": run.seed,
            "args": list(run.args),
            "root": str(run.root),
            "threads": threads,
        }
        for i, run, _ in todo
    ]
    why = {run.key: w for _, run, w in todo}
    finished = 0
    start = time.perf_counter()

    def on_start(task: dict[str, Any], where: Any) -> None:
        key = f"{task['variant']}/seed{task['seed']}"
        place = "cpu" if where is None else (f"cuda:{where}" if isinstance(where, int) else where)
        echo(
            f"[{sweep.name}] run {task['i']}/{n} {key} ({why[key]}) started on {place}, "
            f"{threads} thread(s)"
        )

    def on_done(task: dict[str, Any], row: dict[str, Any]) -> None:
        nonlocal finished
        finished += 1
        rows[row["run"]] = row
        _write_outputs(sweep, out, [rows[r.key] for r in runs if r.key in rows], n, overrides)
        elapsed = time.perf_counter() - start
        eta = elapsed / finished * (len(tasks) - finished)
        state = "ok" if row["status"] == "ok" else f"FAILED ({row.get('error')})"
        echo(
            f"[{sweep.name}] run {task['i']}/{n} {row['run']}: {state} | {finished}/{len(tasks)} "
            f"done | elapsed {_fmt_time(elapsed)} | ETA {_fmt_time(eta)}"
        )

    if executor == "ray":
        run_ray(
            tasks,
            address=ray_address,
            jobs=jobs if jobs > 1 else None,
            runs_per_device=runs_per_device,
            on_start=on_start,
            on_done=on_done,
        )
    else:
        run_local(
            tasks,
            jobs=jobs,
            devices=devices,
            runs_per_device=runs_per_device,
            on_start=on_start,
            on_done=on_done,
            log_dir=out / "logs",
        )


def run_sweep(
    sweep_path: str | Path,
    out_dir: str | Path,
    *,
    overrides: Mapping[str, Any] | None = None,
    dry_run: bool = False,
    train_fn: TrainFn | None = None,
    echo: Callable[[str], None] = print,
    validate: bool | None = None,
    jobs: int = 1,
    executor: str = "local",
    devices: Sequence[int] | None = None,
    runs_per_device: int = 1,
    ray_address: str | None = None,
    threads: int | None = None,
) -> list[dict[str, Any]]:
    """Run (or resume) the sweep in ``sweep_path`` into ``out_dir``.

    Args:
        sweep_path: a sweep file (format: :mod:`visattn.ablate.sweep`).
        out_dir: output folder (created).
        overrides: dotted overrides applied to every run after the sweep's own, e.g.
            ``{"data.root": "/data/cifar"}`` (part of each run's arguments, so resuming needs the
            same ones).
        dry_run: only print each run's state and ``train_cls.py`` arguments.
        train_fn: the training call, ``visattn.training.cli.run`` unless given (tests).
        echo: where progress lines go.
        validate: before the first run, parse and build one run of every variant that has runs
            to do (:func:`visattn.ablate.resolve.check_variants`), so that a misspelt key or a
            bad placement in the last variant fails before the first one trains. Default: when
            ``train_fn`` is the real one.
        jobs: runs at once, each in its own process (:func:`visattn.ablate.executors.run_local`);
            1 trains in this process, one run after the other.
        executor: ``"local"`` or ``"ray"`` (:func:`visattn.ablate.executors.run_ray`).
        devices: GPU indices for ``jobs > 1`` (default: all visible); runs_per_device: how many
            runs share one GPU.
        ray_address: a Ray cluster to join (default: start a local instance).
        threads: CPU threads per run (default: this machine's CPUs divided by ``jobs``; with
            ``jobs=1`` and no ``threads``, torch's own setting). A run's figures are bit-identical
            across ``jobs`` when its thread count is the same: float sums are ordered by thread,
            so with the default (a thread count that changes with ``jobs``) losses can differ in
            their last digits.

    Raises:
        ValueError: a variant fails validation (every failing variant is named), or the
            profile device is CUDA on a machine without it.

    Returns:
        The results rows (one dict per finished run, :data:`~visattn.ablate.results.RESULT_COLUMNS`
        keys), in sweep order, as written to ``results.csv``.
    """
    sweep = load_sweep(sweep_path)
    out = Path(out_dir).resolve()
    runs = sweep.runs(out, overrides)
    n = len(runs)
    tag = f"[{sweep.name}]"
    if dry_run:
        for i, run in enumerate(runs, 1):
            _, why = _completed(run, out)
            echo(f"{tag} run {i}/{n} {run.key} ({why}): python train_cls.py {shlex.join(run.args)}")
        return []
    device = torch.device(sweep.profile["device"])
    if device.type == "cuda" and not torch.cuda.is_available():
        raise ValueError(
            f"sweep {sweep.path}: profile.device is {sweep.profile['device']!r} but CUDA is not "
            "available here; set profile: {device: cpu} (or run on a GPU machine)"
        )
    real_training = train_fn is None
    train_fn = train_fn or _default_train_fn()
    out.mkdir(parents=True, exist_ok=True)

    rows: dict[str, dict[str, Any]] = {}
    todo: list[tuple[int, Run, str]] = []
    for i, run in enumerate(runs, 1):
        row, why = _completed(run, out)
        if row is not None:
            rows[run.key] = row
        else:
            todo.append((i, run, why))
            if (run.root / MARKER).is_file():  # a failed run's old row stays until retried
                with contextlib.suppress(ValueError, KeyError, TypeError):
                    rows[run.key] = json.loads((run.root / MARKER).read_text())["row"]
    if real_training if validate is None else validate:
        check_variants([run for _, run, _ in todo], f"sweep {sweep.path}")
    echo(
        f"{tag} {n} runs ({len(sweep.variants)} variants x {len(sweep.seeds)} seeds): "
        f"{n - len(todo)} done earlier, {len(todo)} to run; output in {out}"
    )

    if executor not in ("local", "ray"):
        raise ValueError(f"executor must be 'local' or 'ray', got {executor!r}")
    parallel = executor == "ray" or jobs > 1
    if parallel and not real_training:
        raise ValueError("jobs > 1 and the Ray executor run train_cls.py's own training call")
    per_run = threads or max(1, cpu_count() // max(1, jobs))
    driver_threads = torch.get_num_threads()
    lock = SweepLock(out)
    lock.acquire()
    if rows:
        _write_outputs(sweep, out, [rows[r.key] for r in runs if r.key in rows], n, overrides)
    start = time.perf_counter()
    try:
        if parallel:
            _run_parallel(
                todo,
                sweep,
                out,
                n,
                rows,
                runs,
                overrides,
                echo,
                executor=executor,
                jobs=jobs,
                devices=devices,
                runs_per_device=runs_per_device,
                ray_address=ray_address,
                threads=per_run,
            )
        if not parallel and threads is not None:  # as a worker would: the same figures
            torch.set_num_threads(per_run)
        for done, (i, run, why) in enumerate([] if parallel else todo):
            elapsed = time.perf_counter() - start
            eta = elapsed / done * (len(todo) - done) if done else math.nan
            progress = (
                f"[{sweep.name}] run {i}/{n} {run.key} ({why}) | {done}/{len(todo)} trained "
                f"this session | elapsed {_fmt_time(elapsed)} | ETA {_fmt_time(eta)}"
            )
            echo(progress)
            rows[run.key] = train_and_mark(run, i, n, sweep, out, train_fn, echo)
            _write_outputs(sweep, out, [rows[r.key] for r in runs if r.key in rows], n, overrides)
    finally:
        torch.set_num_threads(driver_threads)
        final = [rows[r.key] for r in runs if r.key in rows]
        try:
            if final:
                write_plots(final, out, baseline=sweep.baselines)
        finally:
            lock.release()
    total = time.perf_counter() - start
    failed = sum(r["status"] != "ok" for r in final)
    echo(
        f"{tag} finished in {_fmt_time(total)}: {len(final) - failed} ok, {failed} failed; "
        f"report {out / 'report.md'}"
    )
    return final
