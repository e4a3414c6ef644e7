"""End-to-end training speed of two commits, side by side: ``train_cls.py fit`` on the same
machine, runs alternating between the commits.

    python benchmarks/bench_e2e.py                              # quickstart + CIFAR-10 epoch
    python benchmarks/bench_e2e.py --cases quickstart --rounds 3
    python benchmarks/bench_e2e.py --threads 1 --short          # shared machine: CPU time

Each case is one ``python train_cls.py fit ...`` command line. The baseline commit (``--old``,
default ``14daa8b``, the main before issue 17) is exported with ``git archive`` into a temporary
folder; the new tree is this checkout (``--new``). Both run in this Python environment, each in
its own process with ``PYTHONPATH`` pointing at its tree, in the order old, new, new, old, ...
(``--rounds`` pairs), so slow drifts of the machine hit both alike. Per run it records:

* ``wall_s``: wall time of the whole process (start-up, imports and data included);
* ``cpu_s``: user + system CPU seconds of the process and its DataLoader workers
  (``os.wait4``); on a machine shared with other jobs, with ``--threads 1``, this is the
  steadier figure;
* ``fit_s``: the wall time of ``fit`` from the run's summary line;
* ``val_acc``: the best validation accuracy from the summary line (equal seeds, so the two
  commits should agree up to the effect of the changes listed in the benchmark's notes).

The cases (``--short`` shrinks both for a shared machine):

* ``quickstart``: ``configs/quickstart.yaml`` as shipped (6 epochs of 3,000 images); goal:
  new wall time <= 0.8x old;
* ``cifar``: one epoch of ``configs/cifar10/resnet20.yaml`` on real CIFAR-10 (``--data-root``),
  data loading and validation included; images/s = 50,000 / wall_s; goal: new >= 1.3x old.

Printed: one line per run, then per case the medians and the ratios new/old of wall and CPU
time (and images/s for ``cifar``); ``--out`` writes every run as CSV.
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _common import markdown_table, write_csv

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_DATA_ROOT = ROOT.parent / "shared" / "data"
CIFAR_TRAIN_IMAGES = 50_000
SUMMARY = re.compile(r"visattn fit: best val/acc (?P<acc>[0-9.]+|n/a).*\| wall (?P<wall>[0-9.]+) s")
COLUMNS = ["case", "tree", "round", "wall_s", "cpu_s", "fit_s", "val_acc", "images_per_s"]
GOALS = {"quickstart": ("wall", 0.8), "cifar": ("images/s", 1.3)}


def case_args(case: str, *, data_root: Path, short: bool) -> list[str]:
    """The ``train_cls.py`` arguments of one case."""
    if case == "quickstart":
        args = ["fit", "--config", "configs/quickstart.yaml"]
        if short:
            args += ["--trainer.max_epochs", "1"]
        return args
    if case == "cifar":
        args = [
            "fit",
            "--config",
            "configs/cifar10/resnet20.yaml",
            "--data.root",
            str(data_root),
            "--data.verify",
            "false",
            "--trainer.max_epochs",
            "1",
        ]
        if short:
            args += ["--trainer.limit_train_batches", "40", "--trainer.limit_val_batches", "10"]
        return args
    raise ValueError(f"unknown case {case!r}; choose quickstart or cifar")


def train_images(case: str, short: bool) -> int | None:
    """Training images of one ``cifar`` run (for images/s), None for other cases."""
    if case != "cifar":
        return None
    return 40 * 128 if short else CIFAR_TRAIN_IMAGES


def export_tree(ref: str, dest: Path) -> Path:
    """``git archive ref`` of this repository extracted into ``dest``."""
    dest.mkdir(parents=True, exist_ok=True)
    archive = subprocess.run(
        ["git", "-C", str(ROOT), "archive", ref], capture_output=True, check=True
    ).stdout
    subprocess.run(["tar", "-x", "-C", str(dest)], input=archive, check=True)
    return dest


def run_once(tree: Path, args: list[str], *, threads: int | None, log_root: Path) -> dict:
    """One ``python train_cls.py ARGS`` in ``tree``: wall, CPU (with workers) and summary."""
    env = dict(os.environ, PYTHONPATH=str(tree))
    if threads is not None:
        env["OMP_NUM_THREADS"] = str(threads)
    log_dir = tempfile.mkdtemp(dir=log_root)
    cmd = [sys.executable, "train_cls.py", *args, "--trainer.default_root_dir", log_dir]
    t0 = time.perf_counter()
    proc = subprocess.Popen(
        cmd, cwd=tree, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    assert proc.stdout is not None
    out = proc.stdout.read()
    # reaped here (not by Popen) to read its resource usage, DataLoader workers included
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - t0
    proc.returncode = os.waitstatus_to_exitcode(status)
    proc.stdout.close()
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed in {tree}:\n{out[-3000:]}")
    m = SUMMARY.search(out)
    if m is None:
        raise RuntimeError(f"no summary line in the output of {' '.join(cmd)}:\n{out[-3000:]}")
    return {
        "wall_s": wall,
        "cpu_s": usage.ru_utime + usage.ru_stime,
        "fit_s": float(m["wall"]),
        "val_acc": None if m["acc"] == "n/a" else float(m["acc"]),
    }


def summarise(rows: list[dict], case: str) -> list[str]:
    """Median figures of each tree and the new/old ratios, with the goal of the case."""
    med = {
        tree: {
            k: statistics.median(r[k] for r in rows if r["tree"] == tree and r["case"] == case)
            for k in ("wall_s", "cpu_s", "fit_s")
        }
        for tree in ("old", "new")
    }
    old, new = med["old"], med["new"]
    lines = [
        f"{case}: median wall {old['wall_s']:.1f} s old, {new['wall_s']:.1f} s new; "
        f"CPU {old['cpu_s']:.1f} s old, {new['cpu_s']:.1f} s new; "
        f"fit {old['fit_s']:.1f} s old, {new['fit_s']:.1f} s new",
        f"  new/old wall time {new['wall_s'] / old['wall_s']:.3f}, "
        f"CPU time {new['cpu_s'] / old['cpu_s']:.3f}, fit wall {new['fit_s'] / old['fit_s']:.3f}",
    ]
    metric, goal = GOALS[case]
    if metric == "wall":
        value = new["wall_s"] / old["wall_s"]
        ok = value <= goal
        lines.append(
            f"  goal: new/old wall time <= {goal}: {value:.3f} {'met' if ok else 'MISSED'}"
        )
    else:
        value = old["wall_s"] / new["wall_s"]
        ok = value >= goal
        lines.append(
            f"  goal: new/old images/s >= {goal}: {value:.3f} {'met' if ok else 'MISSED'} "
            f"(CPU-time ratio old/new {old['cpu_s'] / new['cpu_s']:.3f})"
        )
    accs = {t: [r["val_acc"] for r in rows if r["tree"] == t and r["case"] == case] for t in med}
    lines.append(f"  best val/acc: old {accs['old']}, new {accs['new']}")
    return lines


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--old", default="14daa8b", help="baseline commit (git archive of this repo)")
    p.add_argument("--new", type=Path, default=ROOT, help="tree of the new code (default: here)")
    p.add_argument("--cases", nargs="+", default=["quickstart", "cifar"])
    p.add_argument("--rounds", type=int, default=1, help="pairs of runs (old, new) per case")
    p.add_argument("--threads", type=int, default=None, help="OMP_NUM_THREADS (default: unset)")
    p.add_argument("--short", action="store_true", help="1 quickstart epoch; 40 CIFAR batches")
    p.add_argument("--data-root", type=Path, default=DEFAULT_DATA_ROOT)
    p.add_argument("--out", type=Path, default=None, help="CSV of every run")
    a = p.parse_args(argv)
    if a.rounds < 1:
        p.error("--rounds must be >= 1")
    for case in a.cases:
        if case not in GOALS:
            p.error(f"unknown case {case!r}; choose from {sorted(GOALS)}")
    if "cifar" in a.cases and not (a.data_root / "cifar-10-batches-py").is_dir():
        p.error(f"--data-root {a.data_root} has no cifar-10-batches-py/ (case cifar)")
    print(f"old {a.old} vs new {a.new}; threads {a.threads or 'default'}; short {a.short}")
    rows: list[dict] = []
    with tempfile.TemporaryDirectory(prefix="bench_e2e_") as tmp:
        trees = {"old": export_tree(a.old, Path(tmp) / "old"), "new": a.new.resolve()}
        logs = Path(tmp) / "logs"
        logs.mkdir()
        for case in a.cases:
            args = case_args(case, data_root=a.data_root.resolve(), short=a.short)
            for rnd in range(a.rounds):
                for tree in ("old", "new") if rnd % 2 == 0 else ("new", "old"):
                    r = run_once(trees[tree], args, threads=a.threads, log_root=logs)
                    n = train_images(case, a.short)
                    r.update(case=case, tree=tree, round=rnd)
                    r["images_per_s"] = n / r["wall_s"] if n else None
                    rows.append(r)
                    print(
                        f"{case} {tree} round {rnd}: wall {r['wall_s']:.1f} s, CPU "
                        f"{r['cpu_s']:.1f} s, fit {r['fit_s']:.1f} s, val/acc {r['val_acc']}",
                        flush=True,
                    )
    print()
    print(markdown_table(rows, COLUMNS))
    print()
    for case in a.cases:
        print("\n".join(summarise(rows, case)))
    if a.out is not None:
        write_csv(rows, a.out, COLUMNS)
        print(f"wrote {a.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
