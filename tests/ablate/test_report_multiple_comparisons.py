"""The report's detectable difference and Holm correction, against values computed here.

The detectable difference is checked against its closed form with t quantiles from printed
tables; Holm's adjustment against the step-down rule applied by hand to fixed p-values; the
report's "resolved" column against that adjustment on a sweep where one variant differs
clearly and another only by chance.
"""

from __future__ import annotations

import math
import statistics

import pytest

from visattn.ablate.report import format_p, render_report
from visattn.ablate.stats import detectable_difference, holm, paired_ci

# one-sided quantiles of Student's t from a printed table: t_{0.975, df} and t_{0.80, df}
T975 = {4: 2.776, 9: 2.262}
T80 = {4: 0.941, 9: 0.883}


@pytest.mark.parametrize("n", [5, 10])
def test_detectable_difference_is_the_power_formula(n: int) -> None:
    sd = 0.013
    expected = (T975[n - 1] + T80[n - 1]) * sd / math.sqrt(n)
    assert detectable_difference(sd, n) == pytest.approx(expected, rel=2e-3)
    assert math.isnan(detectable_difference(sd, 1)) and math.isnan(
        detectable_difference(math.nan, 5)
    )
    assert detectable_difference(0.0, 5) == 0.0


def test_paired_ci_carries_the_spread_of_the_differences_and_its_detectable_difference() -> None:
    a = {0: 0.90, 1: 0.91, 2: 0.93, 3: 0.92, 4: 0.95}
    b = {0: 0.89, 1: 0.91, 2: 0.90, 3: 0.90, 4: 0.92}
    p = paired_ci(a, b)
    d = [a[s] - b[s] for s in range(5)]
    assert p.sd == pytest.approx(statistics.stdev(d))
    assert p.detectable == pytest.approx(
        (T975[4] + T80[4]) * statistics.stdev(d) / math.sqrt(5), rel=2e-3
    )
    # the paired t p-value: two-sided, from t = mean / (sd / sqrt(n)) with 4 degrees of freedom
    t = statistics.fmean(d) / (statistics.stdev(d) / math.sqrt(5))
    assert t > T975[4] and p.t_p < 0.05  # the interval excludes 0 exactly when p < 0.05
    assert p.low > 0


def test_holm_step_down_by_hand() -> None:
    raw = {"a": 0.01, "b": 0.04, "c": 0.03, "d": 0.005, "e": math.nan}
    # sorted: d 0.005, a 0.01, c 0.03, b 0.04 (m = 4): 4*0.005, 3*0.01, 2*0.03, 1*0.04,
    # each raised to the running maximum
    expected = {"d": 0.02, "a": 0.03, "c": 0.06, "b": 0.06}
    out = holm(raw)
    for k, v in expected.items():
        assert out[k] == pytest.approx(v)
    assert math.isnan(out["e"])
    assert holm({"x": 0.7, "y": 0.9}) == {"x": 1.0, "y": 1.0}  # capped at 1, then monotone
    assert holm({"x": 0.2, "y": 0.9}) == {"x": 0.4, "y": 0.9}
    assert holm({}) == {}


def test_holm_takes_any_hashable_names_and_ties_in_any_order() -> None:
    """A report's family names its tests by variant and by kind of comparison; tied p-values
    must not make Holm compare the names (a str with a tuple raises)."""
    out = holm({"se": 0.01, ("budget", "gsop"): 0.01, ("table", "eca"): 0.5})
    assert out == {"se": pytest.approx(0.03), ("budget", "gsop"): pytest.approx(0.03),
                   ("table", "eca"): pytest.approx(0.5)}  # fmt: skip


def _rows() -> list[dict]:
    base = [0.80, 0.82, 0.79, 0.81, 0.83]
    big = [x + 0.05 + e for x, e in zip(base, (0.002, -0.001, 0.001, 0.0, -0.002))]
    # a difference that one raw test calls significant but that is not after correcting for
    # the nine comparisons below
    small = [x + e for x, e in zip(base, (0.011, 0.004, 0.009, 0.002, 0.012))]
    noise = [
        [x + e for x, e in zip(base, (0.01 * k, -0.01, 0.005, -0.004 * k, 0.0))] for k in range(8)
    ]
    variants = {"none": base, "big": big, "small": small} | {
        f"n{k}": v for k, v in enumerate(noise)
    }
    return [
        {"run": f"{v}/s{s}", "variant": v, "seed": s, "status": "ok", "val/acc": acc}
        for v, accs in variants.items()
        for s, acc in enumerate(accs)
    ]


def test_report_marks_resolved_only_after_holm() -> None:
    rows = _rows()
    text = render_report(rows, name="t", baseline="none")
    lines = {ln.split(" | ")[0].strip("| ★"): ln for ln in text.splitlines() if ln.startswith("| ")}
    by = {
        v: {r["seed"]: r["val/acc"] for r in rows if r["variant"] == v}
        for v in ("none", "big", "small")
    }
    raw_small = paired_ci(by["small"], by["none"])
    assert raw_small.t_p < 0.05 and raw_small.low > 0  # significant alone ...
    others = {
        v: paired_ci({r["seed"]: r["val/acc"] for r in rows if r["variant"] == v}, by["none"]).t_p
        for v in {r["variant"] for r in rows} - {"none"}
    }
    adjusted = holm(others)
    assert adjusted["small"] >= 0.05  # ... but not after Holm over the 10 comparisons
    assert "**yes**" in lines["big"] and f"| {format_p(adjusted['big'])} |" in lines["big"]
    assert "**yes**" not in lines["small"] and f"{adjusted['small']:.3f}" in lines["small"]
    assert f"{raw_small.detectable * 100:.2f}" in lines["small"]
    assert "Holm" in text and "80% power" in text


def test_a_test_acc_report_leaves_the_validation_choice_out_and_stars_only_a_result() -> None:
    """metric test/acc: no val/acc column (a best epoch on CIFAR's val = test set would be a
    choice made on the test set), the comparisons on test/acc; ★ only on a resolved gain."""
    rows = []
    for seed in range(5):
        for variant, gain in (("base", 0.0), ("noise", 0.001 * (-1) ** seed), ("gain", 0.02)):
            acc = 0.80 + 0.01 * seed + gain
            rows.append({"run": f"{variant}/seed{seed}", "variant": variant, "seed": seed,
                         "status": "ok", "val/acc": 0.99, "test/acc": acc})  # fmt: skip
    text = render_report(rows, name="t", baseline="base", metric="test/acc")
    head = next(ln for ln in text.splitlines() if ln.startswith("| variant"))
    assert "val/acc" not in head and "Δ test/acc paired (pp) [95% CI]" in head
    assert "How to read this (test/acc)" in text and "How to read this (val/acc)" not in text
    starred = [ln for ln in text.splitlines() if ln.startswith("| ") and "★" in ln]
    assert [ln.split(" | ")[0] for ln in starred] == ["| gain ★"]
    rows = [r for r in rows if r["variant"] != "gain"]  # nothing resolved now: no star at all
    text = render_report(rows, name="t", baseline="base", metric="test/acc")
    assert not [ln for ln in text.splitlines() if ln.startswith("| ") and "★" in ln]


def test_the_equal_budget_comparison_is_in_the_same_holm_family_as_the_table() -> None:
    """Every comparison the report can call resolved counts in one family: with the
    equal-budget row, m is the table's comparisons plus one, in both tables."""
    rows = _rows()
    base = [0.80, 0.82, 0.79, 0.81, 0.83]  # _rows()'s baseline
    wide = [x + 0.045 + e for x, e in zip(base, (0.001, 0.0, 0.002, -0.001, 0.001))]
    rows += [
        {"run": f"wide/s{s}", "variant": "wide", "seed": s, "status": "ok", "val/acc": acc}
        for s, acc in enumerate(wide)
    ]
    text = render_report(rows, name="t", baseline="none", budget={"wide": "big"})
    by = {
        v: {r["seed"]: r["val/acc"] for r in rows if r["variant"] == v}
        for v in {r["variant"] for r in rows}
    }
    family = {v: paired_ci(by[v], by["none"]).t_p for v in by if v != "none"}
    family["big - wide"] = paired_ci(by["big"], by["wide"]).t_p
    adjusted = holm(family)  # 12 comparisons: 11 against the baseline, 1 equal-budget
    assert len(family) == 12
    table = {ln.split(" | ")[0].strip("| ★"): ln for ln in text.splitlines() if ln.startswith("| ")}
    assert f"| {adjusted['small']:.3f} |" in table["small"]
    budget = next(ln for ln in text.split("## Against an equal budget", 1)[1].splitlines()
                  if ln.startswith("| big | wide |"))  # fmt: skip
    assert f"| {adjusted['big - wide']:.3f} |" in budget
    # alone in its table (m = 1) Holm would leave the raw p-value: the two differ here
    assert f"{family['big - wide']:.3f}" != f"{adjusted['big - wide']:.3f}"


def test_a_p_value_below_what_three_decimals_show_is_not_printed_as_zero() -> None:
    assert [format_p(p) for p in (0.0001, 0.0004999, 0.0005, 0.0123, 1.0)] == [
        "<0.001",
        "<0.001",
        "0.001",
        "0.012",
        "1.000",
    ]
    assert format_p(float("nan")) == "-"
