"""``--join TABLE_DIR``: a user's variant trained on a committed table's recipe and seeds, and
reported paired against every variant the table finished; the table read, never trained or
written; a sweep that changes the recipe refused, naming the difference."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest
import yaml
from helpers.ablate import parse_report, write_sweep

from visattn.ablate.join import JOINED_REPORT, plan_join, write_joined_report
from visattn.ablate.runner import run_sweep
from visattn.ablate.sweep import load_sweep

TABLE_VARIANTS = [
    {"name": "none", "set": {"model.attention": None}},
    {"name": "se", "set": {"model.attention": {"name": "se"}}},
]


def _digest(folder: Path) -> dict[str, str]:
    return {
        str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(folder.rglob("*"))
        if p.is_file()
    }


@pytest.fixture
def table(tmp_path: Path, fake) -> Path:
    """A committed-style table: a sweep of two variants and three seeds, finished."""
    path = write_sweep(tmp_path, TABLE_VARIANTS, seeds=(0, 1, 2), baseline="none")
    out = tmp_path / "table"
    run_sweep(path, out, train_fn=fake, echo=lambda s: None)
    fake.calls.clear()
    return out


def _mine(tmp_path: Path, **extra) -> Path:
    data = {
        "extends": str(tmp_path / "sweep.yaml"),
        "name": "mine",
        "variants": [{"name": "eca", "set": {"model.attention": {"name": "eca"}}}],
        **extra,
    }
    path = tmp_path / "mine.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def test_only_the_users_variant_trains_and_joins_every_committed_one(
    tmp_path: Path, table: Path, fake
) -> None:
    before = _digest(table)
    join = plan_join(load_sweep(_mine(tmp_path)), table, None)
    assert join.mine == ["eca"] and len(join.rows) == 6 and join.missing == []
    out = tmp_path / "mine_out"
    run_sweep(join.own, out, train_fn=fake, echo=lambda s: None)
    trained = sorted(a for call in fake.calls for a in call if "default_root_dir" in a)
    assert len(trained) == 3 and all(f"{out}/runs/eca/seed" in a for a in trained)
    report = write_joined_report(join, out)
    assert report == out.resolve() / JOINED_REPORT
    table_rows = parse_report(report.read_text())
    assert set(table_rows) == {"none", "se", "eca"}
    assert table_rows["eca"]["pairs"] == "3"  # paired against the table's own baseline
    assert "Yours" in report.read_text() and "Holm" in report.read_text()
    assert ".png" not in report.read_text()  # a join draws no plots, so it links none
    assert _digest(table) == before  # the table is read, never written


def test_the_joined_report_names_folders_relative_to_the_working_folder(
    tmp_path: Path, table: Path, fake, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A committed joined.md named the author's home folder (/work/main/docs/...): folders
    inside the working folder are named relative to it."""
    join = plan_join(load_sweep(_mine(tmp_path)), table, None)
    monkeypatch.chdir(tmp_path)
    text = write_joined_report(join, tmp_path / "mine_out").read_text()
    assert "trained in mine_out:" in text and "read from table through" in text
    assert str(tmp_path) not in text


def test_a_sweep_that_changes_the_recipe_is_refused_naming_the_difference(
    tmp_path: Path, table: Path
) -> None:
    changed = load_sweep(_mine(tmp_path, set={"trainer.max_epochs": 5}))
    with pytest.raises(ValueError, match=r"none/seed0 was trained with another recipe.*max_epochs"):
        plan_join(changed, table, None)


def test_a_join_without_the_tables_variants_or_without_its_own_is_refused(
    tmp_path: Path, table: Path
) -> None:
    (tmp_path / "x").mkdir()
    alone = write_sweep(tmp_path / "x", [{"name": "eca", "set": {"model.attention": "eca"}}])
    with pytest.raises(ValueError, match=r"has none of the table's variants; start your sweep"):
        plan_join(load_sweep(alone), table, None)
    with pytest.raises(ValueError, match=r"every variant of 'tiny' is the table's"):
        plan_join(load_sweep(tmp_path / "sweep.yaml"), table, None)
    with pytest.raises(ValueError, match=r"no runs/ folder there"):
        plan_join(load_sweep(_mine(tmp_path)), tmp_path / "nowhere", None)
