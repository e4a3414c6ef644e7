"""PNG plots of a sweep (matplotlib, Agg backend), from results.csv and the runs' metrics.csv.

* ``acc_vs_params.png``, ``acc_vs_macs.png``, ``acc_vs_latency.png``: one point per variant at
  its mean of the sweep's metric (val/acc or test/acc, the report's headline) with the standard
  deviation over seeds as error bar (and the latency's spread as horizontal bar); baselines are
  drawn as squares. The latency plot names the processor that timed the runs, and says in its
  title when the timings do not compare (under load, conditions unrecorded, several processors).
* ``val_curves.png``: validation accuracy per epoch, mean over seeds per variant with a ±1 std
  band, read from each ok run's ``metrics.csv``, at the epochs that validated.
* ``paired_diff.png``: a forest plot of the paired comparison of the metric, one line per
  non-baseline variant: the mean of its per-seed differences to its baseline with the 95%
  paired-t interval (a cross where fewer than 2 pairs give no interval), and a line at 0.
"""

from __future__ import annotations

import io
import math
import textwrap
from collections import defaultdict
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
from matplotlib.ticker import MaxNLocator

from ..files import atomic_write_bytes, read_metric_curve
from .report import Timings, compare, summarize

__all__ = ["write_plots"]


def _save(fig: plt.Figure, path: Path) -> None:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=100, bbox_inches="tight")
    plt.close(fig)
    atomic_write_bytes(path, buf.getvalue())


def _scatter(
    summaries: list,
    x_col: str,
    x_scale: float,
    x_label: str,
    baselines: set[str],
    path: Path,
    metric: str,
    x_err: bool = False,
    title: str = "",
) -> None:
    """Each variant at its mean ``x_col`` and mean metric; ``title``, where given, says in red
    why the x values do not compare."""
    fig, ax = plt.subplots(figsize=(6.4, 4.8))
    if title:
        ax.set_title(textwrap.fill(title, 70), fontsize=8, color="tab:red")
    colors = _variant_colors([s.name for s in summaries])
    for s in summaries:
        x, y = s.stats[x_col], s.stats[metric]
        if y.n == 0 or math.isnan(x.mean):
            continue
        yerr = 0.0 if math.isnan(y.std) else y.std * 100
        xerr = 0.0 if (not x_err or math.isnan(x.std)) else x.std * x_scale
        ax.errorbar(
            x.mean * x_scale,
            y.mean * 100,
            yerr=yerr,
            xerr=xerr,
            fmt="s" if s.name in baselines else "o",
            color=colors[s.name],
            capsize=3,
            label=f"{s.name} (n={y.n})",
        )
        ax.annotate(
            s.name,
            (x.mean * x_scale, y.mean * 100),
            textcoords="offset points",
            xytext=(4, 4),
            fontsize=7,
        )
    ax.set_xlabel(x_label)
    _finish_accuracy_plot(fig, ax, path, metric)


def _finish_accuracy_plot(fig: plt.Figure, ax: plt.Axes, path: Path, metric: str) -> None:
    """The accuracy axis of the scatter and curve plots, a grid, a legend of the variants
    drawn, then the file."""
    ax.set_ylabel(f"{metric} (%), mean ± std over seeds")
    ax.grid(alpha=0.3)
    if ax.get_legend_handles_labels()[0]:
        ax.legend(fontsize=6, loc="best")
    fig.tight_layout()
    _save(fig, path)


def _variant_colors(names: Sequence[str]) -> dict[str, Any]:
    """One distinct colour per variant, the same in every plot (tab10, or tab20 past 10)."""
    cmap = plt.get_cmap("tab10" if len(names) <= 10 else "tab20")
    return {name: cmap(i % cmap.N) for i, name in enumerate(names)}


def _curves(rows: Sequence[dict[str, Any]], root: Path, path: Path) -> None:
    per_variant: dict[str, list[dict[int, float]]] = defaultdict(list)
    order: list[str] = []
    for r in rows:
        if r["variant"] not in order:
            order.append(r["variant"])
        if r["status"] == "ok" and r.get("metrics_csv"):
            csv = root / r["metrics_csv"]
            curve = _validated(read_metric_curve(csv), read_metric_curve(csv, "val/loss"))
            if curve:
                per_variant[r["variant"]].append(curve)
    fig, ax = plt.subplots(figsize=(6.4, 4.8))
    colors = _variant_colors(order)
    for name in order:
        curves = per_variant.get(name)
        if not curves:
            continue
        epochs = sorted(set().union(*curves))
        means, stds = [], []
        for e in epochs:
            vals = [c[e] * 100 for c in curves if e in c]
            m = sum(vals) / len(vals)
            means.append(m)
            sd = (sum((v - m) ** 2 for v in vals) / (len(vals) - 1)) ** 0.5 if len(vals) > 1 else 0
            stds.append(sd)
        (line,) = ax.plot(
            epochs,
            means,
            marker="." if len(epochs) < 30 else None,
            color=colors[name],
            label=f"{name} (n={len(curves)})",
        )
        ax.fill_between(
            epochs,
            [m - s for m, s in zip(means, stds)],
            [m + s for m, s in zip(means, stds)],
            color=line.get_color(),
            alpha=0.15,
        )
    ax.set_xlabel("epoch (0-based, as logged)")
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    _finish_accuracy_plot(fig, ax, path, "val/acc")


def _validated(curve: dict[int, float], losses: dict[int, float]) -> dict[int, float]:
    """The epochs of ``curve`` that validated. A metrics.csv written before visattn left the
    val cells of an epoch that did not validate empty repeats the last validation there (same
    val/loss and val/acc to the last bit, which two validations never give): those are dropped."""
    out, last = {}, None
    for epoch in sorted(curve):
        seen = (curve[epoch], losses.get(epoch))
        if seen != last or seen[1] is None:
            out[epoch] = curve[epoch]
        last = seen
    return out


def _forest(
    summaries: list, baseline: str | Mapping[str, str] | None, path: Path, metric: str
) -> None:
    comps = compare(summaries, baseline, metric)
    names = [s.name for s in summaries if s.name in comps and comps[s.name].paired.n]
    colors = _variant_colors([s.name for s in summaries])
    # wide enough for "variant vs baseline (n=5)" labels at a readable size
    fig, ax = plt.subplots(figsize=(8.0, max(2.4, 0.45 * len(names) + 1.4)))
    for i, name in enumerate(names):
        p = comps[name].paired
        y = len(names) - 1 - i
        if math.isnan(p.low):
            ax.plot(p.diff * 100, y, "x", color=colors[name])
        else:
            ax.errorbar(
                p.diff * 100,
                y,
                xerr=[[(p.diff - p.low) * 100], [(p.high - p.diff) * 100]],
                fmt="o",
                color=colors[name],
                capsize=3,
            )
    ax.axvline(0.0, color="grey", linewidth=1, linestyle="--")
    ax.set_yticks(range(len(names)))
    ax.set_yticklabels(
        [f"{n} vs {comps[n].baseline} (n={comps[n].paired.n})" for n in reversed(names)],
        fontsize=8,
    )
    ax.set_xlabel(f"Δ {metric} (pp), mean of per-seed differences, 95% paired-t CI")
    if not names:
        ax.text(0.5, 0.5, "no paired runs yet", ha="center", va="center", transform=ax.transAxes)
    ax.grid(alpha=0.3, axis="x")
    fig.tight_layout()
    _save(fig, path)


def write_plots(
    rows: Sequence[dict[str, Any]],
    out_dir: str | Path,
    *,
    baseline: str | Mapping[str, str] | None = None,
    metric: str = "val/acc",
) -> list[Path]:
    """Write the five PNG plots of ``rows`` (results.csv rows) into ``out_dir`` atomically; the
    scatter and forest plots show ``metric`` (the sweep's headline, ``val/acc`` or
    ``test/acc``).

    ``metrics_csv`` paths in the rows are taken relative to ``out_dir``. Returns the paths.
    """
    out = Path(out_dir)
    summaries = summarize(rows)
    if isinstance(baseline, Mapping):
        bases = set(baseline.values())
    else:
        bases = {baseline if baseline is not None else (summaries[0].name if summaries else "")}
    paths = [out / n for n in ("acc_vs_params.png", "acc_vs_macs.png", "acc_vs_latency.png")]
    _scatter(summaries, "params", 1e-6, "parameters (M)", bases, paths[0], metric)
    _scatter(summaries, "macs", 1e-6, "multiply-accumulates per image (M)", bases, paths[1], metric)
    timings = Timings.of(rows)
    where = f" on {timings.processor}" if timings.processor else ""
    _scatter(
        summaries,
        "latency_ms",
        1.0,
        f"latency at batch 1 (ms){where}",
        bases,
        paths[2],
        metric,
        x_err=True,
        title=timings.caveat(),
    )
    paths.append(out / "val_curves.png")
    _curves(rows, out, paths[3])
    paths.append(out / "paired_diff.png")
    _forest(summaries, baseline, paths[4], metric)
    return paths
