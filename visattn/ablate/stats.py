"""The statistics of a sweep's report: mean and spread per variant, Welch's interval between
two variants, the paired interval over seeds (t, or Wilcoxon from enough pairs), the smallest
difference a number of seeds can detect, and Holm's correction over a family of comparisons."""

from __future__ import annotations

import math
import statistics
from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass
from typing import TypeVar

from scipy import stats as _stats

_K = TypeVar("_K", bound=Hashable)  # the name of a test in a Holm family

__all__ = [
    "MeanStd",
    "Paired",
    "detectable_difference",
    "holm",
    "mean_std",
    "paired_ci",
    "resolvable_difference",
    "welch_ci",
]


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
