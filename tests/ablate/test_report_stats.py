"""The report's statistics against values computed independently here, on fixed numbers.

The paired interval is checked against the textbook formula with t quantiles from printed
tables, the Wilcoxon p-value against the exact null distribution enumerated over all sign
patterns, the resolvable difference against its closed form.
"""

from __future__ import annotations

import itertools
import math

import pytest

from visattn.ablate.report import render_report
from visattn.ablate.results import with_paired_diffs
from visattn.ablate.stats import paired_ci, resolvable_difference

# t_{0.975, df} from a printed table (e.g. Student's t table in any statistics textbook)
T975 = {1: 12.706, 2: 4.303, 3: 3.182, 4: 2.776, 5: 2.571}

A = {0: 91.2, 1: 90.8, 2: 91.5, 3: 90.9, 4: 91.3, 5: 90.2, 9: 95.0}  # seed 9: no partner
B = {0: 90.1, 1: 90.6, 2: 89.8, 3: 90.4, 4: 90.0, 5: 90.5, 7: 80.0}  # seed 7: no partner


def _exact_wilcoxon_p(d: list[float]) -> float:
    """Two-sided exact signed-rank p: the share of the 2^n sign patterns of the ranks whose W+ is
    at least as far from its null mean n(n+1)/4 as the observed one (no ties, no zeros)."""
    ranks = {x: r for r, x in enumerate(sorted(abs(v) for v in d), 1)}
    w_obs = sum(ranks[abs(v)] for v in d if v > 0)
    n = len(d)
    centre = n * (n + 1) / 4
    extreme = 0
    for signs in itertools.product((0, 1), repeat=n):
        w = sum(r for r, s in zip(range(1, n + 1), signs) if s)
        extreme += abs(w - centre) >= abs(w_obs - centre) - 1e-12
    return extreme / 2**n


def test_paired_interval_matches_the_textbook_formula_and_leaves_out_unpaired_seeds() -> None:
    p = paired_ci(A, B)
    d = [A[s] - B[s] for s in range(6)]  # 1.1, 0.2, 1.7, 0.5, 1.3, -0.3
    mean = sum(d) / 6
    sd = math.sqrt(sum((x - mean) ** 2 for x in d) / 5)
    half = T975[5] * sd / math.sqrt(6)
    assert p.n == 6 and p.unpaired == 2
    assert p.diff == pytest.approx(mean)
    # the table's 3-decimal t moves the bounds by < 1e-3
    assert (p.low, p.high) == pytest.approx((mean - half, mean + half), abs=1e-3)


def test_wilcoxon_p_is_the_exact_signed_rank_p_from_six_pairs_on() -> None:
    p = paired_ci(A, B)
    d = [A[s] - B[s] for s in range(6)]
    # ranks of |d|: 0.2->1, 0.3->2, 0.5->3, 1.1->4, 1.3->5, 1.7->6; W- = 2: p = 6/64
    assert _exact_wilcoxon_p(d) == pytest.approx(6 / 64)
    assert p.wilcoxon_p == pytest.approx(6 / 64)
    four = paired_ci({s: A[s] for s in range(4)}, B)
    assert four.n == 4 and math.isnan(four.wilcoxon_p)  # fewer than 5 pairs: no p-value
    assert five_or_more_needed() == 5


def five_or_more_needed() -> int:
    from visattn.ablate.stats import WILCOXON_MIN_PAIRS

    return WILCOXON_MIN_PAIRS


def test_paired_degenerate_cases() -> None:
    one = paired_ci({0: 1.0, 1: 2.0}, {0: 0.5})
    assert one.n == 1 and one.unpaired == 1 and one.diff == 0.5 and math.isnan(one.low)
    same = paired_ci({0: 2.0, 1: 3.0}, {0: 1.0, 1: 2.0})  # every difference 1: no spread
    assert (same.diff, same.low, same.high) == (1.0, 1.0, 1.0)
    none = paired_ci({0: 1.0}, {1: 1.0})
    assert none.n == 0 and none.unpaired == 2 and math.isnan(none.diff)
    assert paired_ci({0: 1.0, 1: None}, {0: 1.0, 1: 2.0}).unpaired == 1  # a failed run
    zeros = paired_ci({s: 1.0 for s in range(5)}, {s: 1.0 for s in range(5)})
    assert zeros.wilcoxon_p == 1.0


def test_smallest_resolvable_difference_is_t_s_sqrt_2_over_n() -> None:
    assert resolvable_difference(1.0, 3) == pytest.approx(T975[2] * math.sqrt(2 / 3), rel=2e-4)
    assert resolvable_difference(0.4, 6) == pytest.approx(
        T975[5] * 0.4 * math.sqrt(2 / 6), rel=2e-4
    )
    assert math.isnan(resolvable_difference(1.0, 1))
    assert math.isnan(resolvable_difference(math.nan, 4))


def _rows() -> list[dict]:
    rows = []
    for variant, values in (("none", B), ("se", A)):
        for seed, acc in values.items():
            rows.append(
                {
                    "run": f"{variant}/seed{seed}",
                    "variant": variant,
                    "seed": seed,
                    "status": "ok",
                    "val/acc": acc / 100,
                    "test/acc": None,
                }
            )
    rows.append({"run": "se/seed3x", "variant": "se", "seed": 11, "status": "failed"})
    return rows


def test_per_seed_differences_pair_runs_with_the_same_seed_only() -> None:
    out = {r["run"]: r for r in with_paired_diffs(_rows(), "none")}
    assert out["se/seed2"]["val/acc_diff"] == pytest.approx((91.5 - 89.8) / 100)
    assert out["se/seed9"]["val/acc_diff"] is None  # no baseline run with seed 9
    assert out["none/seed0"]["val/acc_diff"] is None  # the baseline itself
    assert out["se/seed3x"]["val/acc_diff"] is None and out["se/seed0"]["test/acc_diff"] is None


def test_report_shows_paired_columns_unpaired_count_and_how_to_read() -> None:
    text = render_report(_rows(), name="t", baseline="none")
    row = next(ln for ln in text.splitlines() if ln.startswith("| se"))
    p = paired_ci(A, B)
    assert f"{p.diff:+.2f} [{p.low:+.2f}, {p.high:+.2f}]" in row
    assert "6 (2 unpaired)" in row and f"{6 / 64:.3f}" in row
    base = list(B.values())
    m = sum(base) / len(base)
    s = math.sqrt(sum((x - m) ** 2 for x in base) / (len(base) - 1))
    assert f"s = {s:.2f} pp" in text and "with n = 7 seeds" in text
    assert f"±{resolvable_difference(s / 100, 7) * 100:.2f} pp" in text
