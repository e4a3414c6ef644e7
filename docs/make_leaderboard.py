"""The CIFAR-10 leaderboard of the zoo and the regimes that test it, generated from the sweeps'
results.

    python docs/make_leaderboard.py           # docs/leaderboard.md, its plots, the README table
    python docs/make_leaderboard.py --check   # exit 1 when a written file differs from its data

Reads ``benchmarks/results/cifar10_cpu/results.csv`` (one row per finished run of
``configs/ablations/cifar10_cpu.yaml``), the training-step times that
``benchmarks/bench_steps.py`` measured (``benchmarks/results/steps_cifar10_cpu.csv``, every
variant in one run, and the ``.md`` beside it for the machine) and each block's
family from the registry, and writes:

* ``docs/leaderboard.md``: every variant, sorted by mean test accuracy, with its family,
  parameters, MACs, step time against the plain network, mean ± std over seeds, the paired
  difference to the plain network with its 95% interval, the detectable difference, the Holm
  p-value and whether the difference is resolved; the capacity control (GSoP against ResNet-20
  widened to its parameters); what the table can and cannot tell, from the same figures;
* the same page, after it: a table for each other regime of :data:`REGIMES` (CIFAR-10 at 30
  epochs, Imagenette at 112 px; each from its own sweep's ``results.csv``, with its own Holm
  family), and "What holds across regimes": every comparison resolved in any table, its Δ in
  each table where it ran, whether its sign holds and where it resolves;
* ``docs/assets/leaderboard/``: a forest plot of the paired differences and accuracy against
  cost (step time and MACs);
* the README's compact table, between ``<!-- leaderboard:start -->`` and ``<!-- leaderboard:end
  -->``: the top rows, the plain network and the control.

Holm's correction runs over every comparison on the page: each variant against the plain
network, and the pairs of :data:`PAIRS` (GSoP against the control; SimAM at the authors' position
against the position taken by mistake). Nothing here is typed in by hand: a figure that changes
in ``results.csv`` changes the page, and ``tests/docs/test_leaderboard.py`` fails until it is
written again.
"""

from __future__ import annotations

import argparse
import csv
import functools
import io
import math
import re
import sys
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
SWEEP = ROOT / "configs" / "ablations" / "cifar10_cpu.yaml"
RESULTS = ROOT / "benchmarks" / "results" / "cifar10_cpu"
#: the step times of every variant, one interleaved run of benchmarks/bench_steps.py with --out
STEPS = ROOT / "benchmarks" / "results" / "steps_cifar10_cpu.csv"
#: bench_steps.py's line for the cores other processes kept busy while it timed
OTHERS = "Other processes kept busy while timing"
IDLE_CORES = 0.25  # more cores than this busy with other work: not an idle run
#: the same networks timed on other CPUs (the speed work's files): how far the ratios move
OTHER_STEPS = (
    ROOT / "benchmarks" / "results" / "steps_cpu.csv",
    ROOT / "benchmarks" / "results" / "steps_cpu_intel.csv",
)
PAGE = ROOT / "docs" / "leaderboard.md"
ASSETS = ROOT / "docs" / "assets" / "leaderboard"
#: the regimes picture, as the page links it
REGIMES_PNG = "assets/leaderboard/regimes.png"
README = ROOT / "README.md"
START, END = "<!-- leaderboard:start -->", "<!-- leaderboard:end -->"
METRIC = "test/acc"
BASELINE = "resnet20_none"
CONTROL = ("resnet20_gsop", "resnet20_wide_gsop")  # (the variant, its width-matched control)
#: SimAM at a position chosen by mistake for the authors', and at the authors' position
SIMAM = ("resnet20_simam", "resnet20_simam_prenorm")
#: the comparisons of two variants on the page, besides each variant against the plain network:
#: {(variant, the variant it is measured against): what its row says}
PAIRS = {
    CONTROL: "GSoP minus the control",
    SIMAM[::-1]: "SimAM at `prenorm` minus at `inner`",
}
SAME_SIZE = 0.01  # a block within 1% of the plain network's parameters adds no capacity
README_TOP = 5  # rows of the README's table besides the plain network and the control


@dataclass
class Row:
    """One variant of the leaderboard."""

    variant: str
    label: str
    family: str
    params: float
    macs: float
    step: float  # step time / the plain network's (nan: not measured)
    mean: float
    std: float
    n: int
    diff: float = math.nan
    low: float = math.nan
    high: float = math.nan
    pairs: int = 0
    detectable: float = math.nan
    p: float = math.nan
    holm: float = math.nan

    @property
    def resolved(self) -> bool:
        return self.holm < 0.05


#: the comparisons of :data:`PAIRS` that have rows, by pair
Pairs = Mapping[tuple[str, str], Row]


@dataclass(frozen=True)
class Regime:
    """One table of the page: a sweep, its results folder, the network its variants train
    and their names' common prefix (a block in two regimes is the same name after it:
    ``resnet20_gsop``, ``resnet18h_gsop``)."""

    title: str
    sweep: Path
    results: Path
    prefix: str
    network: str
    steps: Path | None = None
    #: where its data is (``data.root``): the width-matched control's runs resolve with it
    data: Path | None = None
    #: the README block it writes (``<!-- NAME:start -->`` ... ``<!-- NAME:end -->``), if any,
    #: and the seeds every variant needs before the block shows its table
    readme: str = ""
    readme_seeds: int = 3
    #: why the sweep plans the seeds it does, where that is not the page's 5 (said after its
    #: "Runs:" count)
    seeds_why: str = ""
    #: the images the accuracy column is measured on (Imagenette has no test split: its
    #: 3,925 validation images are the sweep's test set, nothing chosen on them)
    split: str = "test"

    @property
    def extra(self) -> dict[str, str]:
        """The ``--set`` the sweep's runs are resolved with here (the data's place)."""
        return {} if self.data is None else {"data.root": str(self.data)}

    @property
    def baseline(self) -> str:
        return f"{self.prefix}none"

    @property
    def pairs(self) -> dict[tuple[str, str], str]:
        """:data:`PAIRS` under this regime's names."""
        return {
            (self.prefix + a[len(CIFAR_PREFIX) :], self.prefix + b[len(CIFAR_PREFIX) :]): label
            for (a, b), label in PAIRS.items()
        }

    def comparison(self, variant: str) -> str:
        """The name a comparison has in every regime: the variant without the prefix, or
        ``a - b`` for a pair's row."""
        return " - ".join(v.strip()[len(self.prefix) :] for v in variant.split(" - "))


CIFAR_PREFIX = "resnet20_"
#: the page's tables: the leaderboard (every block) first, then the regimes that test its
#: findings
REGIMES = (
    Regime("CIFAR-10, 10 epochs", SWEEP, RESULTS, CIFAR_PREFIX, "ResNet-20", STEPS),
    Regime(
        "CIFAR-10, 30 epochs",
        ROOT / "configs" / "ablations" / "cifar10_long_cpu.yaml",
        ROOT / "benchmarks" / "results" / "cifar10_long_cpu",
        CIFAR_PREFIX,
        "ResNet-20",
        STEPS,  # the same six networks at the same batch as the 10-epoch table's
        readme="long",
        seeds_why="seeds 3 and 4 were left out for compute: with the Imagenette table's new "
        "runs they would have taken more than the 60 thread-hours budgeted for both; the sweep "
        "file's header says how to add them",
    ),
    Regime(
        "Imagenette, 112 px",
        ROOT / "configs" / "ablations" / "imagenette112_cpu.yaml",
        ROOT / "benchmarks" / "results" / "imagenette112",
        "resnet18h_",
        "half-width ResNet-18",
        ROOT / "benchmarks" / "results" / "steps_imagenette112_cpu.csv",
        data=ROOT.parent / "shared" / "data" / "imagenette-112",
        readme="imagenette",
        readme_seeds=2,  # its table has been in the README since its first pairs
        split="val",
    ),
)


def _attention_names(spec: Any) -> list[str]:
    from visattn.models.placement import normalize_placements

    return [p.name for p in normalize_placements(spec)]


#: what each placement position means in ResNet-20's BasicBlock (the page's placement bullet)
POSITION_WORDS = {
    "standard": "on the residual branch after its last BN, before the sum (SE's place)",
    "inner": "after the block's first conv, its BN and ReLU",
    "prenorm": "between the block's last 3x3 conv and its BN",
    "post": "after the sum",
    "output": "after the block's final ReLU",
    "pre": "on the residual branch's input",
    "identity": "on the shortcut",
    "stage": "once after a whole stage",
}


def _placements(spec: Any) -> list[tuple[str, str]]:
    """``(position, where)`` of each placement in an attention spec (read by visattn's own
    :func:`~visattn.models.placement.normalize_placements`), the stages of entries with the same
    position and blocks merged (``("stage", "after stages 1, 2")``)."""
    from visattn.models.placement import normalize_placements

    merged: dict[tuple[str, Any, bool], list[int]] = {}
    for p in normalize_placements(spec):
        every = p.stages == "all"
        merged.setdefault((p.position, p.blocks, every), []).extend([] if every else p.stages)
    out = []
    for (position, blocks, _), stages in merged.items():
        listed = ", ".join(str(s) for s in stages)
        plural = "s" if len(stages) > 1 else ""
        if position == "stage":
            out.append(
                (position, f"after stage{plural} {listed}" if stages else "after every stage")
            )
            continue
        if blocks in ("first", "last"):
            which = f"the {blocks} block"
        elif blocks == "all":
            which = "every block"
        else:
            which = f"blocks {', '.join(str(b) for b in blocks)}"
        out.append((position, f"{which} of stage{plural} {listed}" if stages else which))
    return out


def _describe(variant: Any, network: str = "ResNet-20") -> tuple[str, str]:
    """``(label, family)`` of a sweep variant, from its attention spec and the registry: the
    blocks and where they sit (``+ `simam` at `inner`, every block``)."""
    import visattn

    if variant.match is not None:
        return f"{network}, wider, at `{variant.match[1]}`'s {variant.match[0]}", "control"
    spec = variant.overrides.get("model.attention")
    names = sorted(set(_attention_names(spec)))
    if not names:
        return network, "none"
    families = sorted({visattn.block_info(n).family for n in names})
    where = "; ".join(f"`{p}`, {w}" for p, w in _placements(spec))
    return "+ " + ", ".join(f"`{n}`" for n in names) + f" at {where}", "/".join(families)


def read_steps(path: Path = STEPS) -> dict[str, float]:
    """``{variant: step time / the plain network's}`` from bench_steps.py's CSV ({} if none)."""
    if not path.is_file():
        return {}
    with path.open() as f:
        return {r["variant"]: float(r["ratio"]) for r in csv.DictReader(f)}


def build_rows(
    results: Path = RESULTS, steps: Path | None = STEPS, regime: Regime = REGIMES[0]
) -> tuple[list[Row], dict[tuple[str, str], Row], dict]:
    """The rows of ``regime``'s table (sorted by mean, best first; its results read from
    ``results``), the comparisons of :data:`PAIRS` whose both sides have finished runs (each a
    :class:`Row` of differences) and facts for the text. Holm's correction runs over the
    table's own comparisons. A regime without a ``results.csv`` yet has no rows."""
    from visattn.ablate.job import read_marker, spent, spent_cpu
    from visattn.ablate.report import compare, summarize
    from visattn.ablate.results import read_results
    from visattn.ablate.runner import cost_note
    from visattn.ablate.stats import holm

    sweep = load_sweep_file(regime.sweep)
    variants = {v.name: v for v in sweep.variants}
    if (results / "results.csv").is_file():
        if regime.data is not None and not regime.data.is_dir():
            raise ValueError(
                f"{regime.title}: its data is not at {regime.data}; the width-matched "
                f"control's runs in {results} resolve with it (the network's class count)"
            )
        check_results(results, sweep, regime.extra)
        listed = read_results(results / "results.csv")
    else:
        listed = []
    markers = [read_marker(results / "runs" / r["run"]) for r in listed]
    # what each run wrote when it finished, never results.csv's editable copy (check_results)
    rows_in = [m["row"] for m in markers if m is not None]
    summaries = {s.name: s for s in summarize(rows_in)}
    ratios = read_steps(steps) if steps is not None else {}
    comparisons = compare(list(summaries.values()), regime.baseline, METRIC) if rows_in else {}
    rows = []
    for name, s in summaries.items():
        label, family = _describe(variants[name], regime.network)
        st = s.stats[METRIC]
        row = Row(
            name,
            label,
            family,
            s.stats["params"].mean,
            s.stats["macs"].mean,
            ratios.get(name, math.nan),
            100 * st.mean,
            100 * st.std,
            st.n,
        )
        c = comparisons.get(name)
        if c is not None:
            p = c.paired
            row.diff, row.low, row.high = 100 * p.diff, 100 * p.low, 100 * p.high
            row.pairs, row.detectable, row.p = p.n, 100 * p.detectable, p.t_p
        rows.append(row)
    pairs = {
        k: row
        for k, label in regime.pairs.items()
        if (row := _pair_row(summaries, k, label)) is not None
    }
    family = {r.variant: r.p for r in [*rows, *pairs.values()] if not math.isnan(r.p)}
    adjusted = holm(family)
    for r in [*rows, *pairs.values()]:
        r.holm = adjusted.get(r.variant, math.nan)
    rows.sort(key=lambda r: -r.mean)
    step_md = read_step_md(steps) if steps is not None else {}
    base_logs = _metric_logs(results, rows_in, regime.baseline)
    facts = {
        "planned": len(sweep.seeds) * len(sweep.variants),
        "ok": sum(r["status"] == "ok" for r in rows_in),
        "seeds": len(sweep.seeds),
        "comparisons": len(family),
        "train_acc": _final_train_acc(base_logs),
        "epochs": _epochs(base_logs),
        **step_facts(step_md),
        "step_elsewhere": _elsewhere(ratios, step_md),
        "unverified": _unverified(results, rows_in),
        "finished": {
            v: sum(r["variant"] == v and r["status"] == "ok" for r in rows_in) for v in variants
        },
        "compute": cost_note(spent(markers), spent_cpu(markers)),
    }
    return rows, pairs, facts


def load_sweep_file(path: Path = SWEEP) -> Any:
    """A table's sweep (the leaderboard's: :data:`SWEEP`)."""
    from visattn.ablate.sweep import load_sweep

    return load_sweep(path)


#: the columns that hold a fraction (an accuracy): a percentage or a count there is an error
FRACTIONS = ("val/acc", "val/acc_last", "test/acc")


def check_results(results: Path, sweep: Any, extra: Mapping[str, str] | None = None) -> None:
    """Refuse a ``results.csv`` the page would count wrong: a (variant, seed) twice, seeds
    compared as numbers (``0.0`` or `` 0`` beside ``0`` would count as another seed), a variant
    the sweep does not have, a row that is no run the sweep plans or whose seed or variant is
    not its run's, a row without a readable completion marker (a copied row: nothing says that
    run finished), an accuracy that is not a fraction in [0, 1] (``85.0`` for ``0.85``,
    ``0.85%``), or an ok run whose completion marker records other settings than the sweep's
    recipe gives it (a run trained with its own ``limit_train_batches`` would be published
    beside the others).

    Raises:
        ValueError: naming the file, the row (its line) and the column or the settings.
    """
    from visattn.ablate.job import CHANGED, completed

    path = results / "results.csv"
    with open(path, newline="") as f:
        raw = list(csv.DictReader(f))
    variants = {v.name for v in sweep.variants}
    seen: dict[tuple[str, str], int] = {}
    runs = {r.key: r for r in sweep.runs(results, dict(extra or {}))}
    for line, row in enumerate(raw, 2):
        where = f"{path} line {line}"
        key = (row.get("variant") or "", _seed(row.get("seed"), where))
        if key in seen:
            raise ValueError(
                f"{where}: {key[0]} seed {key[1]} is there twice (line {seen[key]} too); a "
                "second row would count as another seed: remove one"
            )
        seen[key] = line
        if key[0] not in variants:
            raise ValueError(
                f"{where}: variant {key[0]!r} is not one of {sweep.path.name}'s "
                f"({', '.join(variants)})"
            )
        _check_run(row, runs, results, where)
        for column in FRACTIONS:
            text = (row.get(column) or "").strip()
            if not text:
                continue
            try:
                value = float(text)
            except ValueError:
                value = math.nan
            if not 0.0 <= value <= 1.0:
                raise ValueError(
                    f"{where}, column {column}: {text!r} is not a fraction in [0, 1] (an "
                    "accuracy of 85% is 0.85)"
                )
    for line, row in enumerate(raw, 2):  # then the settings, which take a parse per run
        where = f"{path} line {line}"
        run = runs.get(row.get("run") or "")
        if row.get("status") == "ok" and run is not None:
            _, why = completed(run, results)
            if why.startswith(CHANGED):
                raise ValueError(
                    f"{where}: run {run.key} was trained with other settings than "
                    f"{sweep.path.name}'s recipe gives it ({why[len(CHANGED) :]}); the page "
                    "compares runs of one recipe: train it again with the sweep, or leave it out"
                )


def _seed(text: str | None, where: str) -> int:
    """A results.csv seed as the number it is (``0``, ``0.0`` and `` 0`` are one seed)."""
    try:
        value = float(text or "")
    except ValueError:
        value = math.nan
    if not value.is_integer():
        raise ValueError(f"{where}, column seed: {text!r} is not a whole number")
    return int(value)


def _check_run(row: Mapping[str, str], runs: Mapping[str, Any], results: Path, where: str) -> None:
    """Refuse a row that is not its own run's: no run the sweep plans, another seed or variant
    than its run's, or no readable completion marker (nothing the run wrote says it finished)."""
    from visattn.ablate.job import read_marker

    run = runs.get(row.get("run") or "")
    if run is None:
        raise ValueError(
            f"{where}: run {row.get('run')!r} is no run the sweep plans (<variant>/seed<k> for "
            "its variants and seeds): remove the row"
        )
    if (run.variant, run.seed) != (row.get("variant"), _seed(row.get("seed"), where)):
        raise ValueError(
            f"{where}: the row says {row.get('variant')} seed {row.get('seed')!r} for run "
            f"{run.key}: a copied or edited row; remove it"
        )
    if read_marker(results / "runs" / run.key) is None:
        raise ValueError(
            f"{where}: run {run.key} has no readable completion marker "
            f"({results / 'runs' / run.key / 'result.json'}): nothing says it finished, so the "
            "page cannot count it; run the sweep to train it, or remove the row"
        )


def _pair_row(summaries: Mapping[str, Any], pair: tuple[str, str], label: str) -> Row | None:
    """The paired comparison of one of :data:`PAIRS` (``None`` until both have runs)."""
    from visattn.ablate.stats import paired_ci

    a, b = pair
    if a not in summaries or b not in summaries:
        return None
    p = paired_ci(summaries[a].by_seed[METRIC], summaries[b].by_seed[METRIC])
    nan = math.nan
    row = Row(f"{a} - {b}", label, "", nan, nan, nan, nan, nan, 0)
    row.diff, row.low, row.high = 100 * p.diff, 100 * p.low, 100 * p.high
    row.pairs, row.detectable, row.p = p.n, 100 * p.detectable, p.t_p
    return row


def _unverified(results: Path, rows: Sequence[dict]) -> int:
    """How many finished runs read their data with the integrity check off (``data.verify``
    false in what their completion marker records: among its settings in markers written
    before the option counted as one that only changes how a run executes, among its
    ``execution`` options since)."""
    import json

    count = 0
    for r in rows:
        marker = results / "runs" / r["run"] / "result.json"
        if r["status"] == "ok" and marker.is_file():
            data = json.loads(marker.read_text())
            recorded = {**data.get("settings", {}), **(data.get("execution") or {})}
            count += recorded.get("data.verify") == "false"
    return count


def _metric_logs(results: Path, rows: Sequence[dict], variant: str) -> list[list[dict]]:
    """The rows of each committed metrics.csv of the variant's ok runs."""
    logs = []
    for r in rows:
        if r["variant"] != variant or r["status"] != "ok" or not r.get("metrics_csv"):
            continue
        path = results / r["metrics_csv"]
        if path.is_file():
            with path.open() as f:
                logs.append(list(csv.DictReader(f)))
    return logs


def _epochs(logs: Sequence[list[dict]]) -> int:
    """The epochs a variant's runs trained (the most any of their metrics.csv ``logs`` from
    :func:`_metric_logs`; 0 where none is committed)."""
    logged = [int(row["epoch"]) + 1 for log in logs for row in log]
    return max(logged, default=0)


def _final_train_acc(logs: Sequence[list[dict]]) -> float:
    """Mean over a variant's runs of the last epoch's training accuracy (in %), from their
    metrics.csv ``logs`` (:func:`_metric_logs`; nan where none is committed)."""
    values = []
    for log in logs:
        accs = [row["train/acc"] for row in log if row.get("train/acc")]
        if accs:
            values.append(100 * float(accs[-1]))
    return sum(values) / len(values) if values else math.nan


def read_step_md(path: Path) -> dict[str, str]:
    """What the ``.md`` bench_steps.py writes beside its CSV at ``path`` says about the run:
    ``cpu``, ``vector extensions``, ``others`` (cores other processes kept busy), ``batch``
    (``"128 x (3, 32, 32)"``), ``format`` (``"channels-last memory format"``); those it does
    not say are absent."""
    md = path.with_suffix(".md")
    found = {}
    for line in md.read_text().splitlines() if md.is_file() else []:
        key, _, value = line.removeprefix("- ").partition(":")
        if line.startswith("- ") and key in ("cpu", "vector extensions"):
            found[key] = value.strip()
        elif key == OTHERS:
            found["others"] = value.split()[0]
        elif m := re.match(r"Batch (\d+ x \([^)]*\))(?:, (.+?))?, \d+ rounds", line):
            found["batch"] = m[1]
            if m[2] and "memory format" in m[2]:
                found["format"] = m[2]
    return found


def step_facts(found: Mapping[str, str]) -> dict[str, str]:
    """What a table's step sentences say of :func:`read_step_md`'s ``found``: where the steps
    were timed, on which CPU, at which batch and in which memory format, or that the file does
    not say."""
    return {
        "step_run": _step_run(found),
        "step_cpu": found.get("cpu", "a machine not recorded"),
        "step_batch": found.get("batch", "a batch not recorded"),
        "step_format": found.get("format", "memory format not recorded"),
    }


def _step_setting(facts: Mapping[str, str]) -> str:
    """What every table's step time was measured at (:func:`step_facts`): "batch 128 x
    (3, 32, 32), channels-last memory format, one thread"."""
    return f"batch {facts['step_batch']}, {facts['step_format']}, one thread"


def _elsewhere(ratios: Mapping[str, float], found: Mapping[str, str]) -> str:
    """How the step-time ratios moved on the other CPUs of :data:`OTHER_STEPS` (files of
    another machine than ``found``'s): the largest change, and where it came from; ``""``
    where no other CPU timed these networks."""
    said = []
    for path in OTHER_STEPS:
        cpu = read_step_md(path).get("cpu")
        theirs = read_steps(path)
        shared = [v for v in ratios if v in theirs]
        if not shared or cpu is None or cpu == found.get("cpu"):
            continue
        far = max(shared, key=lambda v: abs(theirs[v] - ratios[v]))
        said.append(
            f"on {cpu} (`{path.name}`) within {abs(theirs[far] - ratios[far]):.2f} of these, "
            f"the most for `{far.removeprefix('resnet20_')}` ({theirs[far]:.2f}x)"
        )
    if not said:
        return ""
    # those files were written by earlier code: a block's kernel may have changed since
    return "; the same networks timed earlier, with the code of then, " + "; ".join(said)


def _step_sentence(rows: Sequence[Row], facts: Mapping[str, str]) -> str:
    """A regime's last words on its step-time column: where it was measured, or that it was
    not."""
    if all(math.isnan(r.step) for r in rows):
        return "step time: - (not measured for this table)."
    return (
        "step time: one training step of the sweep's own network (forward, loss, backward, "
        f"SGD step; {_step_setting(facts)}) against the plain network's, every variant measured "
        f"interleaved in {facts['step_run']}; - where not measured."
    )


def _step_run(found: Mapping[str, str]) -> str:
    """Where and how the step times were measured (:func:`read_step_md`'s ``found``): "one
    idle run ... on CPU (extensions) ...", or what is known."""
    script = "run of `benchmarks/bench_steps.py`"
    if "cpu" not in found:
        return f"one {script} (its machine not recorded)"
    ext = found.get("vector extensions")
    cpu = f"{found['cpu']} ({ext})" if ext else found["cpu"]
    try:
        others = float(found.get("others", ""))
    except ValueError:  # not measured (no /proc/stat), or a file from before it was
        return f"one {script} on {cpu}"
    idle = "idle" if others <= IDLE_CORES else "busy"
    return f"one {idle} {script} on {cpu} (other processes: {others:.2f} cores)"


# --------------------------------------------------------------------------- formatting


def _f(x: float, digits: int = 2, sign: bool = False) -> str:
    if math.isnan(x):
        return "-"
    return f"{x:+.{digits}f}" if sign else f"{x:.{digits}f}"


def _count(x: float) -> str:
    if math.isnan(x):
        return "-"
    return f"{x / 1e6:.2f}M" if x >= 1e6 else f"{x / 1e3:.1f}K"


def _p(x: float) -> str:
    from visattn.ablate.report import format_p

    return format_p(x)


def _delta(r: Row) -> str:
    if r.family == "none":  # the plain network
        return "baseline"
    if r.pairs < 2:  # a difference without an interval
        return f"{_f(r.diff, sign=True)} (1 pair, no interval)" if not math.isnan(r.diff) else "-"
    text = f"{_f(r.diff, sign=True)} [{_f(r.low, sign=True)}, {_f(r.high, sign=True)}]"
    return f"**{text}**" if r.resolved else text


def _step(r: Row) -> str:
    return "-" if math.isnan(r.step) else f"{_f(r.step)}x"


def _acc(r: Row) -> str:
    return f"{_f(r.mean)} ± {_f(r.std)}" if r.n > 1 else _f(r.mean)


def _resolved(r: Row) -> str:
    if r.family == "none":
        return ""
    if r.pairs < 2:
        return "-"
    return "**yes**" if r.resolved else "no"


def _seeds(r: Row, seeds: int) -> str:
    return f"{r.n}" if r.n == seeds else f"{r.n} of {seeds}"


def _line(cells: Sequence[str]) -> str:
    return "| " + " | ".join(cells) + " |"


def full_table(rows: Sequence[Row], seeds: int, split: str = "test") -> list[str]:
    head = [
        "#",
        "variant",
        "family",
        "params",
        "MACs",
        "step time",
        f"{split} acc (%)",
        "seeds",
        "Δ paired (pp) [95% CI]",
        "detectable Δ",
        "Holm p",
        "resolved",
    ]
    out = [_line(head), _line(["---"] * len(head))]
    for i, r in enumerate(rows, 1):
        out.append(
            _line(
                [
                    str(i),
                    f"`{r.variant}` ({r.label})",
                    r.family,
                    _count(r.params),
                    _count(r.macs),
                    _step(r),
                    _acc(r),
                    _seeds(r, seeds),
                    _delta(r),
                    _f(r.detectable),
                    _p(r.holm),
                    _resolved(r),
                ]
            )
        )
    return out


def readme_table(
    rows: Sequence[Row], pairs: Pairs, seeds: int, regime: Regime = REGIMES[0]
) -> list[str]:
    """The top rows, the plain network and the control, in the table's order (every row where
    that is all but a row or two: a table of at most ``README_TOP + 2`` variants is shown
    whole), then the comparisons between two variants (:data:`PAIRS`) that have pairs."""
    control = {regime.prefix + v[len(CIFAR_PREFIX) :] for v in CONTROL}
    top = rows if len(rows) <= README_TOP + 2 else rows[:README_TOP]
    keep = {r.variant for r in top} | {regime.baseline, *control}
    head = [
        "variant",
        "family",
        "params",
        "step time",
        f"{regime.split} acc (%)",
        "seeds",
        "Δ paired (pp) [95% CI]",
        "Holm p",
        "resolved",
    ]
    out = [_line(head), _line(["---"] * len(head))]
    for r in rows:
        if r.variant in keep:
            out.append(
                _line(
                    [
                        r.label,
                        r.family,
                        _count(r.params),
                        _step(r),
                        _acc(r),
                        _seeds(r, seeds),
                        _delta(r),
                        _p(r.holm),
                        _resolved(r),
                    ]
                )
            )
    for pair in pairs.values():
        if pair.pairs:
            cells = [pair.label, "", "", "", "", str(pair.pairs)]
            out.append(_line([*cells, _delta(pair), _p(pair.holm), _resolved(pair)]))
    return out


def _many(n: int, noun: str) -> str:
    """``1 seed``, ``5 seeds``."""
    return f"{n} {noun}{'' if n == 1 else 's'}"


def _control_sentence(rows: Sequence[Row], control: Row | None) -> str:
    by = {r.variant: r for r in rows}
    gsop, wide = (by.get(v) for v in CONTROL)
    if gsop is None or wide is None or control is None:
        return "The capacity control has no finished pair yet."
    said = (
        f"ResNet-20 widened to GSoP's parameters ({_count(wide.params)} against "
        f"{_count(gsop.params)}) scores {_f(wide.mean)}% over {_many(wide.n, 'seed')}, "
        f"{_delta(wide)} points against the plain network; GSoP minus the control is "
        f"{_delta(control)} over {_many(control.pairs, 'pair')} (Holm p {_p(control.holm)}). "
    )
    if control.pairs < 2:
        return said + "One pair tells nothing yet; the sweep goes on."
    if control.resolved and control.diff > 0:
        return said + (
            "GSoP is resolved above a network of its own size: its gain over the plain network "
            "is not capacity alone."
        )
    if control.resolved:
        return said + "The widened network is resolved above GSoP: its gain is a capacity effect."
    if control.high < 0:
        return said + (
            "GSoP scores below the widened network, and the pairs' own 95% interval lies below "
            "0, but Holm's correction over every comparison on this page leaves the difference "
            "unresolved. What these seeds do show: GSoP's gain over the plain network is no "
            "larger than what its parameters give a plain, wider network, so it may be "
            "capacity, not second-order pooling."
        )
    return said + (
        "These seeds cannot tell GSoP from a plain network of its size: its resolved gain over "
        "the plain network may be capacity, not second-order pooling."
    )


def _baseline(rows: Sequence[Row]) -> Row | None:
    """The plain network's row (``None`` before its first finished run)."""
    return next((r for r in rows if r.variant == BASELINE), None)


def _blocks(rows: Sequence[Row]) -> list[Row]:
    """The rows that add a block (not the plain network, not the widened control)."""
    return [r for r in rows if r.family not in ("none", "control")]


def _at_paper_positions(rows: Sequence[Row]) -> list[Row]:
    """The blocks at their papers' positions: :func:`_blocks` less SimAM at ``inner`` once its
    twin at the authors' position has a finished pair."""
    wrong, right = SIMAM
    if any(r.variant == right and not math.isnan(r.diff) for r in rows):
        return [r for r in _blocks(rows) if r.variant != wrong]
    return _blocks(rows)


def _same_size_sentence(rows: Sequence[Row]) -> str:
    """The resolved blocks that add (almost) no parameters: capacity cannot explain their gain."""
    base = _baseline(rows)
    if base is None:
        return ""
    blocks = [r for r in _blocks(rows) if r.resolved]
    same = [r for r in blocks if r.params <= base.params * (1 + SAME_SIZE)]
    limit = f"at most {SAME_SIZE:.0%} more parameters than the plain network"
    if not same:
        return f"No block with {limit} is resolved yet."
    off = {SIMAM[0]: " (at `inner`, not its paper's position)"}
    said = "; ".join(
        f"`{r.variant}`{off.get(r.variant, '')} {_delta(r)} ({_count(r.params)} parameters"
        + ("" if math.isnan(r.step) else f", {_f(r.step)}x the step time")
        + ")"
        for r in same
    )
    return (
        f"Resolved with {limit}: {said}. Added parameters cannot explain "
        + ("this gain; its cost" if len(same) == 1 else "these gains; their cost")
        + " is the step time."
    )


def _placement_bullet(
    rows: Sequence[Row], facts: Mapping[str, Any], moved: Row | None = None
) -> str:
    """What the positions in the variant column mean, and the one variant not at its paper's
    position (SimAM at ``inner``) with how far its twin at the authors' position has come and,
    given ``moved`` (the twin minus it), what the move does."""
    used = [p for p in POSITION_WORDS if any(f"`{p}`," in r.label for r in rows)]
    said = "; ".join(f"`{p}`: {POSITION_WORDS[p]}" for p in used)
    text = (
        f"- **placement** (in ResNet-20's BasicBlocks): {said}. Each block sits where its "
        "paper or the authors' code puts it"
    )
    wrong, right = SIMAM
    if any(r.variant == wrong for r in rows):
        done = facts["finished"].get(right, 0)
        text += (
            f", except `{wrong}`: `inner` was taken by mistake for the authors' position, which "
            f"is `prenorm` (their CIFAR and ImageNet code); `{right}` runs it there ("
            + (f"{done} of {facts['seeds']} seeds finished" if done else "not run yet")
            + ")"
        )
        if moved is not None and moved.pairs >= 2:
            text += (
                f"; `{right}` minus `{wrong}`: {_delta(moved)} over {moved.pairs} pairs "
                f"(Holm p {_p(moved.holm)}, {'resolved' if moved.resolved else 'unresolved'})"
            )
            if moved.resolved:
                better, worse = ("inner", "prenorm") if moved.diff < 0 else ("prenorm", "inner")
                text += (
                    f": on this recipe SimAM gains more at `{better}` than at `{worse}`, so a "
                    "block's row depends on where it sits as well as on what it computes"
                )
    return text + "."


def _families_sentence(rows: Sequence[Row]) -> str:
    """How many rows each of the registry's families has, and why a block sits where it does."""
    counts: dict[str, int] = {}
    for r in _blocks(rows):
        counts[r.family] = counts.get(r.family, 0) + 1
    listed = ", ".join(f"{f} {n}" for f, n in sorted(counts.items()))
    return (
        f"- **family**: the registry's (`visattn.block_info(name).family`; rows here: {listed}). A "
        "block whose weights vary over both channels and positions is hybrid: SimAM (one weight "
        "per element) and coordinate attention (a channel weight per row and per column) are "
        "filed there, not under spatial."
    )


def _across_families(rows: Sequence[Row]) -> list[str]:
    """A line a family: its blocks at their papers' positions, its best one, which are resolved
    (with the parameters they add); then what one to a few blocks a family can say."""
    base = _baseline(rows)
    by_family: dict[str, list[Row]] = {}
    for r in _at_paper_positions(rows):
        if not math.isnan(r.diff):
            by_family.setdefault(r.family, []).append(r)
    if not by_family:
        return ["No block has a finished pair yet."]

    def name(r: Row) -> str:
        return f"`{r.variant.removeprefix('resnet20_')}`"

    def added(r: Row) -> str:
        if base is None:
            return ""
        if r.params == base.params:
            return " (no added parameters)"
        return f" ({(r.params / base.params - 1) * 100:+.0f}% parameters)"

    lines = []
    for family, members in sorted(by_family.items()):
        members = sorted(members, key=lambda r: -r.diff)
        best, resolved = members[0], [r for r in members if r.resolved]
        said = ", ".join(name(r) + added(r) for r in resolved) or "none"
        if len(members) == 1:
            head = f"- **{family}** (1 block): {name(best)} {_delta(best)}"
        else:
            head = (
                f"- **{family}** ({len(members)} blocks: {', '.join(name(r) for r in members)}): "
                f"best {name(best)} {_delta(best)}"
            )
        lines.append(f"{head}; resolved: {said}.")
    bests = [max(r.diff for r in m) for m in by_family.values()]
    spread = {f: max(r.diff for r in m) - min(r.diff for r in m) for f, m in by_family.items()}
    widest = max(spread, key=spread.get)
    inside = [r.diff for r in by_family[widest]]
    sizes = sorted({len(m) for m in by_family.values()})
    lines += [
        "",
        f"With {sizes[0]} to {sizes[-1]} blocks a family, this compares blocks, not families: "
        f"the {widest} blocks alone range from {min(inside):+.2f} to {max(inside):+.2f} points, "
        f"the families' best blocks from {min(bests):+.2f} to {max(bests):+.2f}, so a family's "
        "row says what its best block did on this recipe, not what the family does.",
    ]
    if len(_at_paper_positions(rows)) < len(_blocks(rows)):
        lines[-1] += f" (`{SIMAM[0]}`, off its paper's position, is left out of this section.)"
    return lines


def _limits(rows: Sequence[Row], pairs: Pairs, facts: Mapping[str, Any]) -> list[str]:
    """The section "What this table can and cannot tell"."""
    train = facts["train_acc"]
    base = _baseline(rows)
    resolved = [r for r in [*rows, *pairs.values()] if r.resolved]
    return [
        "## What this table can and cannot tell",
        "",
        "- It ranks blocks at one short recipe. Ten epochs underfit ResNet-20: the plain "
        f"network's final training accuracy is {_f(train)}% against "
        f"{_f(base.mean if base else math.nan)}%"
        " on the test set (with augmentation and label smoothing on the training side), so "
        "the networks are far from converged, and a block that speeds up early learning is "
        "favoured over one that helps a converged network. Gains could differ, in size and "
        "order, in full training.",
        f"- {len(resolved)} of {facts['comparisons']} comparisons "
        f"{'is' if len(resolved) == 1 else 'are'} resolved. An unresolved "
        "row is not evidence that a block does nothing: its detectable Δ says the size these "
        "seeds could have found.",
        *(
            [
                f"- The data: {facts['unverified']} of {facts['ok']} runs read a re-packed copy "
                "of CIFAR-10 with the integrity check off (`data.verify=false`): its pixels were "
                f"{REPACKED_COPY}, so absolute accuracies sit below what those files "
                "give. Every run read the same copy, so the paired differences compare like "
                "with like."
            ]
            if facts["unverified"]
            else []
        ),
        "- One network, one data set, one resolution (feature maps of 32 to 8 px): blocks "
        "designed for large maps (non-local, BAM's dilated branch) are tested far from their "
        "design point, and none of this says how a block behaves at 224 px.",
        "- Anchors, with their regimes: He et al. (2016) ResNet-20 91.25% (164 epochs, 64k "
        "steps); the SENet paper, SE-ResNet-110 on CIFAR-10, error 6.37% -> 5.21%; timm's "
        "same-recipe ImageNet runs of ResNet-33ts: SE +1.16, ECA +0.87, GC +0.86 points top-1. "
        "None of them is this recipe; they bound what a longer schedule might show.",
        "",
    ]


def _reproduce() -> list[str]:
    """The section "Reproduce": the official files into a new folder, or this table continued."""
    return [
        "## Reproduce",
        "",
        "From the repository's root. On the official CIFAR-10 files (`DATA` holds "
        "`cifar-10-batches-py/`; add `--set data.download=true` to fetch them there), every "
        "run trains anew, into a folder of your own:",
        "",
        "```bash",
        "python -m visattn.ablate configs/ablations/cifar10_cpu.yaml --out runs/cifar10_cpu \\",
        "    --jobs 2 --threads 1 --set data.root=DATA",
        "```",
        "",
        "To continue or extend this table, give its folder and its settings, the integrity "
        "switch included: runs whose completion marker is committed stay finished, a cut-off "
        "run resumes from its checkpoint where that is on the machine, and "
        "`python docs/make_leaderboard.py` writes this page, its plots and the README's table "
        "again:",
        "",
        "```bash",
        "python -m visattn.ablate configs/ablations/cifar10_cpu.yaml \\",
        "    --out benchmarks/results/cifar10_cpu --jobs 2 --threads 1 \\",
        "    --set data.root=DATA --set data.verify=false",
        "```",
        "",
    ]


#: a table built: its regime, rows, pairs and facts (:func:`build_rows`)
Table = tuple[Regime, Sequence[Row], Pairs, Mapping[str, Any]]


def _comparisons(table: Table) -> dict[str, Row]:
    """A table's comparisons by their name in every regime (:meth:`Regime.comparison`): each
    variant against the plain network, and the pairs."""
    regime, rows, pairs, _ = table
    found = [r for r in rows if r.family != "none" and not math.isnan(r.diff)]
    return {regime.comparison(r.variant): r for r in [*found, *pairs.values()]}


#: what the re-packed copy of CIFAR-10 (read with ``data.verify=false``) is, from its data
#: README: the one place the page's two mentions of it take their words from
REPACKED_COPY = (
    "re-encoded from a JPEG (quality 75) copy, about 5.8/255 mean absolute pixel error "
    "against the official files"
)
#: the test accuracy a longer CIFAR-10 schedule aims the plain ResNet-20 at: converged, it
#: sits at 91.25% (He et al. 2016, 164 epochs) to 92.6% (later reproductions)
CONVERGED_AIM = 90.0
#: He et al.'s schedule for ResNet-20 on CIFAR-10 (64k steps of batch 128)
ANCHOR_EPOCHS = 164
#: the final training accuracy (%) below which a network has not fitted CIFAR-10's training
#: images: converged ResNets fit them to 99-100%
FITTED = 99.0


def _seeds_word(n: int) -> str:
    return f"{n} seed{'' if n == 1 else 's'}"


def _against_the_aim(regime: Regime, rows: Sequence[Row], facts: Mapping[str, Any]) -> list[str]:
    """A CIFAR-10 regime's plain network against :data:`CONVERGED_AIM`: by how much it stops
    short, and why as far as the files say (its final training accuracy, the schedule, the
    data copy)."""
    base = _baseline(rows)
    if regime.prefix != CIFAR_PREFIX or base is None:
        return []
    head = f"The plain network scores {_f(base.mean)}% on the test set ({_seeds_word(base.n)})"
    if base.mean >= CONVERGED_AIM:
        return [f"{head}, at or above {CONVERGED_AIM:g}%, near a converged ResNet-20."]
    why = [
        f"{head}, {_f(CONVERGED_AIM - base.mean)} points short of {CONVERGED_AIM:g}%, "
        f"near which a converged ResNet-20 sits ({ANCHOR_EPOCHS} epochs in He et al.)."
    ]
    train, epochs = facts["train_acc"], facts["epochs"]
    if not math.isnan(train) and train < FITTED and epochs:
        why.append(
            f"Its final training accuracy is {_f(train)}% (augmented images, label smoothing): "
            f"{epochs} epochs, {epochs / ANCHOR_EPOCHS:.0%} of that schedule, leave it short of "
            "fitting its training images."
        )
    if facts["unverified"]:
        why.append(
            f"{facts['unverified']} of {facts['ok']} runs read the re-packed copy of CIFAR-10 "
            f"(its pixels {REPACKED_COPY}), which puts absolute accuracies below what those "
            "files give."
        )
    return [" ".join(why)]


def regime_section(table: Table) -> list[str]:
    """A regime's own table under its heading, or what is planned where nothing finished."""
    regime, rows, pairs, facts = table
    sweep = load_sweep_file(regime.sweep)
    where = f"`{regime.sweep.relative_to(ROOT)}`"
    lines = [f"## {regime.title}", "", f"{sweep.description} Sweep: {where}.", ""]
    if not rows:
        return [
            *lines,
            f"Runs: 0 of {facts['planned']} finished: this table fills in as the sweep runs.",
            "",
        ]
    between = "; ".join(r.label for r in pairs.values() if not math.isnan(r.p))
    return [
        *lines,
        f"Runs: {facts['ok']} of {facts['planned']} finished ({facts['seeds']} seeds per "
        f"variant planned{': ' + regime.seeds_why if regime.seeds_why else ''}).",
        "",
        *full_table(rows, facts["seeds"], regime.split),
        "",
        *(f"- {line}" for line in facts["compute"]),
        *(
            f"- {r.label}: {_delta(r)}"
            + (f" over {r.pairs} pairs (Holm p {_p(r.holm)})." if r.pairs >= 2 else ".")
            for r in pairs.values()
        ),
        *(f"- {line}" for line in _against_the_aim(regime, rows, facts)),
        "",
        (
            f"Holm's correction here runs over this table's {facts['comparisons']} comparisons "
            f"(each variant against the plain network{'; ' + between if between else ''})"
            if facts["comparisons"]
            else "No comparison yet: a variant is compared once it has a pair with the plain "
            "network (Holm's correction then runs over the table's comparisons)"
        )
        + "; "
        + _step_sentence(rows, facts),
        "",
    ]


def _cell(r: Row | None, planned: bool) -> str:
    if r is None:  # no pair finished: in the table's sweep, or not part of it
        return "none finished yet" if planned else "not run"
    return _delta(r) if r.pairs < 2 else f"{_delta(r)} ({r.pairs} pairs)"


def _planned(regime: Regime, variants: Collection[str], name: str) -> bool:
    """Whether the regime's sweep (its ``variants``) has both sides of the comparison ``name``
    (:meth:`Regime.comparison`; a lone variant is compared with the plain network)."""
    sides = name.split(" - ") if " - " in name else [name, regime.comparison(regime.baseline)]
    return all(regime.prefix + side in variants for side in sides)


def _sign(cells: Sequence[Row]) -> str:
    """Whether every table with two or more pairs gives the comparison the same sign."""
    paired = [r for r in cells if r.pairs >= 2]
    signs = {math.copysign(1, r.diff) for r in paired}
    if len(paired) < 2:
        return "one table"
    return "yes" if len(signs) == 1 else "**no: flips**"


def _everywhere(paired: Sequence[Row]) -> str:
    """Whether every table with two or more pairs resolves the comparison (two at least)."""
    if len(paired) < 2:
        return "one table"
    return "**yes**" if all(r.resolved for r in paired) else "no"


@functools.cache
def _regime_rows(regime: Regime) -> tuple[Row, ...]:
    """A regime's rows (:func:`build_rows`), built once per process: the docs build asks for
    every block's evidence, and each table's rows are the same for all of them (a table that
    cannot be built raises each time it is asked)."""
    return tuple(build_rows(regime.results, regime.steps, regime)[0])


def block_evidence(block: str) -> list[str]:
    """A block's evidence on the leaderboard, for its gallery page (``docs/gen_pages.py``): for
    each table, each variant whose attention is ``block`` alone, with its paired Δ [95% CI]
    against the plain network, its Holm p (and whether it resolves) and its step-time ratio,
    all from :func:`build_rows` (the files the page is written from); a block in no table says
    so. A table whose data is not on this machine (the Imagenette control resolves with it) is
    named as not available here."""
    from visattn._values import first_line

    lines = []
    link = "../leaderboard.md"
    for regime in REGIMES:
        variants = load_sweep_file(regime.sweep).variants
        mine = {
            v.name
            for v in variants
            if v.match is None
            and set(_attention_names(v.overrides.get("model.attention"))) == {block}
        }
        if not mine:
            continue
        try:
            rows = {r.variant: r for r in _regime_rows(regime)}
        except (ValueError, FileNotFoundError) as e:
            lines.append(f"- **{regime.title}**: not available here ({first_line(e)}).")
            continue
        for name in sorted(mine):
            r = rows.get(name)
            label = _describe(next(v for v in variants if v.name == name), regime.network)[0]
            if r is None:
                lines.append(f"- **{regime.title}**, {label}: no run finished yet.")
                continue
            verdict = "resolved" if r.resolved else "not resolved"
            lines.append(
                f"- **{regime.title}**, {label}: Δ {_delta(r).replace('**', '')} pp against "
                f"the plain {regime.network} ({_seeds(r, r.n)} seed{'s' * (r.n != 1)}), "
                f"Holm p {_p(r.holm)} ({verdict}); step time {_step(r)}."
            )
    if not lines:
        return [f"Not in any table of the [leaderboard]({link}) yet."]
    return [
        f"From the [leaderboard]({link}) (generated from its `results.csv` files; Holm's "
        "correction within each table):",
        "",
        *lines,
    ]


def _capacity_across(tables: Sequence[Table]) -> list[str]:
    """Whether GSoP's gain is capacity, table by table: GSoP minus its width-matched control,
    in words that follow the figures' sign and resolution."""
    name = REGIMES[0].comparison(" - ".join(CONTROL))
    said = []
    for table in tables:
        r = _comparisons(table).get(name)
        if r is None or r.pairs < 2:
            continue
        if r.resolved:
            verdict = (
                "GSoP gains more than its parameters give a wider plain network"
                if r.diff > 0
                else "GSoP gains less than its parameters give a wider plain network"
            )
        else:
            verdict = "unresolved: these pairs cannot tell GSoP from its parameters"
        said.append(f"{table[0].title}: {_delta(r)} over {r.pairs} pairs, {verdict}")
    if not said:
        return []
    return ["GSoP minus its width-matched control, by table: " + "; ".join(said) + "."]


def across_regimes(tables: Sequence[Table]) -> list[str]:
    """The section "What holds across regimes": every comparison resolved in any table, with
    its Δ in every table where it ran, whether its sign holds and where it resolves; and the
    plain network's accuracy at each schedule beside the anchor."""
    found = [_comparisons(t) for t in tables]
    planned = [{v.name for v in load_sweep_file(t[0].sweep).variants} for t in tables]
    names = [
        n
        for n in dict.fromkeys(n for f in found for n in f)
        if any(n in f and f[n].resolved for f in found)
    ]
    head = [
        "comparison",
        *(t[0].title for t in tables),
        "same sign",
        "resolved in",
        "resolved in every table",
    ]
    lines = [
        "## What holds across regimes",
        "",
        "Each comparison resolved in any table, with its paired Δ (pp) [95% CI] in every table "
        "where it ran (Holm's correction within each table); **same sign**: whether every "
        "table with two or more pairs gives it the same sign (agreeing signs alone are no "
        "replication); **resolved in**: how many of those tables resolve it; **resolved in "
        "every table**: whether each of them does, the one column that says a finding "
        "replicates (a single pair has no interval, so it neither counts for a sign nor "
        "resolves).",
        "",
        _line(head),
        _line(["---"] * len(head)),
    ]
    for name in names:
        cells = [f.get(name) for f in found]
        ran = [c for c in cells if c is not None]
        paired = [c for c in ran if c.pairs >= 2]
        label = f"`{name}` - `none`" if " - " not in name else f"`{name.replace(' - ', '` - `')}`"
        lines.append(
            _line(
                [
                    label,
                    *(
                        _cell(c, _planned(t[0], variants, name))
                        for t, variants, c in zip(tables, planned, cells, strict=True)
                    ),
                    _sign(ran),
                    f"{sum(c.resolved for c in paired)} of {len(paired)}",
                    _everywhere(paired),
                ]
            )
        )
    lines += [
        "",
        "Every comparison in every table at a glance (resolved cells solid, unresolved ones "
        "faint, a comparison a table did not run blank):",
        "",
        f"![what holds across regimes]({REGIMES_PNG})",
        "",
        *_capacity_across(tables),
    ]
    plain = [(t[0].title, _baseline(t[1])) for t in tables if t[0].prefix == CIFAR_PREFIX]
    said = "; ".join(
        f"{title}: {_f(b.mean)}% ({_seeds_word(b.n)})" if b is not None else f"{title}: not run yet"
        for title, b in plain
    )
    lines += [
        "",
        f"The plain ResNet-20 on the CIFAR-10 test set: {said}. Anchors: He et al. (2016) "
        "91.25% at 164 epochs (64k steps); later reproductions 91.7-92.6% at 164-200 epochs.",
        "",
    ]
    return lines


def page(
    rows: Sequence[Row], pairs: Pairs, facts: Mapping[str, Any], others: Sequence[Table] = ()
) -> str:
    """The page: the leaderboard (``rows``), then each of ``others``' tables and what holds
    across them all."""
    seeds = facts["seeds"]
    tables: list[Table] = [(REGIMES[0], rows, pairs, facts), *others]
    between = "; ".join(r.label for r in pairs.values() if not math.isnan(r.p))
    lines = [
        "# Leaderboard: the zoo on CIFAR-10, and what holds on a longer schedule and on Imagenette",
        "",
        "<!-- generated by docs/make_leaderboard.py from the results.csv of "
        + ", ".join(f"{r.results.relative_to(ROOT)}/" for r in REGIMES)
        + "; do not edit by hand -->",
        "",
        "Every block on the same recipe, data and seeds, in the same network: ResNet-20 trained "
        "on all 50,000 CIFAR-10 training images for 10 epochs of one-cycle SGD (3,910 steps: "
        "Nesterov, batch 128, peak lr 0.1, label smoothing 0.1, pad-crop and flip), each block "
        "at its paper's position (`configs/ablations/cifar10_cpu.yaml`), each run's final "
        "network scored on the 10,000 test images. Runs pair by seed: the same seed gives every "
        "variant the same data order and augmentation.",
        "",
        f"Runs: {facts['ok']} of {facts['planned']} finished "
        f"({seeds} seeds per variant planned); a variant with fewer seeds says so in its "
        "`seeds` column, and its interval is wider for it.",
        "",
        *full_table(rows, seeds),
        "",
        "- **step time**: one training step (forward, loss, backward, SGD step; "
        f"{_step_setting(facts)}) against the plain network's, every variant measured "
        f"interleaved in {facts['step_run']}{facts['step_elsewhere']}; - where not measured; "
        "MACs: per image, attention "
        "products included.",
        _placement_bullet(rows, facts, pairs.get(SIMAM[::-1])),
        _families_sentence(rows),
        "- **Δ paired**: the mean of the per-seed differences to the plain network with its 95% "
        "paired-t interval; **detectable Δ**: the smallest true difference these pairs find with "
        "80% power; **Holm p**: the paired-t p-value adjusted by Holm's step-down method over "
        f"all {facts['comparisons']} comparisons on this page (each variant against the plain "
        f"network{'; ' + between if between else ''}); **resolved**: Holm p below 0.05.",
        *(f"- {line}" for line in facts["compute"]),
        "",
        "## The capacity control",
        "",
        _control_sentence(rows, pairs.get(CONTROL)),
        "",
        _same_size_sentence(rows),
        "",
        "## Across the families",
        "",
        *_across_families(rows),
        "",
        *_limits(rows, pairs, facts),
        *(line for table in others for line in regime_section(table)),
        *(across_regimes(tables) if others else []),
        *_reproduce(),
        "## Plots",
        "",
        "![paired differences](assets/leaderboard/paired_diff.png)",
        "",
        "![accuracy against cost](assets/leaderboard/acc_vs_cost.png)",
        "",
    ]
    return "\n".join(lines)


def plots(rows: Sequence[Row], pairs: Pairs | None = None) -> dict[str, bytes]:
    """The forest plot and accuracy against cost, as PNG bytes."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out = {}
    shown = [r for r in rows if r.variant != BASELINE and not math.isnan(r.diff)][::-1]
    between = [r for r in (pairs or {}).values() if not math.isnan(r.diff)][::-1]
    shown = between + shown
    fig, ax = plt.subplots(figsize=(7, 0.4 * len(shown) + 1.4))
    for i, r in enumerate(shown):
        if r.pairs >= 2:
            ax.errorbar(
                r.diff,
                i,
                xerr=[[r.diff - r.low], [r.high - r.diff]],
                fmt="o",
                color="C3" if r.resolved else "C0",
                capsize=3,
            )
        else:
            ax.plot(r.diff, i, "x", color="C7")
    ax.axvline(0, color="k", lw=0.8)
    names = [r.variant.replace("resnet20_", "") for r in shown]
    if between:  # differences between two variants, not to the plain network: set apart
        ax.axhline(len(between) - 0.5, color="C7", lw=0.8, ls="--")
    ax.set_yticks(range(len(shown)), names)
    ax.set_xlabel(
        "Δ test acc (pp), paired, 95% CI, red: resolved (Holm)\n"
        "above the dashed line: against plain ResNet-20\n"
        "below it: the first named minus the second"
    )
    out["paired_diff.png"] = _png(fig, plt)
    fig, axes = plt.subplots(1, 2, figsize=(11, 4.6), sharey=True)
    families = sorted({r.family for r in rows})
    colour = {f: f"C{i}" for i, f in enumerate(families)}
    for ax, key, label in (
        (axes[0], "step", "training step time / plain"),
        (axes[1], "macs", "MACs per image (M)"),
    ):
        drawn = [r for r in rows if not math.isnan(getattr(r, key))]
        xs = [getattr(r, key) / (1e6 if key == "macs" else 1) for r in drawn]
        for r, x in zip(drawn, xs, strict=True):
            ax.errorbar(
                x,
                r.mean,
                yerr=r.std,
                fmt="s" if r.variant == BASELINE else "o",
                color=colour[r.family],
                capsize=2,
            )
        low, high = min(r.mean - r.std for r in drawn), max(r.mean + r.std for r in drawn)
        ax.set_ylim(low - 0.05 * (high - low), high + 0.12 * (high - low))
        x_span = (max(xs) - min(xs)) or 1.0
        label_ys = spread_labels(
            xs, [r.mean for r in drawn], x_near=0.06 * x_span, gap=0.045 * (high - low)
        )
        for r, x, y in zip(drawn, xs, label_ys, strict=True):
            ax.annotate(
                r.variant.removeprefix("resnet20_"),
                (x, r.mean),
                xytext=(x + 0.012 * x_span, y),
                textcoords="data",
                fontsize=7,
                va="center",
                arrowprops=dict(arrowstyle="-", lw=0.4, color="0.6") if y != r.mean else None,
            )
        ax.set_xlim(min(xs) - 0.04 * x_span, max(xs) + 0.16 * x_span)
        ax.set_xlabel(label)
    axes[0].set_ylabel("test acc (%), mean ± std over seeds")
    handles = [plt.Line2D([], [], marker="o", ls="", color=colour[f], label=f) for f in families]
    axes[1].legend(handles=handles, title="family", fontsize=7, title_fontsize=7, loc="lower right")
    out["acc_vs_cost.png"] = _png(fig, plt)
    return out


def regime_grid(tables: Sequence[Table]) -> list[tuple[str, list[Row | None]]]:
    """The picture of what holds across regimes as data: every comparison of any table (each
    variant against the plain network, and the pairs), in the order the tables first give
    them, with its row in each table (``None``: not run there, or no pair finished)."""
    found = [_comparisons(t) for t in tables]
    names = dict.fromkeys(n for f in found for n in f)
    return [(name, [f.get(name) for f in found]) for name in names]


#: how opaque a cell of the regimes picture is: resolved (Holm p < 0.05), unresolved, one pair
CELL_ALPHA = {"resolved": 1.0, "unresolved": 0.3, "one pair": 0.12}


def cell_state(r: Row | None) -> str | None:
    """A regimes picture cell's state (a key of :data:`CELL_ALPHA`; ``None``: no cell)."""
    if r is None:
        return None
    if r.pairs < 2:
        return "one pair"
    return "resolved" if r.resolved else "unresolved"


def regimes_plot(tables: Sequence[Table]) -> bytes:
    """Variants down, regimes across: each cell the paired Δ with its 95% interval, coloured
    by the Δ (red above the plain network, blue below), unresolved cells faint, a single pair
    fainter still, a comparison a table did not run left blank."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.colors import TwoSlopeNorm

    grid = regime_grid(tables)
    span = max((abs(r.diff) for _, cells in grid for r in cells if r is not None), default=1.0)
    norm = TwoSlopeNorm(vcenter=0.0, vmin=-span, vmax=span)
    cmap = plt.get_cmap("RdBu_r")
    fig, ax = plt.subplots(figsize=(2.6 * len(tables) + 2.4, 0.42 * len(grid) + 1.6))
    for i, (_, cells) in enumerate(grid):
        for j, r in enumerate(cells):
            state = cell_state(r)
            if state is None:
                ax.text(j, i, "not run", ha="center", va="center", fontsize=7, color="0.6")
                continue
            alpha = CELL_ALPHA[state]
            ax.add_patch(
                plt.Rectangle((j - 0.5, i - 0.5), 1, 1, color=cmap(norm(r.diff)), alpha=alpha)
            )
            text = (
                f"{r.diff:+.2f} [{r.low:+.2f}, {r.high:+.2f}]"
                if r.pairs >= 2
                else f"{r.diff:+.2f} (1 pair)"
            )
            ax.text(
                j,
                i,
                text,
                ha="center",
                va="center",
                fontsize=7,
                fontweight="bold" if state == "resolved" else "normal",
                alpha=1.0 if state == "resolved" else 0.55,
                # white on the darkest cells, which only resolved ones are
                color="white" if alpha == 1.0 and abs(norm(r.diff) - 0.5) > 0.3 else "black",
            )
    ax.set_xlim(-0.5, len(tables) - 0.5)
    ax.set_ylim(len(grid) - 0.5, -0.5)
    ax.set_xticks(range(len(tables)), [t[0].title for t in tables], fontsize=8)
    ax.xaxis.tick_top()
    labels = [n if " - " in n else f"{n} - none" for n, _ in grid]
    ax.set_yticks(range(len(grid)), labels, fontsize=8)
    ax.tick_params(length=0)
    for side in ax.spines.values():
        side.set_visible(False)
    ax.set_xlabel(
        "paired Δ accuracy (pp) [95% CI] against the plain network (or the second named);\n"
        "solid, bold: resolved (Holm p < 0.05 within its table); faint: unresolved; "
        "fainter: one pair",
        fontsize=8,
    )
    return _png(fig, plt)


def spread_labels(
    xs: Sequence[float], ys: Sequence[float], *, x_near: float, gap: float
) -> list[float]:
    """Heights for the points' labels, each as close to its point's ``y`` as can be while the
    labels of points less than ``x_near`` apart in ``x`` stay at least ``gap`` apart in ``y``
    (bottom to top: a label that would sit too close above a neighbour's moves up)."""
    order = sorted(range(len(ys)), key=lambda i: (ys[i], xs[i]))
    placed: dict[int, float] = {}
    for i in order:
        y = ys[i]
        for j in sorted(placed, key=placed.get):
            if abs(xs[i] - xs[j]) < x_near and abs(placed[j] - y) < gap:
                y = placed[j] + gap
        placed[i] = y
    return [placed[i] for i in range(len(ys))]


def _png(fig: Any, plt: Any) -> bytes:
    buf = io.BytesIO()
    fig.tight_layout()
    fig.savefig(buf, format="png", dpi=100, metadata={"Software": None})
    plt.close(fig)
    return buf.getvalue()


def readme_block(rows: Sequence[Row], pairs: Pairs, facts: Mapping[str, Any]) -> str:
    return "\n".join(
        [
            START,
            *readme_table(rows, pairs, facts["seeds"]),
            "",
            f"{facts['ok']} of {facts['planned']} runs finished; step time on one thread of "
            f"{facts['step_cpu']}; the full table (every variant, its MACs and detectable Δ), the "
            "capacity control and what the table can and cannot tell: "
            "[leaderboard](docs/leaderboard.md); every block in every regime at a glance: "
            f"[picture](docs/{REGIMES_PNG}).",
            END,
        ]
    )


def _anchor(title: str) -> str:
    """The page's anchor of a heading, as GitHub and mkdocs make it."""
    kept = "".join(c for c in title.lower() if c.isalnum() or c in " -")
    return kept.replace(" ", "-")


def regime_readme_block(table: Table) -> str:
    """A regime's README block: its compact table once every variant has
    ``regime.readme_seeds`` seeds (before that, how far it has come), GSoP against its control,
    and the link to its table on the page."""
    regime, rows, pairs, facts = table
    start, end = f"<!-- {regime.readme}:start -->", f"<!-- {regime.readme}:end -->"
    link = f"[leaderboard](docs/leaderboard.md#{_anchor(regime.title)})"
    enough = regime.readme_seeds
    waiting = [v for v, n in facts["finished"].items() if n < enough]
    shown = [r for r in rows if r.n >= enough]
    if regime.baseline in waiting or len(shown) < 2:
        body = [
            f"{facts['ok']} of {facts['planned']} runs finished; the table shows here once every "
            f"variant has {enough} seeds, and fills in on the {link} as it runs."
        ]
    else:
        later = (
            f"; {_many(len(waiting), 'variant')} with fewer than {enough} seeds so far "
            f"({', '.join(f'`{v}`' for v in waiting)}) show here once they have them"
            if waiting
            else ""
        )
        body = [
            *readme_table(shown, _shown_pairs(pairs, waiting), facts["seeds"], regime),
            "",
            f"{facts['ok']} of {facts['planned']} runs finished{later}; the full table and what "
            f"holds across regimes: {link}.",
        ]
    return "\n".join([start, *body, end])


def _shown_pairs(pairs: Pairs, waiting: Collection[str]) -> Pairs:
    """The comparisons of :data:`PAIRS` whose both sides have the seeds the README waits for."""
    return {k: r for k, r in pairs.items() if not set(k) & set(waiting)}


def with_readme_block(text: str, block: str, start: str = START, end: str = END) -> str:
    if start not in text or end not in text:
        raise ValueError(f"README.md has no {start} ... {end} block")
    head, rest = text.split(start, 1)
    return head + block + rest.split(end, 1)[1]


def tables(results: Path = RESULTS) -> list[Table]:
    """Every table of the page: the leaderboard's (from ``results``), then the other regimes'."""
    return [
        (REGIMES[0], *build_rows(results)),
        *((r, *build_rows(r.results, r.steps, r)) for r in REGIMES[1:]),
    ]


def outputs(results: Path = RESULTS) -> dict[Path, str]:
    """Every text file this script writes, as it would write it now."""
    (_, rows, pairs, facts), *others = tables(results)
    readme = with_readme_block(README.read_text(), readme_block(rows, pairs, facts))
    for table in others:
        if table[0].readme:
            block = regime_readme_block(table)
            start, end = block.splitlines()[0], block.splitlines()[-1]
            readme = with_readme_block(readme, block, start, end)
    return {PAGE: page(rows, pairs, facts, others), README: readme}


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--check", action="store_true", help="only compare; exit 1 on a difference")
    p.add_argument(
        "--results",
        type=Path,
        default=RESULTS,
        help="the sweep's output folder (its results.csv and runs/)",
    )
    args = p.parse_args(argv)
    try:
        texts = outputs(args.results)
    except (OSError, ValueError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    if args.check:
        stale = [
            str(path.relative_to(ROOT))
            for path, text in texts.items()
            if not path.is_file() or path.read_text() != text
        ]
        if stale:
            print(f"stale: {', '.join(stale)}; run python docs/make_leaderboard.py")
            return 1
        return 0
    from visattn.files import atomic_write_bytes, atomic_write_text

    for path, text in texts.items():
        atomic_write_text(path, text)
    every = tables(args.results)
    (_, rows, pairs, _), *_ = every
    ASSETS.mkdir(parents=True, exist_ok=True)
    pictures = {**plots(rows, pairs), Path(REGIMES_PNG).name: regimes_plot(every)}
    for name, data in pictures.items():
        atomic_write_bytes(ASSETS / name, data)
    print(f"wrote {PAGE.relative_to(ROOT)}, {ASSETS.relative_to(ROOT)}/, README.md's table")
    return 0


if __name__ == "__main__":
    sys.exit(main())
