"""``python -m visattn.ablate SWEEP.yaml --out DIR [--jobs N] [--executor ray]``: run or resume a
sweep, write the report."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import Any

from .._safe_path import add_import_option, imports_or_exit
from ..locks import SweepLock
from .join import plan_join, write_joined_report
from .runner import (
    ExecutionPlan,
    changed_runs_note,
    claim_folder,
    rows_for_report,
    run_sweep,
    write_outputs,
)
from .sweep import load_sweep, parse_set

#: what a stopped sweep says it kept
STOPPED = (
    "finished runs are kept and the run in progress goes on from its last checkpoint; run the "
    "same command again to resume"
)


JOIN_HELP = (
    "train only the variants the committed sweep in TABLE_DIR does not have (your sweep file "
    "extends its sweep file) and write DIR/joined.md: yours paired by seed against every "
    "variant it finished; TABLE_DIR is read, never written"
)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m visattn.ablate",
        description="Run every variant x seed of a sweep file through train_cls.py (resuming "
        "from earlier runs in DIR) and write DIR/results.csv, DIR/report.md and PNG plots.",
    )
    parser.add_argument("sweep", help="sweep YAML file (see configs/ablations/)")
    parser.add_argument("--out", required=True, help="output folder")
    add_import_option(parser)
    parser.add_argument("--join", metavar="TABLE_DIR", help=JOIN_HELP)
    parser.add_argument(
        "--take-over",
        action="store_true",
        help="let this sweep use a folder that another sweep made (refused by default: its "
        "finished runs whose settings differ would be trained again, its report rewritten)",
    )
    parser.add_argument(
        "--retrain-changed",
        action="store_true",
        help="train again the finished runs whose settings differ from this pass's (refused by "
        "default: training them again deletes their results)",
    )
    parser.add_argument(
        "--dry-run",
        action="store_true",
        help="print the runs, their state and arguments, and how many are done, train nothing",
    )
    parser.add_argument(
        "--report-only",
        action="store_true",
        help="rebuild report.md and the plots from DIR/results.csv (itself rebuilt from the "
        "runs' completion markers when damaged), train nothing",
    )
    parser.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a dotted override for every run, after the sweep's (repeatable), e.g. "
        "--set data.root=/data/cifar --set data.verify=false; VALUE is read as YAML",
    )
    parser.add_argument(
        "--jobs",
        type=int,
        default=1,
        metavar="N",
        help="runs at once, each in its own process (default 1: one after the other, in this "
        "process); CPU threads are divided between them",
    )
    parser.add_argument(
        "--devices",
        type=lambda t: [int(d) for d in t.split(",") if d.strip()],
        metavar="0,1,...",
        help="GPUs for --jobs (default: all visible)",
    )
    parser.add_argument(
        "--runs-per-device",
        type=int,
        default=1,
        metavar="K",
        help="runs that share one GPU (a small CIFAR model leaves most of a large GPU idle)",
    )
    parser.add_argument(
        "--threads", type=int, metavar="T", help="CPU threads per run (default: CPUs / jobs)"
    )
    parser.add_argument(
        "--executor",
        choices=("local", "ray"),
        default="local",
        help="local processes, or Ray tasks (DIR must be on a file system every node sees)",
    )
    parser.add_argument(
        "--ray-address",
        metavar="ADDR",
        help="join this Ray cluster (default: start a local Ray instance)",
    )
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = _parser()
    argv = imports_or_exit(sys.argv[1:] if argv is None else list(argv), parser.prog)
    args = parser.parse_args(argv)
    try:
        plan = ExecutionPlan(
            jobs=args.jobs,
            executor=args.executor,
            devices=args.devices,
            runs_per_device=args.runs_per_device,
            ray_address=args.ray_address,
            threads=args.threads,
        )
    except ValueError:
        parser.error("--jobs, --runs-per-device and --threads must be >= 1")
    _warn_oversubscribed(args)
    try:
        overrides = parse_set(args.set)
    except ValueError as e:
        parser.error(str(e))
    if args.join:
        return _joined(args, overrides, plan)
    if args.report_only:
        try:
            sweep = load_sweep(args.sweep)
            if not Path(args.out).is_dir():
                raise ValueError(
                    f"--report-only: {args.out} is not a folder; give the --out folder the "
                    f"sweep {sweep.name!r} ran into"
                )
            with SweepLock(args.out):
                claim_folder(args.out, sweep, take_over=args.take_over, write=False)
                rows_for_report(sweep, args.out, overrides)
                claim_folder(args.out, sweep, take_over=args.take_over)
                note = changed_runs_note(sweep, Path(args.out).resolve(), overrides)
                if note:
                    print(f"WARNING {note}")
                notes = [note] if note else []
                write_outputs(sweep, args.out, None, overrides=overrides, plots=True, notes=notes)
        except (ValueError, RuntimeError, OSError) as e:
            print(f"error: {e}", file=sys.stderr)
            return 2
        print(f"wrote {args.out}/report.md")
        return 0
    try:
        rows = _train(args.sweep, args, plan, overrides)
    except (ValueError, RuntimeError, OSError) as e:  # a full disk, a folder where a file goes
        print(f"error: {e}", file=sys.stderr)
        return 2
    except (KeyboardInterrupt, SystemExit) as e:
        return _stopped(e)
    return 1 if any(r["status"] != "ok" for r in rows) else 0


def _stopped(e: BaseException) -> int:
    """The sweep's own line when it stops: Ctrl+C, SIGTERM (:func:`runner.sigterm_as_interrupt`)
    or Lightning's ``SystemExit(1)``, which is what Ctrl+C becomes inside a fit. Exit code 130."""
    why = f" ({e})" if isinstance(e, KeyboardInterrupt) and str(e) else ""
    print(f"stopped{why}: {STOPPED}", file=sys.stderr)
    return 130


def _train(sweep: Any, args: argparse.Namespace, plan: ExecutionPlan, overrides: dict) -> list:
    """:func:`run_sweep` of ``sweep`` (a file or a read sweep) with the command line's options."""
    return run_sweep(
        sweep,
        args.out,
        plan,
        overrides=overrides,
        dry_run=args.dry_run,
        take_over=args.take_over,
        retrain_changed=args.retrain_changed,
    )


def _warn_oversubscribed(args: argparse.Namespace) -> None:
    """One line when the runs at once ask for more CPU threads than this machine has (a Ray
    cluster's CPUs are its own: not checked here)."""
    cpus = os.cpu_count() or 1
    asked = args.jobs * (args.threads or 1)
    if args.executor == "local" and asked > cpus:
        print(
            f"WARNING --jobs {args.jobs} x --threads {args.threads or 1} = {asked} CPU threads "
            f"on a machine with {cpus}: the runs share cores, each runs slower, and their "
            "timings are not comparable",
            file=sys.stderr,
        )


def _joined(args: argparse.Namespace, overrides: dict, plan: ExecutionPlan) -> int:
    """``--join TABLE_DIR``: train the sweep's own variants into ``--out`` (unless
    ``--report-only``), then write ``joined.md`` (:mod:`visattn.ablate.join`)."""
    try:
        join = plan_join(load_sweep(args.sweep), args.join, overrides)
        print(
            f"[{join.sweep.name}] joining {join.table}: {len(join.rows)} of its runs read, "
            f"{len(join.missing)} not finished there; yours to train: {', '.join(join.mine)}"
        )
        rows = [] if args.report_only else _train(join.own, args, plan, overrides)
        if not args.dry_run:
            print(f"wrote {write_joined_report(join, args.out)}")
    except (ValueError, RuntimeError, OSError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    except (KeyboardInterrupt, SystemExit) as e:
        return _stopped(e)
    return 1 if any(r["status"] != "ok" for r in rows) else 0


if __name__ == "__main__":
    sys.exit(main())
