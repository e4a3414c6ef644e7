"""Your variants on a committed table: ``python -m visattn.ablate MY_SWEEP.yaml --out DIR
--join TABLE_DIR`` trains only the variants the table does not have, on its recipe and seeds,
and reports them paired by seed against every variant the table finished.

``MY_SWEEP.yaml`` extends the table's sweep file and adds variants (``extends:``, which merges
variants by name), so the recipe is the table's by construction. The table's runs are read
through their completion markers in ``TABLE_DIR`` (never trained, never written to): each is
checked as a resume would check it, so a sweep file that changes the recipe (its ``set``, its
base configs, a run's settings) is refused, naming the run and the difference. ``DIR`` is
yours: your runs, their ``results.csv`` and ``report.md``, and ``joined.md``, the table with
your rows, Holm's correction over every comparison of both.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from .job import CHANGED, completed
from .report import write_report
from .results import read_results
from .sweep import Sweep

__all__ = ["JOINED_REPORT", "Join", "plan_join", "write_joined_report"]

#: the joined table's file in the user's output folder
JOINED_REPORT = "joined.md"


@dataclasses.dataclass(frozen=True)
class Join:
    """A sweep joined with a committed table: ``own`` is the sweep of the user's variants only
    (what trains), ``rows`` the table's finished rows, ``missing`` its runs that are not
    finished (left out, named in the report)."""

    sweep: Sweep
    table: Path
    own: Sweep
    rows: list[dict[str, Any]]
    missing: list[str]

    @property
    def mine(self) -> list[str]:
        return [v.name for v in self.own.variants]


def _table_variants(table: Path) -> set[str]:
    runs = table / "runs"
    if not runs.is_dir():
        raise ValueError(
            f"--join {table}: no runs/ folder there; give the folder a committed sweep wrote "
            "(e.g. benchmarks/results/cifar10_cpu)"
        )
    return {p.name for p in runs.iterdir() if p.is_dir()}


def plan_join(sweep: Sweep, table_dir: str | Path, overrides: Mapping[str, Any] | None) -> Join:
    """Split ``sweep`` into the table's variants (read from ``table_dir``) and the user's own
    (to train).

    Raises:
        ValueError: ``table_dir`` holds no sweep's runs; the sweep shares no variant with it or
            adds none; a variant of the user's asks for a width match (not supported in a join
            yet); or a finished run of the table has other settings than the sweep gives it
            (naming the run and the difference: a joined variant differs from the table in its
            own options only).
    """
    table = Path(table_dir).resolve()
    committed = _table_variants(table)
    theirs = {v.name for v in sweep.variants if v.name in committed}
    mine = [v for v in sweep.variants if v.name not in committed]
    if not theirs:
        raise ValueError(
            f"--join {table}: the sweep {sweep.name!r} has none of the table's variants; start "
            "your sweep file with extends: <the table's sweep file> and add your variants"
        )
    if not mine:
        raise ValueError(
            f"--join {table}: every variant of {sweep.name!r} is the table's; add one of your own"
        )
    matched = [v.name for v in mine if v.match]
    if matched:
        raise ValueError(
            f"--join {table}: {', '.join(matched)} asks for a width match, which a join does not "
            "train yet; train it in a sweep of its own"
        )
    rows, missing = [], []
    for run in sweep.runs(table, overrides):
        if run.variant not in theirs:
            continue
        row, why = completed(run, table)
        if why.startswith(CHANGED):
            raise ValueError(
                f"--join {table}: the table's run {run.key} was trained with another recipe than "
                f"your sweep gives it ({why[len(CHANGED) :]}); a joined variant differs from the "
                "table in its own options only: keep the table's base, seeds and set"
            )
        if row is None:
            missing.append(run.key)
        else:
            rows.append(dict(row))  # the marker's row, what the run wrote
    own = dataclasses.replace(
        sweep,
        variants=tuple(dataclasses.replace(v, baseline=None) for v in mine),
        baseline=mine[0].name,
    )
    return Join(sweep, table, own, rows, missing)


def _shown(path: Path) -> str:
    """``path`` as the report names it: relative to the working folder when inside it (a
    committed report names no one's home folder), else as it is."""
    try:
        return str(path.relative_to(Path.cwd().resolve()))
    except ValueError:
        return str(path)


def _processors(rows: Sequence[dict[str, Any]]) -> str:
    found = sorted({str(r.get("profile_cpu") or "not recorded") for r in rows})
    return "; ".join(found) if found else "none yet"


def write_joined_report(join: Join, out_dir: str | Path, metric: str | None = None) -> Path:
    """``DIR/joined.md``: the table's finished runs and the user's (from ``DIR/results.csv``),
    each variant paired by seed against its baseline in the table, Holm's correction over all
    comparisons; the user's variants, the runs left out and the processors on both sides
    named."""
    out = Path(out_dir).resolve()
    path = out / "results.csv"
    own = [r for r in read_results(path) if r.get("variant") in join.mine] if path.is_file() else []
    sweep = join.sweep
    notes = [
        f"Yours, trained in {_shown(out)}: {', '.join(f'`{m}`' for m in join.mine)} "
        f"({sum(r.get('status') == 'ok' for r in own)} of "
        f"{len(join.mine) * len(sweep.seeds)} runs finished). The table's variants are read "
        f"from {_shown(join.table)} through their completion markers: nothing there was trained or "
        "written.",
        "Holm's correction runs over every comparison of this table, the table's own and yours.",
        f"Processors: the table's runs, {_processors(join.rows)}; yours, {_processors(own)}. "
        "Pairs whose two runs ran on different processor kinds carry those processors' float "
        "rounding as part of their noise.",
    ]
    if join.missing:
        notes.append(
            f"{len(join.missing)} of the table's runs are not finished and are left out "
            f"({', '.join(join.missing[:4])}{', ...' if len(join.missing) > 4 else ''})."
        )
    target = out / JOINED_REPORT
    write_report(
        [*join.rows, *own],
        target,
        name=f"{sweep.name}: your variants on {join.table.name}",
        baseline={v.name: v.baseline or sweep.baseline for v in sweep.variants},
        description=sweep.description,
        planned=len(sweep.seeds) * len(sweep.variants),
        plots=(),  # a join draws no plots: joined.md links none
        notes=notes,
        metric=metric or sweep.metric,
    )
    return target
