"""Does a precision (or compile) setting change what a sweep measures? Pairs, by seed, the finished
runs of one variant in a *candidate* sweep (trained with the setting under test) with the same
variant's runs in a *reference* sweep (trained as the leaderboard was), and accepts the setting
only if the 95% paired interval of the metric's difference lies within ``+-margin``.

    python benchmarks/precision_check.py     # bf16 against the CIFAR-10 leaderboard's float32
    python benchmarks/precision_check.py --candidate benchmarks/results/cifar10_bf16_check \\
        --reference benchmarks/results/cifar10_cpu --variant resnet20_none --margin 0.3

The reference may also be a folder of ``train_cls.py fit`` runs, ``<folder>/seed<N>/``: the
reference setting trained again on the candidate's host, so that the pairs differ in the
setting and not also in the processor (float rounding differs with the vector width) or in
the code version. Such runs have no test score of their own; compare ``--metric val/acc_last``
(the last epoch's ``val/acc``), which is the test score where the validation set is the test
set, as in the CIFAR-10 leaderboard's recipe.

    python benchmarks/precision_check.py --metric val/acc_last \\
        --reference benchmarks/results/cifar10_bf16_check_control \\
        --out benchmarks/results/precision_check_bf16_same_host.md

A pair counts only if its two runs trained with the same settings apart from the precision and
compile setting (the runs' completion markers record them): anything else differing is an error
naming the keys, since the difference would then not be the setting's. The runs may have trained
on different processors; their difference then also holds that processor's rounding, which a
setting that is to hold on every host has to survive anyway.

Writes ``--out`` (markdown, atomically): the pairs, the interval (Student's paired t, through
:func:`visattn.ablate.stats.paired_ci`), the verdict, and each run's processor and wall time.
"""

from __future__ import annotations

import argparse
import math
from pathlib import Path
from typing import Any

from _common import markdown_table

from visattn.ablate.job import MODE_KEYS, read_marker, run_mode
from visattn.ablate.stats import paired_ci
from visattn.files import atomic_write_text, read_metrics_csv
from visattn.training.config import SETTINGS_FORMAT, RunConfig, RunSpec

HERE = Path(__file__).resolve().parent
_LOGGER = "trainer.logger."


def finished_runs(folder: Path, variant: str) -> dict[int, dict[str, Any]]:
    """``{seed: marker}`` of the variant's runs that finished ``ok`` in a sweep's folder, or,
    for a folder of ``train_cls.py fit`` runs (:func:`fit_runs`), a marker-like record of each."""
    runs = folder / "runs" / variant
    if not runs.is_dir():
        if any(folder.glob("seed*/lightning_logs/version_*/config.yaml")):
            return fit_runs(folder)
        raise FileNotFoundError(f"{folder}: no runs of {variant} (looked in {runs})")
    found = {}
    for root in sorted(runs.glob("seed*")):
        record = read_marker(root)
        if record is not None and record["row"].get("status") == "ok":
            found[int(record["row"]["seed"])] = record
    return found


def fit_runs(folder: Path) -> dict[int, dict[str, Any]]:
    """``{seed: record}`` of ``train_cls.py fit`` runs in ``folder/seed<N>/`` (for instance the
    reference setting trained again on the candidate's host): the settings resolved from each
    run's saved ``config.yaml`` as a marker holds them, and ``val/acc_last``, the last epoch's
    ``val/acc`` in its ``metrics.csv`` (what a marker's row calls it). The seed is the one the
    config gives."""
    found = {}
    for config in sorted(folder.glob("seed*/lightning_logs/version_*/config.yaml")):
        settings = RunConfig.parse(["fit", "--config", str(config)]).settings
        # the saved config spells out the logger Lightning made by default: not a setting
        settings = {k: v for k, v in settings.items() if not k.startswith(_LOGGER)}
        rows = read_metrics_csv(config.parent / "metrics.csv")
        last = [r["val/acc"] for r in rows if r.get("val/acc") is not None]
        seed = RunSpec.of(settings).seed
        row = {"seed": seed, "status": "ok", "val/acc_last": float(last[-1]) if last else None}
        found[seed] = {"settings_format": SETTINGS_FORMAT, "settings": settings, "row": row}
    return found


def differing_settings(a: dict[str, Any], b: dict[str, Any]) -> list[str]:
    """The settings two markers record differently, the precision and compile keys left out;
    each marker's settings read as the runner reads them (:meth:`RunSpec.of_record`: a marker
    of an older visattn, which recorded its options as set, resolves to the same form)."""
    sa, sb = RunSpec.of_record(a).settings, RunSpec.of_record(b).settings
    return sorted(k for k in {*sa, *sb} - set(MODE_KEYS) if sa.get(k) != sb.get(k))


def compare(
    candidate: Path, reference: Path, variant: str, metric: str, margin_points: float
) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """The pairs (one row per seed finished on both sides) and the summary with the verdict."""
    cand, ref = finished_runs(candidate, variant), finished_runs(reference, variant)
    rows = []
    for seed in sorted(set(cand) & set(ref)):
        if bad := differing_settings(cand[seed], ref[seed]):
            raise ValueError(
                f"{variant} seed {seed}: the runs differ in {', '.join(bad)} besides the "
                f"precision and compile setting, so their difference is not the setting's"
            )
        c, r = cand[seed]["row"], ref[seed]["row"]
        rows.append(
            {
                "seed": seed,
                "candidate": f"{float(c[metric]) * 100:.2f}",
                "reference": f"{float(r[metric]) * 100:.2f}",
                "diff": f"{(float(c[metric]) - float(r[metric])) * 100:+.2f}",
                "candidate_mode": _mode(cand[seed]),
                "reference_mode": _mode(ref[seed]),
                "candidate_cpu": c.get("profile_cpu") or "(not recorded)",
                "candidate_wall_s": float(c.get("wall_s") or math.nan),
                "reference_cpu": r.get("profile_cpu") or "(not recorded)",
                "reference_wall_s": float(r.get("wall_s") or math.nan),
            }
        )
    paired = paired_ci(
        {seed: float(cand[seed]["row"][metric]) * 100 for seed in (r["seed"] for r in rows)},
        {seed: float(ref[seed]["row"][metric]) * 100 for seed in (r["seed"] for r in rows)},
    )
    m = f"+-{margin_points:g} points"
    if paired.n < 2:
        verdict = f"undecided: {paired.n} pair(s); an interval needs at least 2"
    elif -margin_points <= paired.low and paired.high <= margin_points:
        verdict = f"accepted: the interval lies within {m}"
    elif paired.high < -margin_points or paired.low > margin_points:
        verdict = (
            f"not accepted: the interval lies wholly outside {m} (the setting moves the metric)"
        )
    else:
        verdict = f"not accepted: the interval reaches outside {m} (too wide to accept)"
    summary = {
        "n": paired.n,
        "diff": paired.diff,
        "low": paired.low,
        "high": paired.high,
        "sd": paired.sd,
        "unfinished": sorted(set(cand) ^ set(ref)),
        "verdict": verdict,
    }
    return rows, summary


def _shown(path: Path) -> str:
    """``path`` relative to the repository where it lies inside it."""
    try:
        return str(path.resolve().relative_to(HERE.parent))
    except ValueError:
        return str(path)


def _mode(record: dict[str, Any]) -> str:
    return ", ".join(f"{k}={v}" for k, v in run_mode(record).items())


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--candidate", type=Path, default=HERE / "results/cifar10_bf16_check")
    p.add_argument("--reference", type=Path, default=HERE / "results/cifar10_cpu")
    p.add_argument("--variant", default="resnet20_none")
    p.add_argument("--metric", default="test/acc")
    p.add_argument("--margin", type=float, default=0.3, help="in points (percent)")
    p.add_argument("--out", type=Path, default=HERE / "results/precision_check_bf16.md")
    args = p.parse_args(argv)
    rows, s = compare(args.candidate, args.reference, args.variant, args.metric, args.margin)
    interval = (
        f"{s['diff']:+.2f} points, 95% interval [{s['low']:+.2f}, {s['high']:+.2f}] "
        f"(sd of the differences {s['sd']:.2f}) over {s['n']} pairs"
        if s["n"] >= 2
        else f"{s['n']} pair(s), no interval"
    )
    lines = [
        f"# Paired check: {args.candidate.name} against {args.reference.name}",
        "",
        f"command: `python benchmarks/precision_check.py --candidate {_shown(args.candidate)} "
        f"--reference {_shown(args.reference)} --variant {args.variant} "
        f"--metric {args.metric} --margin {args.margin:g}`",
        "",
        f"{args.variant}, {args.metric} in percent, candidate - reference, paired by seed: "
        f"{interval}.",
        "",
        f"**Verdict: {s['verdict']}.**",
        "",
    ]
    if s["unfinished"]:
        one_side = ", ".join(map(str, s["unfinished"]))
        lines += [f"Seeds with a finished run on one side only (not counted): {one_side}.", ""]
    columns = [
        "seed",
        "candidate",
        "reference",
        "diff",
        "candidate_mode",
        "reference_mode",
        "candidate_cpu",
        "candidate_wall_s",
        "reference_cpu",
        "reference_wall_s",
    ]
    text = "\n".join([*lines, markdown_table(rows, columns), ""])
    atomic_write_text(args.out, text)
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
