"""results.csv: one row per run, written atomically; and the per-variant statistics.

Columns (``RESULT_COLUMNS``, in this order):

- ``run``: ``<variant>/seed<k>``; ``variant``: the sweep variant; ``seed``: its seed_everything;
- ``status``: ``ok`` or ``failed``; ``error``: for a failed run, the first line of the exception
  (``Type: message``);
- ``model``: the backbone or model name trained; ``attention``: the resolved attention placement
  as JSON (``null`` for none);
- ``params``: parameters of the trained network; ``macs``: multiply-accumulates per image at the
  data's image size;
- ``latency_ms``: median eval-mode forward time at batch 1; ``batch_latency_ms``: the same at batch
  ``throughput_batch``; ``throughput``: images per second at that batch
  (``1000 * throughput_batch / batch_latency_ms``); ``profile_device``: where they were measured;
- ``wall_s``: wall time of the training call (``fit``, plus ``test`` where run; a run resumed
  from a checkpoint adds its earlier pieces' time up to that checkpoint); ``epochs``: epochs
  completed;
- ``val/acc``: best validation top-1 accuracy (a fraction in [0, 1]); ``val/acc_last``: that of
  the last epoch; ``test/acc``: test top-1 accuracy where tested (empty otherwise);
  ``train/loss``, ``val/loss``: the last epoch's losses (from the run's ``metrics.csv``);
  ``attempts``: how often the run was started (more than 1 when a worker died and it was
  retried);
- ``loc/pointing``: pointing-game hit rate and ``loc/energy``: share of attention energy inside
  the target's box, each the mean over the ``loc/blocks`` spatial, hybrid and residual blocks
  scored (empty when the data has no boxes; see :mod:`visattn.visualize.localization`);
- ``gradcam/pointing`` and ``gradcam/energy``: the same two scores for Grad-CAM of the last stage
  for the true label (every network, the baseline included; see
  :func:`visattn.visualize.localization.score_gradcam`);
- ``val/acc_diff``, ``test/acc_diff``: this run's accuracy minus that of its baseline variant's
  run with the same seed (the per-seed differences the report's paired comparison averages;
  empty for baseline rows and for runs whose partner is missing or failed);
- ``log_dir``, ``metrics_csv``, ``ckpt``: the run's artefacts, relative to the results.csv folder;
  ``ckpt_size``, ``ckpt_sha256``: the checkpoint's size and hash when the run finished.
"""

from __future__ import annotations

import csv
import io
import math
import statistics
from collections.abc import Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

from scipy import stats as _stats

from ..files import atomic_write_bytes, atomic_write_text

_K = TypeVar("_K", bound=Hashable)  # the name of a test in a Holm family

__all__ = [
    "NUMERIC_COLUMNS",
    "PAIRED_METRICS",
    "RESULT_COLUMNS",
    "MeanStd",
    "Paired",
    "atomic_write_bytes",
    "atomic_write_text",
    "detectable_difference",
    "holm",
    "mean_std",
    "paired_ci",
    "read_results",
    "resolvable_difference",
    "welch_ci",
    "with_paired_diffs",
    "write_results",
]

#: Every results.csv column, in order, with the type its cells are read back as.
_COLUMN_TYPES: dict[str, type] = {
    "run": str,
    "variant": str,
    "seed": int,
    "status": str,
    "error": str,
    "model": str,
    "attention": str,
    "params": int,
    "macs": int,
    "latency_ms": float,
    "batch_latency_ms": float,
    "throughput": float,
    "throughput_batch": int,
    "profile_device": str,
    "profile_cpu": str,
    "profile_load": float,
    "num_classes": int,
    "wall_s": float,
    "epochs": int,
    "val/acc": float,
    "val/acc_last": float,
    "test/acc": float,
    "train/loss": float,
    "val/loss": float,
    "attempts": int,
    "loc/pointing": float,
    "loc/energy": float,
    "loc/blocks": int,
    "gradcam/pointing": float,
    "gradcam/energy": float,
    "val/acc_diff": float,
    "test/acc_diff": float,
    "log_dir": str,
    "metrics_csv": str,
    "ckpt": str,
    "ckpt_size": int,
    "ckpt_sha256": str,
}
RESULT_COLUMNS = tuple(_COLUMN_TYPES)
NUMERIC_COLUMNS = frozenset(c for c, t in _COLUMN_TYPES.items() if t is not str)
_INT_COLUMNS = frozenset(c for c, t in _COLUMN_TYPES.items() if t is int)
#: metrics compared per seed with the baseline (``<metric>_diff`` columns).
PAIRED_METRICS = ("val/acc", "test/acc")


def _cell(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, float):
        return "" if math.isnan(value) else repr(value)
    return str(value)


def with_paired_diffs(
    rows: Sequence[dict[str, Any]], baseline: str | Mapping[str, str] | None = None
) -> list[dict[str, Any]]:
    """Copies of ``rows`` with ``val/acc_diff`` and ``test/acc_diff`` filled in: the run's value
    minus that of the ``ok`` run of its baseline variant with the same seed (``None`` for
    baseline variants, failed runs and runs without such a partner).

    ``baseline``: the baseline variant (default: the first variant), or ``{variant: baseline}``.
    """
    first = rows[0]["variant"] if rows else None
    base_of = (
        (lambda v: baseline.get(v, first))
        if isinstance(baseline, Mapping)
        else (lambda v: baseline if baseline is not None else first)
    )
    ok = {(r["variant"], r["seed"]): r for r in rows if r.get("status") == "ok"}
    out = []
    for r in rows:
        r = dict(r)
        partner = ok.get((base_of(r["variant"]), r["seed"]))
        for m in PAIRED_METRICS:
            value = r.get(m) if r.get("status") == "ok" else None
            other = None if partner is None or partner is r else partner.get(m)
            is_base = base_of(r["variant"]) == r["variant"]
            r[f"{m}_diff"] = None if value is None or other is None or is_base else value - other
        out.append(r)
    return out


def write_results(
    path: str | Path,
    rows: Iterable[dict[str, Any]],
    *,
    baseline: str | Mapping[str, str] | None = None,
) -> None:
    """Write ``rows`` (dicts keyed by :data:`RESULT_COLUMNS`) to ``path`` atomically, with the
    per-seed differences to ``baseline`` (see :func:`with_paired_diffs`).

    Raises:
        ValueError: a row has a key outside :data:`RESULT_COLUMNS`.
    """
    rows = with_paired_diffs(list(rows), baseline)
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=RESULT_COLUMNS, lineterminator="\n")
    writer.writeheader()
    for row in rows:
        extra = sorted(set(row) - set(RESULT_COLUMNS))
        if extra:
            raise ValueError(f"results row {row.get('run')!r} has unknown column(s) {extra}")
        writer.writerow({k: _cell(row.get(k)) for k in RESULT_COLUMNS})
    atomic_write_text(path, buf.getvalue())


def _parse(column: str, text: str) -> Any:
    if column not in NUMERIC_COLUMNS:
        return text
    if text == "":
        return None
    return int(float(text)) if column in _INT_COLUMNS else float(text)


def read_results(path: str | Path) -> list[dict[str, Any]]:
    """Read a results.csv; numeric columns become int/float, empty cells ``None``."""
    with open(path, newline="", encoding="utf-8") as f:
        return [{k: _parse(k, v) for k, v in row.items()} for row in csv.DictReader(f)]


@dataclass(frozen=True)
class MeanStd:
    """Mean, sample standard deviation (``ddof=1``; ``nan`` for ``n < 2``) and count."""

    mean: float
    std: float
    n: int


def mean_std(values: Sequence[float]) -> MeanStd:
    """:class:`MeanStd` of the finite values (``nan`` mean for none)."""
    xs = [float(v) for v in values if v is not None and math.isfinite(float(v))]
    if not xs:
        return MeanStd(math.nan, math.nan, 0)
    return MeanStd(statistics.fmean(xs), statistics.stdev(xs) if len(xs) > 1 else math.nan, len(xs))


def welch_ci(a: MeanStd, b: MeanStd, confidence: float = 0.95) -> tuple[float, float, float]:
    """Difference of means ``a - b`` and its confidence interval by Welch's t (unequal variances).

    ``se = sqrt(s_a^2/n_a + s_b^2/n_b)``, degrees of freedom by Welch-Satterthwaite
    ``df = se^4 / ((s_a^2/n_a)^2/(n_a-1) + (s_b^2/n_b)^2/(n_b-1))``, interval
    ``diff -/+ t_{(1+confidence)/2, df} * se`` (Welch, Biometrika 1947).

    Returns:
        ``(diff, low, high)``; the bounds are ``nan`` when either side has fewer than 2 values,
        and equal ``diff`` when both sides have zero variance.
    """
    diff = a.mean - b.mean
    if a.n < 2 or b.n < 2:
        return diff, math.nan, math.nan
    va, vb = a.std**2 / a.n, b.std**2 / b.n
    se = math.sqrt(va + vb)
    if se == 0:
        return diff, diff, diff
    df = (va + vb) ** 2 / (va**2 / (a.n - 1) + vb**2 / (b.n - 1))
    half = float(_stats.t.ppf(0.5 + confidence / 2, df)) * se
    return diff, diff - half, diff + half


@dataclass(frozen=True)
class Paired:
    """A paired comparison by seed: the mean of the per-seed differences ``a - b``, its
    confidence interval (paired t), the number of pairs, the runs left out for want of a
    partner, the Wilcoxon signed-rank p-value (``nan`` for fewer than
    :data:`WILCOXON_MIN_PAIRS` pairs), the paired-t p-value, the sample standard deviation of
    the differences and the smallest difference this design detects (:func:`detectable_difference`
    of that standard deviation and ``n``)."""

    diff: float
    low: float
    high: float
    n: int
    unpaired: int
    wilcoxon_p: float
    t_p: float = math.nan
    sd: float = math.nan
    detectable: float = math.nan


#: Fewer pairs than this give no Wilcoxon p-value: with n = 4 the smallest two-sided exact p is
#: 0.125, so the test could never reject at 5%.
WILCOXON_MIN_PAIRS = 5


def paired_ci(
    a: Mapping[int, float | None],
    b: Mapping[int, float | None],
    confidence: float = 0.95,
) -> Paired:
    """Paired comparison of ``a`` and ``b``, each ``{seed: value}``.

    Runs with the same seed share data order and augmentation, so their difference removes that
    part of the seed noise (Student's paired t; Wilcoxon, Biometrics Bulletin 1945, for the
    signed-rank test). Over the seeds present (finite) on both sides, with differences
    ``d_i = a_i - b_i``: ``mean(d) -/+ t_{(1+confidence)/2, n-1} * sd(d) / sqrt(n)``
    (``scipy.stats.ttest_rel``), and ``scipy.stats.wilcoxon(d)`` (two-sided; exact for small n
    without ties) where ``n >= 5``.

    Returns:
        :class:`Paired`; the bounds are ``nan`` for fewer than 2 pairs and equal ``diff`` when
        every difference is the same. ``unpaired`` counts the values on either side whose seed
        has no finite partner.
    """

    def finite(m: Mapping[int, float | None]) -> dict[int, float]:
        return {k: float(v) for k, v in m.items() if v is not None and math.isfinite(float(v))}

    fa, fb = finite(a), finite(b)
    seeds = sorted(set(fa) & set(fb))
    n = len(seeds)
    unpaired = len(fa) + len(fb) - 2 * n
    if n == 0:
        return Paired(math.nan, math.nan, math.nan, 0, unpaired, math.nan)
    xa = [fa[s] for s in seeds]
    xb = [fb[s] for s in seeds]
    d = [x - y for x, y in zip(xa, xb)]
    diff = statistics.fmean(d)
    low = high = t_p = sd = math.nan
    if n >= 2:
        sd = statistics.stdev(d)
        if max(d) == min(d):
            low = high = diff
            t_p = 1.0 if diff == 0 else 0.0
        else:
            test = _stats.ttest_rel(xa, xb)
            ci = test.confidence_interval(confidence)
            low, high, t_p = float(ci.low), float(ci.high), float(test.pvalue)
    p = math.nan
    if n >= WILCOXON_MIN_PAIRS:
        p = 1.0 if all(x == 0 for x in d) else float(_stats.wilcoxon(d).pvalue)
    return Paired(diff, low, high, n, unpaired, p, t_p, sd, detectable_difference(sd, n))


def detectable_difference(sd: float, n: int, confidence: float = 0.95, power: float = 0.8) -> float:
    """The smallest true mean difference that ``n`` pairs whose differences scatter by ``sd``
    detect (two-sided paired t at ``1 - confidence``) with probability ``power``.

    The usual approximation of the t-test's minimum detectable effect:
    ``(t_{(1+confidence)/2, n-1} + t_{power, n-1}) * sd / sqrt(n)`` (e.g. Cohen, *Statistical
    Power Analysis*, 1988, ch. 2). ``nan`` for ``n < 2`` or an unknown ``sd``; ``0`` when the
    differences do not scatter.
    """
    if n < 2 or not math.isfinite(sd):
        return math.nan
    t = _stats.t.ppf(0.5 + confidence / 2, n - 1) + _stats.t.ppf(power, n - 1)
    return float(t) * sd / math.sqrt(n)


def holm(pvalues: Mapping[_K, float]) -> dict[_K, float]:
    """Holm's step-down adjustment of a family of p-values (Holm, Scand. J. Statist. 1979).

    Sorted ascending, the ``k``-th (from 0) of ``m`` finite p-values becomes
    ``max_{j <= k} min(1, (m - j) * p_(j))``; rejecting where the adjusted value is below
    ``alpha`` keeps the family-wise error rate at ``alpha`` under any dependence between the
    tests. ``nan`` entries stay ``nan`` and do not count in ``m``. The keys name the tests and
    can be any hashable values (tied p-values get the same adjusted value in any order).
    """
    finite = sorted(((p, k) for k, p in pvalues.items() if math.isfinite(p)), key=lambda pk: pk[0])
    m = len(finite)
    out = {k: math.nan for k in pvalues}
    running = 0.0
    for j, (p, k) in enumerate(finite):
        running = max(running, min(1.0, (m - j) * p))
        out[k] = running
    return out


def resolvable_difference(std: float, n: int, confidence: float = 0.95) -> float:
    """The smallest difference ``n`` seeds can tell from zero when runs scatter by ``std``.

    Two independent runs differ by ``std * sqrt(2)`` on average, so the mean of ``n`` per-seed
    differences has standard error ``std * sqrt(2 / n)``, and the confidence interval's half-width
    is ``t_{(1+confidence)/2, n-1} * std * sqrt(2 / n)``: a true difference smaller than that is
    likely to give an interval containing 0. (Pairing shrinks it when runs of one seed are
    correlated.) ``nan`` for ``n < 2`` or an unknown ``std``.
    """
    if n < 2 or std is None or not math.isfinite(std):
        return math.nan
    return float(_stats.t.ppf(0.5 + confidence / 2, n - 1)) * std * math.sqrt(2.0 / n)
