"""report.md: one row per variant, computed only from results.csv.

Per variant, over its ``ok`` runs: parameters, multiply-accumulates, latency (means over seeds),
val/acc and test/acc as mean ± sample std with n, and the comparison with its baseline variant:

* paired by seed (:func:`visattn.ablate.stats.paired_ci`): the mean of the per-seed
  differences with its 95% paired-t interval, the number of pairs (runs without a partner are
  left out and counted) and the Wilcoxon signed-rank p-value where there are at least 5 pairs;
* unpaired: the difference of means with its 95% Welch interval.

A "how to read this" line under the table gives, per baseline, the smallest difference the seeds
can resolve given the baseline's seed spread (:func:`visattn.ablate.stats.resolvable_difference`).
When the data carried target boxes, the attention maps' and Grad-CAM's localization scores
follow. The variant with the best mean val/acc is marked ★.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..files import atomic_write_text
from .results import read_results
from .stats import (
    MeanStd,
    Paired,
    holm,
    mean_std,
    paired_ci,
    resolvable_difference,
    welch_ci,
)

__all__ = [
    "COLUMNS",
    "PLOT_FILES",
    "Column",
    "Comparison",
    "Timings",
    "VariantSummary",
    "baselines_of",
    "compare",
    "format_p",
    "render_report",
    "summarize",
    "write_report",
]

#: Family-wise error rate of the report's "resolved" column (Holm over the sweep's comparisons).
ALPHA = 0.05

#: The PNG files :mod:`visattn.ablate.plots` writes next to report.md.
PLOT_FILES = (
    "acc_vs_params.png",
    "acc_vs_macs.png",
    "acc_vs_latency.png",
    "val_curves.png",
    "paired_diff.png",
)
_STATS = (
    "params",
    "macs",
    "latency_ms",
    "throughput",
    "val/acc",
    "test/acc",
    "loc/pointing",
    "loc/energy",
    "gradcam/pointing",
    "gradcam/energy",
)


@dataclass
class VariantSummary:
    """Statistics of one variant's ok runs (``stats[column]``) and its failed runs."""

    name: str
    runs: int
    failed: int
    stats: dict[str, MeanStd] = field(default_factory=dict)
    by_seed: dict[str, dict[int, float | None]] = field(default_factory=dict)
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
        s.by_seed = {m: {r["seed"]: r.get(m) for r in ok} for m in ("val/acc", "test/acc")}
        batches = {r.get("throughput_batch") for r in ok} - {None}
        devices = {r.get("profile_device") for r in ok} - {None, ""}
        s.throughput_batch = batches.pop() if len(batches) == 1 else None
        s.profile_device = devices.pop() if len(devices) == 1 else None
        out.append(s)
    return out


@dataclass(frozen=True)
class Comparison:
    """A variant against its baseline on one metric: paired by seed and Welch's."""

    baseline: str
    paired: Paired
    welch: tuple[float, float, float]  # (diff, low, high)


def baselines_of(
    summaries: Sequence[VariantSummary], baseline: str | Mapping[str, str] | None
) -> dict[str, str]:
    """``{variant: its baseline}`` (default: the first variant)."""
    first = summaries[0].name if summaries else ""
    if isinstance(baseline, Mapping):
        return {s.name: baseline.get(s.name, first) for s in summaries}
    return {s.name: baseline if baseline is not None else first for s in summaries}


def compare(
    summaries: Sequence[VariantSummary],
    baseline: str | Mapping[str, str] | None = None,
    metric: str = "val/acc",
) -> dict[str, Comparison]:
    """:class:`Comparison` of every non-baseline variant whose baseline has results."""
    by_name = {s.name: s for s in summaries}
    out = {}
    for name, base in baselines_of(summaries, baseline).items():
        if name == base or base not in by_name:
            continue
        v, b = by_name[name], by_name[base]
        out[name] = Comparison(
            base,
            paired_ci(v.by_seed[metric], b.by_seed[metric]),
            welch_ci(v.stats[metric], b.stats[metric]),
        )
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


def _interval(diff: float, lo: float, hi: float, scale: float) -> str:
    if math.isnan(diff):
        return "-"
    text = f"{diff * scale:+.2f}"
    if math.isnan(lo):
        return text + " [n < 2]"
    return text + f" [{lo * scale:+.2f}, {hi * scale:+.2f}]"


def format_p(p: float) -> str:
    """A p-value as the tables print it: three decimals, ``<0.001`` below what three decimals
    show (``0.000`` would read as a p of zero), ``-`` where there is none."""
    if math.isnan(p):
        return "-"
    return "<0.001" if p < 0.0005 else f"{p:.3f}"


def _paired_cells(c: Comparison | None, is_base: bool, holm_p: float = math.nan) -> list[str]:
    """Cells: paired Δ [CI], pairs, detectable Δ, Wilcoxon p, Holm p, resolved, Welch Δ [CI]."""
    if is_base:
        return ["baseline", "", "", "", "", "", "baseline"]
    if c is None:
        return ["-"] * 7
    p = c.paired
    pairs = str(p.n) + (f" ({p.unpaired} unpaired)" if p.unpaired else "")
    wil, adjusted = format_p(p.wilcoxon_p), format_p(holm_p)
    resolved = "-" if math.isnan(holm_p) else ("**yes**" if holm_p < ALPHA else "no")
    return [
        _interval(p.diff, p.low, p.high, 100),
        pairs,
        _num(p.detectable * 100, 2),
        wil,
        adjusted,
        resolved,
        _interval(*c.welch, 100),
    ]


def _how_to_read(
    summaries: Sequence[VariantSummary], base_of: Mapping[str, str], metric: str
) -> str:
    by_name = {s.name: s for s in summaries}
    parts = []
    for base in dict.fromkeys(base_of.values()):
        st = by_name[base].stats[metric] if base in by_name else None
        if st is None or st.n < 2:
            parts.append(f"`{base}` has fewer than 2 ok runs, so no spread is known")
            continue
        r = resolvable_difference(st.std, st.n)
        parts.append(
            f"with n = {st.n} seeds and `{base}`'s seed spread s = {st.std * 100:.2f} pp, a "
            f"difference smaller than about ±{r * 100:.2f} pp (t·s·√(2/n)) cannot be told from "
            "seed noise by comparing means (the Welch column)"
        )
    return (
        f"How to read this ({metric}): Δ is variant - baseline in percentage points; a 95% CI "
        "that contains 0 means these seeds cannot tell the variant from its baseline; "
        + "; ".join(parts)
        + ". The table's detectable Δ is the paired design's figure, from the spread of the "
        "per-seed differences: pairing by seed removes the seed-to-seed spread the two share, "
        "so it is the smaller of the two wherever the pairs move together, and it is the one "
        "the resolved column goes by."
    )


@dataclass(frozen=True)
class _Context:
    """What the report's columns and notes are computed from."""

    summaries: list[VariantSummary]
    base_of: dict[str, str]
    comparisons: dict[str, dict[str, Comparison]]  # {metric: {variant: Comparison}}
    holm_p: dict[str, dict[str, float]]  # {metric: {variant: Holm-adjusted paired-t p}}
    budget_holm_p: dict[str, float]  # {matched variant: its equal-budget comparison's, ditto}
    best: str | None
    batch_label: str
    metric: str = "val/acc"  # the report's headline metric

    @property
    def several(self) -> bool:
        return len(set(self.base_of.values())) > 1

    def has(self, column: str) -> bool:
        return any(s.stats[column].n for s in self.summaries)


@dataclass(frozen=True)
class Column:
    """One column of the report's table: its header, its cell for a variant, and whether the
    table shows it (e.g. test columns only when some run tested)."""

    header: str | Callable[[_Context], str]
    cell: Callable[[VariantSummary, _Context], str]
    shown: Callable[[_Context], bool] = lambda ctx: True

    def head(self, ctx: _Context) -> str:
        return self.header(ctx) if callable(self.header) else self.header


def _label(s: VariantSummary, ctx: _Context) -> str:
    return (
        s.name
        + (" ★" if s.name == ctx.best else "")
        + (f" ({s.failed} failed)" if s.failed else "")
    )


def _comparison_columns(metric: str, suffix: str) -> list[Column]:
    """Δ paired [CI], pairs, detectable Δ, Wilcoxon p, Holm p, resolved and Δ Welch [CI] of
    ``metric`` against the baseline."""

    def cell(k: int) -> Callable[[VariantSummary, _Context], str]:
        def get(s: VariantSummary, ctx: _Context) -> str:
            c = ctx.comparisons[metric].get(s.name)
            adjusted = ctx.holm_p[metric].get(s.name, math.nan)
            return _paired_cells(c, s.name == ctx.base_of[s.name], adjusted)[k]

        return get

    def shown(ctx: _Context) -> bool:
        return ctx.has(metric) and (metric != "val/acc" or ctx.metric == "val/acc")

    heads = (
        f"Δ {metric} paired (pp) [95% CI]",
        f"pairs{suffix}",
        f"detectable Δ{suffix} (pp)",
        f"Wilcoxon p{suffix}",
        f"Holm p{suffix}",
        f"resolved{suffix}",
        f"Δ {metric} Welch (pp) [95% CI]",
    )
    return [Column(h, cell(k), shown) for k, h in enumerate(heads)]


def _stat(column: str, scale: float, digits: int) -> Callable[[VariantSummary, _Context], str]:
    return lambda s, ctx: _pm(s.stats[column], scale, digits)


def _has(column: str) -> Callable[[_Context], bool]:
    return lambda ctx: ctx.has(column)


#: The report's table, in order.
COLUMNS: tuple[Column, ...] = (
    Column("variant", _label),
    Column("vs", lambda s, ctx: ctx.base_of[s.name], lambda ctx: ctx.several),
    Column("params", lambda s, ctx: _count(s.stats["params"].mean)),
    Column("MACs", lambda s, ctx: _count(s.stats["macs"].mean)),
    Column("latency b1 (ms)", lambda s, ctx: _num(s.stats["latency_ms"].mean, 2)),
    Column(
        lambda ctx: f"img/s {ctx.batch_label}", lambda s, ctx: _num(s.stats["throughput"].mean, 0)
    ),
    Column("val/acc (%)", _stat("val/acc", 100, 2), lambda ctx: ctx.metric == "val/acc"),
    Column("n", lambda s, ctx: str(s.stats["val/acc"].n), lambda ctx: ctx.metric == "val/acc"),
    *_comparison_columns("val/acc", ""),
    Column("test/acc (%)", _stat("test/acc", 100, 2), _has("test/acc")),
    Column("n test", lambda s, ctx: str(s.stats["test/acc"].n), _has("test/acc")),
    *_comparison_columns("test/acc", " test"),
    Column("loc/pointing", _stat("loc/pointing", 1, 3), _has("loc/pointing")),
    Column("loc/energy", _stat("loc/energy", 1, 3), _has("loc/pointing")),
    Column("gradcam/pointing", _stat("gradcam/pointing", 1, 3), _has("gradcam/pointing")),
    Column("gradcam/energy", _stat("gradcam/energy", 1, 3), _has("gradcam/pointing")),
)


def _table(ctx: _Context) -> list[str]:
    columns = [c for c in COLUMNS if c.shown(ctx)]
    lines = ["| " + " | ".join(c.head(ctx) for c in columns) + " |"]
    lines.append("|" + "|".join("---" for _ in columns) + "|")
    for s in ctx.summaries:
        lines.append("| " + " | ".join(c.cell(s, ctx) for c in columns) + " |")
    return lines


#: a run "ends near chance" when its accuracy is within this share of the way from chance
#: (1 / classes) to 1: 0.19 for 10 classes, 0.55 for 2
NEAR_CHANCE = 0.1
#: a run was timed "under load" when the machine's load average exceeded the run's own threads
#: (``profile_threads``, 1 where a row does not record them) by more than this: other work
#: shared its cores
BUSY_MARGIN = 0.5


def near_chance(row: Mapping[str, Any], metric: str) -> float | None:
    """Chance (``1 / num_classes``) when ``row`` is an ok run whose ``metric`` ended within
    :data:`NEAR_CHANCE` of it, else ``None`` (also for rows that do not record their classes)."""
    classes, value = row.get("num_classes"), row.get(metric)
    if row.get("status") != "ok" or not classes or value is None or math.isnan(value):
        return None
    chance = 1.0 / classes
    return chance if value <= chance + NEAR_CHANCE * (1.0 - chance) else None


def busy(row: Mapping[str, Any]) -> bool:
    """Whether ``row``'s run was timed under load: the 1-minute load average (which counts the
    run's own threads, busy until just before) exceeded its ``profile_threads`` by more than
    :data:`BUSY_MARGIN`. Rows that do not record their threads are taken as one thread, the
    rule of the visattn that wrote them; rows that do not record the load are not busy (they
    count as unknown)."""
    load = row.get("profile_load")
    return load is not None and load > (row.get("profile_threads") or 1) + BUSY_MARGIN


def _warnings(rows: Sequence[dict[str, Any]], metric: str) -> list[str]:
    """Bullets that say where the table's figures cannot be taken at face value: runs that
    ended near chance, timings taken under load, on other processors or in unknown
    conditions."""
    ok = [r for r in rows if r["status"] == "ok"]
    out = []
    chance = [
        (r.get("run") or f"{r['variant']}/seed{r['seed']}", near_chance(r, metric)) for r in ok
    ]
    chance = [(run, c) for run, c in chance if c is not None]
    if chance:
        out.append(
            f"- **{len(chance)} run(s) ended near chance** ({metric} within "
            f"{NEAR_CHANCE:.0%} of the way from chance to 1): "
            + ", ".join(f"`{run}` (chance {c:.3f})" for run, c in chance)
            + ". Such a run did not learn (a warm-up longer than the run, a learning rate "
            "too high or too low, wrong labels): its figures compare nothing."
        )
    timings = Timings.of(ok)
    if timings.unknown:
        out.append(
            f"- **Timings:** {timings.unknown} of {timings.timed} runs were timed before visattn "
            "recorded the conditions (possibly beside other runs, or on another machine): "
            "their latency and img/s are not comparable; time the networks alone "
            "(`benchmarks/bench_steps.py`) to compare speed."
        )
    if timings.busy:
        out.append(
            f"- **Timings under load:** {timings.busy} run(s) were timed while the machine's "
            f"load average exceeded the run's own threads by more than {BUSY_MARGIN:g} (other "
            "work on its cores, such as the sweep's other runs): their latency and img/s are "
            "inflated."
        )
    if len(timings.cpus) > 1:
        out.append(
            f"- **Timings on {len(timings.cpus)} processors** ({'; '.join(timings.cpus)}): "
            "latency and img/s are comparable only between runs timed on the same one."
        )
    return out


@dataclass(frozen=True)
class Timings:
    """The conditions under which a sweep's ok runs were timed (their ``latency_ms`` and
    ``throughput``): how many were, how many of them before visattn recorded the conditions,
    how many under load (:func:`busy`), and on which processors. The report's
    bullets and the latency plot's title say the same from it."""

    timed: int
    unknown: int
    busy: int
    cpus: tuple[str, ...]

    @classmethod
    def of(cls, rows: Sequence[Mapping[str, Any]]) -> Timings:
        """From results.csv rows; only ok runs count."""
        timed = [r for r in rows if r["status"] == "ok" and r.get("latency_ms") is not None]
        return cls(
            timed=len(timed),
            unknown=sum(r.get("profile_load") is None for r in timed),
            busy=sum(busy(r) for r in timed),
            cpus=tuple(sorted({r["profile_cpu"] for r in timed if r.get("profile_cpu")})),
        )

    @property
    def comparable(self) -> bool:
        """Every timing recorded its conditions, none was under load, and one processor took
        them all."""
        return not self.unknown and not self.busy and len(self.cpus) <= 1

    @property
    def processor(self) -> str | None:
        """The one processor that timed every timed run, where the rows say so."""
        return self.cpus[0] if len(self.cpus) == 1 and not self.unknown else None

    def caveat(self) -> str:
        """One line for a plot: why these timings do not compare ("" when they do)."""
        if self.comparable:
            return ""
        why = [
            f"{self.busy} under load" if self.busy else "",
            f"{self.unknown} in unrecorded conditions" if self.unknown else "",
            f"on {len(self.cpus)} processors" if len(self.cpus) > 1 else "",
        ]
        return (
            f"not comparable: of {self.timed} timed runs, {', '.join(w for w in why if w)} "
            "(report.md says more; benchmarks/bench_steps.py times networks alone)"
        )


def _notes(ctx: _Context, rows: Sequence[dict[str, Any]], planned: int | None) -> list[str]:
    """The runs line and the bullets that explain the table's columns."""
    ok = sum(r["status"] == "ok" for r in rows)
    runs_line = f"Runs: {ok} ok, {len(rows) - ok} failed"
    if planned is not None:
        runs_line += f", {planned - len(rows)} not run yet (of {planned} planned)"
    devices = {s.profile_device for s in ctx.summaries} - {None}
    first = ctx.summaries[0].name
    baseline = (
        "- Baselines: per variant, column `vs`."
        if ctx.several
        else f"- Baseline: `{ctx.base_of[first]}`."
    )
    out = [
        runs_line + ". Every figure below is computed from `results.csv`.",
        "",
        baseline
        + f" ★ marks the best mean {ctx.metric}, only where its difference from the baseline "
        "is resolved (below); with nothing resolved no variant is marked.",
        "- Accuracies are top-1 in %, mean ± sample standard deviation over the seeds; n counts "
        "the ok runs.",
        "- Δ paired: the mean of the per-seed differences d to the baseline (runs with the "
        "same seed share data order and augmentation), with a 95% paired-t interval.",
        "- pairs: seeds with an ok run on both sides (runs without a partner are left out, and "
        "counted).",
        "- detectable Δ: the smallest true difference these pairs detect with 80% power at the "
        "5% level, (t_0.975 + t_0.8)·sd(d)/√n.",
        "- Wilcoxon p: two-sided signed-rank test, where there are at least 5 pairs.",
        "- Holm p: the paired-t p-value adjusted by Holm's step-down method over every "
        "comparison of the metric in this report (this table's, and the equal-budget table's "
        "where there is one).",
        f"- resolved: **yes** only where Holm p < {ALPHA} (told from seed noise with the "
        "family-wise error held at 5%), otherwise no, whatever the raw interval says.",
        "- Δ Welch: the difference of means with a 95% Welch interval, ignoring the pairing.",
        (
            "- val/acc is each run's best validation accuracy; test/acc is measured on the test "
            "split where the run tested."
            if ctx.metric == "val/acc"
            else "- test/acc: each run's network as the sweep's `test` names it (`last`: the "
            "final one, nothing chosen on any split) scored on the test split. val/acc (the "
            "best epoch on the validation split) is not reported: where the validation split is "
            "the test set, as for CIFAR's default, it would be a choice made on the test set."
        ),
        "- params: parameters of the trained network; MACs: multiply-accumulates per image at the "
        "data's image size; latency: median eval-mode forward time at batch 1, img/s: images per "
        "second at the throughput batch"
        + (f", both measured on `{devices.pop()}`" if len(devices) == 1 else "")
        + " (means over seeds).",
    ]
    out += _warnings(rows, ctx.metric)
    if ctx.has("loc/pointing"):
        out.append(
            "- loc/pointing: pointing-game hit rate (the map's maximum falls in the target's box); "
            "loc/energy: share of the map's non-negative mass inside the box. Each is averaged "
            "over the validation images and the network's spatial, hybrid and residual blocks "
            "(`visattn.visualize.localization`), then mean ± std over seeds; - where no block "
            "has a spatial map."
        )
    if ctx.has("gradcam/pointing"):
        out.append(
            "- gradcam/pointing, gradcam/energy: the same two scores for Grad-CAM (Selvaraju et "
            "al., ICCV 2017) of the last stage for the true label, for every network, the "
            "baseline included."
        )
    return out


def _budget_pairs(
    summaries: Sequence[VariantSummary], budget: Mapping[str, str], metric: str
) -> dict[str, tuple[str, Comparison | None]]:
    """``{matched variant: (its widened baseline, the comparison)}`` of the equal-budget
    table, for the pairs whose both sides have finished runs."""
    names = {s.name for s in summaries}
    return {
        target: (matched, compare(summaries, {target: matched}, metric).get(target))
        for matched, target in budget.items()
        if matched in names and target in names
    }


def _adjust(table_p: Mapping[str, float], budget_p: Mapping[str, float]) -> tuple[dict, dict]:
    """Holm-adjusted p-values of the table's comparisons (``{variant: p}``) and the equal-budget
    ones (``{matched variant: p}``) as one family: every comparison the report may call resolved
    counts in it. Returns the two adjusted mappings."""
    joint = holm({**{("table", v): p for v, p in table_p.items()},
                  **{("budget", v): p for v, p in budget_p.items()}})  # fmt: skip
    return {v: joint["table", v] for v in table_p}, {v: joint["budget", v] for v in budget_p}


def _budget_section(ctx: _Context, pairs: Mapping[str, tuple[str, Comparison | None]]) -> list[str]:
    """The "Against an equal budget" table of :func:`_budget_pairs`' comparisons."""
    if not pairs:
        return []
    m = ctx.metric
    rows = [
        f"| {target} | {matched} | "
        + " | ".join(_paired_cells(c, False, ctx.budget_holm_p[target]))
        + " |"
        for target, (matched, c) in pairs.items()
    ]
    return [
        "## Against an equal budget",
        "",
        "Each variant against the baseline widened to its size (Δ = variant - widened "
        f"baseline, {m}, paired by seed as above).",
        "",
        f"| variant | equal-budget baseline | Δ {m} paired (pp) [95% CI] | pairs | "
        f"detectable Δ (pp) | Wilcoxon p | Holm p | resolved | Δ {m} Welch (pp) [95% CI] |",
        "|---|---|---|---|---|---|---|---|---|",
        *rows,
        "",
    ]


#: the metrics a report can lead with
METRICS = ("val/acc", "test/acc")


def _best(
    summaries: Sequence[VariantSummary],
    comparisons: Mapping[str, Comparison],
    adjusted: Mapping[str, float],
    metric: str,
) -> str | None:
    """The variant with the best mean ``metric`` if its difference from its baseline is
    resolved (Holm p < ALPHA) and positive; otherwise none (a star on noise would be a claim)."""
    scored = [s for s in summaries if s.stats[metric].n]
    if not scored:
        return None
    top = max(scored, key=lambda s: s.stats[metric].mean)
    c = comparisons.get(top.name)
    if c is None or not adjusted.get(top.name, math.nan) < ALPHA or not c.paired.diff > 0:
        return None
    return top.name


def render_report(
    rows: Sequence[dict[str, Any]],
    *,
    name: str,
    baseline: str | Mapping[str, str] | None = None,
    description: str = "",
    planned: int | None = None,
    plots: Sequence[str] = PLOT_FILES,
    notes: Sequence[str] = (),
    budget: Mapping[str, str] | None = None,
    metric: str = "val/acc",
) -> str:
    """The markdown report of ``rows`` (as :func:`visattn.ablate.results.read_results` gives);
    its table has the :data:`COLUMNS` that apply.

    Args:
        name: the sweep's name (title).
        baseline: the variant differences are measured against (default: the first), or a
            mapping ``{variant: its baseline}`` (variants not in it use the first).
        planned: the number of runs the sweep plans (for the header; ``None``: not shown).
        plots: PNG files to link below the table.
        notes: extra bullet lines (e.g. how an equal-budget variant was sized).
        budget: ``{equal-budget variant: the variant it matches}``; each such pair gets a row in
            an "Against an equal budget" table (the matched variant minus the widened
            baseline, paired by seed).
        metric: the headline metric, ``"val/acc"`` or ``"test/acc"`` (then val/acc columns are
            left out: see the notes it writes).
    """
    if metric not in METRICS:
        raise ValueError(f"metric must be one of {list(METRICS)}, got {metric!r}")
    summaries = summarize(rows)
    if not summaries:  # the notes still say why (rows left out, for instance)
        lines = [f"# Sweep `{name}`", "", "No finished runs yet."]
        return "\n".join([*lines, *([""] + [f"- {n}" for n in notes] if notes else []), ""])
    batches = {s.throughput_batch for s in summaries} - {None}
    comparisons = {m: compare(summaries, baseline, m) for m in METRICS}
    # one Holm family a metric: the table's comparisons, and for the headline metric the
    # equal-budget table's too
    budget_pairs = _budget_pairs(summaries, budget or {}, metric)
    budget_p = {t: c.paired.t_p if c else math.nan for t, (_, c) in budget_pairs.items()}
    p_values = {m: {v: c.paired.t_p for v, c in comparisons[m].items()} for m in METRICS}
    holm_p = {m: holm(p) for m, p in p_values.items() if m != metric}
    holm_p[metric], budget_holm_p = _adjust(p_values[metric], budget_p)
    ctx = _Context(
        summaries=summaries,
        base_of=baselines_of(summaries, baseline),
        comparisons=comparisons,
        holm_p=holm_p,
        budget_holm_p=budget_holm_p,
        best=_best(summaries, comparisons[metric], holm_p[metric], metric),
        batch_label=f"b{batches.pop()}" if len(batches) == 1 else "batch",
        metric=metric,
    )
    out = [f"# Sweep `{name}`", ""]
    if description:
        out += [description.strip(), ""]
    out += _notes(ctx, rows, planned)
    out += [f"- {n}" for n in notes]
    out += ["", *_table(ctx), "", _how_to_read(summaries, ctx.base_of, metric)]
    if metric == "val/acc" and ctx.has("test/acc"):
        out += ["", _how_to_read(summaries, ctx.base_of, "test/acc")]
    out.append("")
    out += _budget_section(ctx, budget_pairs)
    failures = [r for r in rows if r["status"] != "ok"]
    if failures:
        out += ["## Failed runs", "", "| run | error |", "|---|---|"]
        out += [f"| {r['run']} | {str(r.get('error') or '').replace('|', '/')} |" for r in failures]
        out.append("")
    if plots:
        out += ["## Plots", ""] + [f"![{Path(p).stem}]({p})" for p in plots] + [""]
    return "\n".join(out)


def write_report(
    rows: str | Path | Sequence[dict[str, Any]],
    report_md: str | Path,
    **kwargs: Any,
) -> str:
    """Render the report of ``rows`` (a results.csv to read, or its rows) with the
    :func:`render_report` keywords and write it to ``report_md`` atomically. Returns the
    markdown."""
    if isinstance(rows, (str, Path)):
        rows = read_results(rows)
    text = render_report(rows, **kwargs)
    atomic_write_text(report_md, text)
    return text
