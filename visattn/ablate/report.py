"""report.md: one row per variant, computed only from results.csv.

Per variant, over its ``ok`` runs: parameters, multiply-accumulates, latency (means over seeds),
val/acc and test/acc as mean ± sample std with n, the difference of means to the baseline
variant with a 95% Welch confidence interval, and the localization scores when the data carried
target boxes. The variant with the best mean val/acc is marked ★.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..utils import atomic_write_text
from .results import MeanStd, mean_std, read_results, welch_ci

__all__ = ["PLOT_FILES", "VariantSummary", "render_report", "summarize", "write_report"]

#: The PNG files :mod:`visattn.ablate.plots` writes next to report.md.
PLOT_FILES = ("acc_vs_params.png", "acc_vs_macs.png", "acc_vs_latency.png", "val_curves.png")
_STATS = (
    "params",
    "macs",
    "latency_ms",
    "throughput",
    "val/acc",
    "test/acc",
    "loc/pointing",
    "loc/energy",
)


@dataclass
class VariantSummary:
    """Statistics of one variant's ok runs (``stats[column]``) and its failed runs."""

    name: str
    runs: int
    failed: int
    stats: dict[str, MeanStd] = field(default_factory=dict)
    throughput_batch: int | None = None
    profile_device: str | None = None


def summarize(rows: Sequence[dict[str, Any]]) -> list[VariantSummary]:
    """Group results rows by variant (in order of first appearance) and compute the statistics."""
    order: list[str] = []
    groups: dict[str, list[dict[str, Any]]] = {}
    for r in rows:
        if r["variant"] not in groups:
            order.append(r["variant"])
            groups[r["variant"]] = []
        groups[r["variant"]].append(r)
    out = []
    for name in order:
        ok = [r for r in groups[name] if r["status"] == "ok"]
        s = VariantSummary(name, len(groups[name]), len(groups[name]) - len(ok))
        s.stats = {c: mean_std([r.get(c) for r in ok]) for c in _STATS}
        batches = {r.get("throughput_batch") for r in ok} - {None}
        devices = {r.get("profile_device") for r in ok} - {None, ""}
        s.throughput_batch = batches.pop() if len(batches) == 1 else None
        s.profile_device = devices.pop() if len(devices) == 1 else None
        out.append(s)
    return out


def _count(x: float) -> str:
    if math.isnan(x):
        return "-"
    for unit, scale in (("G", 1e9), ("M", 1e6), ("K", 1e3)):
        if abs(x) >= scale:
            return f"{x / scale:.3f}{unit}"
    return f"{x:.0f}"


def _num(x: float, digits: int) -> str:
    return "-" if math.isnan(x) else f"{x:.{digits}f}"


def _pm(m: MeanStd, scale: float, digits: int) -> str:
    if m.n == 0:
        return "-"
    if m.n == 1:
        return f"{m.mean * scale:.{digits}f}"
    return f"{m.mean * scale:.{digits}f} ± {m.std * scale:.{digits}f}"


def _delta(v: MeanStd, base: MeanStd, scale: float) -> str:
    if v.n == 0 or base.n == 0:
        return "-"
    diff, lo, hi = welch_ci(v, base)
    text = f"{diff * scale:+.2f}"
    if math.isnan(lo):
        return text + " [n < 2]"
    return text + f" [{lo * scale:+.2f}, {hi * scale:+.2f}]"


def render_report(
    rows: Sequence[dict[str, Any]],
    *,
    name: str,
    baseline: str | Mapping[str, str] | None = None,
    description: str = "",
    planned: int | None = None,
    plots: Sequence[str] = PLOT_FILES,
) -> str:
    """The markdown report of ``rows`` (as :func:`visattn.ablate.results.read_results` gives).

    Args:
        name: the sweep's name (title).
        baseline: the variant differences are measured against (default: the first), or a
            mapping ``{variant: its baseline}`` (variants not in it use the first).
        planned: the number of runs the sweep plans (for the header; ``None``: not shown).
        plots: PNG files to link below the table.
    """
    summaries = summarize(rows)
    if not summaries:
        return f"# Sweep `{name}`\n\nNo finished runs yet.\n"
    by_name = {s.name: s for s in summaries}
    first = summaries[0].name
    if isinstance(baseline, Mapping):
        base_of = {s.name: baseline.get(s.name, first) for s in summaries}
    else:
        base_of = {s.name: baseline if baseline is not None else first for s in summaries}
    several = len(set(base_of.values())) > 1
    scored = [s for s in summaries if s.stats["val/acc"].n]
    best = max(scored, key=lambda s: s.stats["val/acc"].mean).name if scored else None
    has_test = any(s.stats["test/acc"].n for s in summaries)
    has_loc = any(s.stats["loc/pointing"].n for s in summaries)
    batches = {s.throughput_batch for s in summaries} - {None}
    devices = {s.profile_device for s in summaries} - {None}
    tb = f"b{batches.pop()}" if len(batches) == 1 else "batch"
    ok = sum(r["status"] == "ok" for r in rows)
    failed = len(rows) - ok

    head = [
        "variant",
        *(["vs"] if several else []),
        "params",
        "MACs",
        "latency b1 (ms)",
        f"img/s {tb}",
        "val/acc (%)",
        "n",
        "Δ val/acc (pp) [95% CI]",
    ]
    if has_test:
        head += ["test/acc (%)", "n test", "Δ test/acc (pp) [95% CI]"]
    if has_loc:
        head += ["loc/pointing", "loc/energy"]
    lines = ["| " + " | ".join(head) + " |", "|" + "|".join("---" for _ in head) + "|"]
    for s in summaries:
        st = s.stats
        label = s.name + (" ★" if s.name == best else "")
        if s.failed:
            label += f" ({s.failed} failed)"
        is_base = s.name == base_of[s.name]
        base = by_name.get(base_of[s.name])
        cells = [
            label,
            *([base_of[s.name]] if several else []),
            _count(st["params"].mean),
            _count(st["macs"].mean),
            _num(st["latency_ms"].mean, 2),
            _num(st["throughput"].mean, 0),
            _pm(st["val/acc"], 100, 2),
            str(st["val/acc"].n),
            "baseline"
            if is_base
            else ("-" if base is None else _delta(st["val/acc"], base.stats["val/acc"], 100)),
        ]
        if has_test:
            cells += [
                _pm(st["test/acc"], 100, 2),
                str(st["test/acc"].n),
                "baseline"
                if is_base
                else ("-" if base is None else _delta(st["test/acc"], base.stats["test/acc"], 100)),
            ]
        if has_loc:
            cells += [_pm(st["loc/pointing"], 1, 3), _pm(st["loc/energy"], 1, 3)]
        lines.append("| " + " | ".join(cells) + " |")

    out = [f"# Sweep `{name}`", ""]
    if description:
        out += [description.strip(), ""]
    runs_line = f"Runs: {ok} ok, {failed} failed"
    if planned is not None:
        runs_line += f", {planned - len(rows)} not run yet (of {planned} planned)"
    out += [
        runs_line + ". Every figure below is computed from `results.csv`.",
        "",
        (
            "- Baselines: per variant, column `vs`."
            if several
            else f"- Baseline: `{base_of[first]}`."
        )
        + " ★ marks the best mean val/acc.",
        "- Accuracies are top-1 in %, mean ± sample standard deviation over the seeds; n counts "
        "the ok runs. Δ is the difference of means to the baseline in percentage points with a "
        "95% confidence interval by Welch's t-test (needs n ≥ 2 on both sides).",
        "- val/acc is each run's best validation accuracy; test/acc is measured on the test split "
        "where the run tested.",
        "- params: parameters of the trained network; MACs: multiply-accumulates per image at the "
        "data's image size; latency: median eval-mode forward time at batch 1, img/s: images per "
        "second at the throughput batch"
        + (f", both measured on `{devices.pop()}`" if len(devices) == 1 else "")
        + " (means over seeds).",
    ]
    if has_loc:
        out.append(
            "- loc/pointing: pointing-game hit rate (the map's maximum falls in the target's box); "
            "loc/energy: share of the map's non-negative mass inside the box. Each is averaged "
            "over the validation images and the network's spatial, hybrid and residual blocks "
            "(`visattn.localization`), then mean ± std over seeds; - where no block has a "
            "spatial map."
        )
    out += ["", *lines, ""]
    failures = [r for r in rows if r["status"] != "ok"]
    if failures:
        out += ["## Failed runs", "", "| run | error |", "|---|---|"]
        out += [f"| {r['run']} | {str(r.get('error') or '').replace('|', '/')} |" for r in failures]
        out.append("")
    if plots:
        out += ["## Plots", ""] + [f"![{Path(p).stem}]({p})" for p in plots] + [""]
    return "\n".join(out)


def write_report(
    results_csv: str | Path,
    report_md: str | Path,
    **kwargs: Any,
) -> str:
    """Read ``results_csv``, render the report (:func:`render_report` keywords) and write it to
    ``report_md`` atomically. Returns the markdown."""
    text = render_report(read_results(results_csv), **kwargs)
    atomic_write_text(report_md, text)
    return text
