"""Equal-budget baselines (sweep key ``match``) and up-front validation of every variant."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from helpers.ablate import arg, parse_report
from helpers.paths import REPO

import visattn
from visattn.ablate import load_sweep, run_sweep
from visattn.profile import count_params


def _sweep(tmp_path: Path, variants: list[dict], seeds=(0, 1)) -> Path:
    data = {
        "name": "budget",
        "base": [str(REPO / "configs" / "quickstart.yaml")],
        "seeds": list(seeds),
        "set": {"model.model": "resnet20_cifar"},
        "variants": variants,
    }
    path = tmp_path / "sweep.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


VARIANTS = [
    {"name": "plain", "set": {"model.attention": None}},
    {"name": "gsop", "set": {"model.attention": {"name": "gsop"}}},
    {"name": "wide", "match": {"params": "gsop"}},
]


def test_widened_baseline_has_the_variants_parameters_within_two_percent(tmp_path: Path) -> None:
    sweep = load_sweep(_sweep(tmp_path, VARIANTS))
    m = sweep.budget()["wide"]
    # counted independently: the networks built directly (shapes has 9 classes)
    gsop_net = visattn.create_model("resnet20_cifar", num_classes=9, attention={"name": "gsop"})
    gsop = count_params(gsop_net)
    wide = count_params(visattn.create_model("resnet20_cifar", num_classes=9, width=m.width))
    plain = count_params(visattn.create_model("resnet20_cifar", num_classes=9))
    assert (m.target, m.achieved) == (gsop, wide)
    assert abs(wide / gsop - 1) <= 0.02 < gsop / plain - 1  # gsop adds far more than 2%
    assert m.width > 1.0 and m.base == "plain" and m.of == "gsop"
    runs = {r.key: r for r in sweep.runs(tmp_path / "out")}
    args = runs["wide/seed1"].args
    assert arg(args, "model.attention") == "null"  # the baseline's overrides, widened
    assert yaml.safe_load(arg(args, "model.model_kwargs")) == {"width": m.width}
    assert "model.model_kwargs" not in " ".join(runs["plain/seed1"].args)


@pytest.mark.parametrize(
    ("match", "message"),
    [
        ({"params": "nope"}, "match names 'nope'"),
        ({"flops": "gsop"}, r"match must be \{params: VARIANT\}"),
        ("params", r"match must be \{params: VARIANT\}"),
        ({"params": "wide2"}, "must be another variant without match"),
    ],
)
def test_bad_match_is_refused_when_the_sweep_loads(
    tmp_path: Path, match: object, message: str
) -> None:
    variants = [
        *VARIANTS[:2],
        {"name": "wide", "match": match},
        {"name": "wide2", "match": {"params": "gsop"}},
    ]
    with pytest.raises(ValueError, match=message):
        load_sweep(_sweep(tmp_path, variants))


def test_equal_budget_row_and_table_in_the_report(tmp_path: Path, fake) -> None:
    out = tmp_path / "out"
    run_sweep(_sweep(tmp_path, VARIANTS), out, train_fn=fake, echo=lambda s: None)
    text = (out / "report.md").read_text()
    table = parse_report(text)
    assert set(table) == {"plain", "gsop", "wide"}  # the widened baseline is its own row
    assert "widened x" in text and "equal-budget baseline" in text
    section = text.split("## Against an equal budget", 1)[1]
    row = next(ln for ln in section.splitlines() if ln.startswith("| gsop | wide |"))
    # the fake gives attention +0.1 at every seed: the paired difference is +10 pp, no spread
    assert "| +10.00 [+10.00, +10.00] | 2 |" in row


def test_a_typo_in_any_variant_fails_before_the_first_run(tmp_path: Path, fake) -> None:
    variants = [
        {"name": "plain", "set": {"model.attention": None}},
        {"name": "se", "set": {"model.attention": {"name": "se"}}},
        {"name": "typo_key", "set": {"trainer.max_epocs": 3}},
        {"name": "typo_place", "set": {"model.attention": {"name": "se", "positon": "post"}}},
    ]
    with pytest.raises(ValueError) as info:
        run_sweep(_sweep(tmp_path, variants), tmp_path / "out", train_fn=fake, validate=True)
    text = str(info.value)
    assert "2 variant(s) would fail before training" in text
    assert "'typo_key'" in text and "max_epocs" in text
    assert "'typo_place'" in text and "positon" in text
    assert "'se'" not in text and fake.calls == []  # nothing trained


def test_the_equal_budget_table_compares_the_reports_headline_metric() -> None:
    """With ``metric: test/acc`` (CIFAR's validation split is its test set), the equal-budget
    table compared val/acc, the best epoch on that split: a choice made on the test set."""
    from visattn.ablate.report import render_report

    rows = [
        {"variant": v, "seed": s, "status": "ok", "val/acc": val, "test/acc": test}
        for s in (0, 1, 2)
        for v, val, test in (
            ("plain", 0.5, 0.40 + s / 100),
            ("gsop", 0.9, 0.46 + s / 100),
            ("wide", 0.1, 0.44 + s / 100),
        )
    ]
    text = render_report(
        rows, name="b", baseline="plain", metric="test/acc", budget={"wide": "gsop"}
    )
    section = text.split("## Against an equal budget", 1)[1]
    assert "Δ test/acc paired" in section and "val/acc" not in section
    row = next(ln for ln in section.splitlines() if ln.startswith("| gsop | wide |"))
    assert "| +2.00 [+2.00, +2.00] | 3 |" in row  # test/acc: 0.46 - 0.44, not 0.9 - 0.1


def test_a_match_that_widens_to_the_baselines_own_size_is_refused(tmp_path: Path) -> None:
    """SE adds 0.9% parameters: the closest width (x1.0078) rounds back to the plain network's
    channels, and the report said "widened" over a copy of the baseline (+0.00 [+0.00, +0.00])."""
    variants = [
        {"name": "plain", "set": {"model.attention": None}},
        {"name": "se", "set": {"model.attention": {"name": "se"}}},
        {"name": "wide", "match": {"params": "se"}},
    ]
    with pytest.raises(ValueError, match="exactly what it has unwidened"):
        load_sweep(_sweep(tmp_path, variants)).budget()
