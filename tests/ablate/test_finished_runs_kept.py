"""A finished run is never lost to an option that does not change what it computes, to a
re-spelled placement, to a sweep that borrows another's name, or to a changed setting without
the user saying so; a folder in use is not touched by a second command."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from helpers.ablate import write_sweep

from visattn.ablate import run_sweep
from visattn.ablate.__main__ import main
from visattn.ablate.runner import ChangedRunsError
from visattn.ablate.sweep import load_sweep
from visattn.locks import SweepLock
from visattn.training import config as run_config
from visattn.training.options import to_flag

SPELLINGS = [
    "se",
    {"name": "se"},
    [{"name": "se"}],
    {"name": "se", "position": "standard"},
    {"name": "se", "args": {"reduction": 16}},
]


def _quiet(_: str) -> None:
    pass


@pytest.mark.parametrize(
    "option",
    [
        {"trainer.enable_progress_bar": True},
        {"data.num_workers": 2},
        {"model.compile": True},
        {"trainer.log_every_n_steps": 7},
    ],
    ids=lambda o: next(iter(o)),
)
def test_an_execution_only_option_keeps_finished_runs(tmp_path: Path, fake, option) -> None:
    path = write_sweep(tmp_path, [{"name": "se", "set": {"model.attention": "se"}}], seeds=[0])
    run_sweep(path, tmp_path / "out", train_fn=fake, echo=_quiet)
    lines: list[str] = []
    run_sweep(path, tmp_path / "out", train_fn=fake, echo=lines.append, overrides=option)
    assert len(fake.calls) == 1, "the finished run was trained again"
    assert any("1 done earlier, 0 to run" in ln for ln in lines), lines


@pytest.mark.parametrize("spelling", SPELLINGS[1:], ids=json.dumps)
def test_every_spelling_of_one_placement_keeps_finished_runs(
    tmp_path: Path, fake, spelling
) -> None:
    variants = [{"name": "se", "set": {"model.attention": SPELLINGS[0]}}]
    path = write_sweep(tmp_path, variants, seeds=[0])
    run_sweep(path, tmp_path / "out", train_fn=fake, echo=_quiet)
    path = write_sweep(tmp_path, [{"name": "se", "set": {"model.attention": spelling}}], seeds=[0])
    run_sweep(path, tmp_path / "out", train_fn=fake, echo=_quiet)
    assert len(fake.calls) == 1, f"{spelling!r} trained the finished run again"


def test_the_five_spellings_give_one_canonical_setting() -> None:
    base = ["fit", "--config", "configs/quickstart.yaml"]
    specs = [
        run_config.RunConfig.parse([*base, to_flag("model.attention", s)]).settings
        for s in SPELLINGS
    ]
    assert all(s == specs[0] for s in specs)
    assert specs[0]["model.attention"] == '[{"name": "se"}]'
    # a real difference still shows
    other = run_config.RunConfig.parse(
        [*base, '--model.attention={"name": "se", "args": {"reduction": 8}}']
    ).settings
    assert other != specs[0]


def test_a_changed_setting_is_refused_before_anything_is_deleted(tmp_path: Path, fake) -> None:
    path = write_sweep(tmp_path, [{"name": "se", "set": {"model.attention": "se"}}], seeds=[0, 1])
    out = tmp_path / "out"
    run_sweep(path, out, train_fn=fake, echo=_quiet)
    markers = {p: p.read_bytes() for p in out.rglob("result.json")}
    with pytest.raises(ChangedRunsError, match=r"(?s)se/seed0: model\.lr.*--retrain-changed"):
        run_sweep(path, out, train_fn=fake, echo=_quiet, overrides={"model.lr": 0.5})
    assert {p: p.read_bytes() for p in out.rglob("result.json")} == markers
    assert len(fake.calls) == 2
    # said explicitly, they train again
    run_sweep(
        path, out, train_fn=fake, echo=_quiet, overrides={"model.lr": 0.5}, retrain_changed=True
    )
    assert len(fake.calls) == 4


def test_a_dry_run_says_how_many_are_done_and_warns_of_changed_runs(tmp_path: Path, fake) -> None:
    path = write_sweep(tmp_path, [{"name": "se", "set": {"model.attention": "se"}}], seeds=[0])
    run_sweep(path, tmp_path / "out", train_fn=fake, echo=_quiet)
    lines: list[str] = []
    run_sweep(
        path,
        tmp_path / "out",
        dry_run=True,
        validate=False,
        echo=lines.append,
        overrides={"trainer.limit_train_batches": 2},
    )
    text = "\n".join(lines)
    assert "0 done earlier, 1 to run" in text
    assert "WARNING 1 finished run(s)" in text and "limit_train_batches" in text


def test_a_sweep_that_extends_another_needs_its_own_name(tmp_path: Path) -> None:
    parent = write_sweep(tmp_path, [{"name": "none", "set": {"model.attention": None}}])
    child = tmp_path / "child.yaml"
    child.write_text(yaml.safe_dump({"extends": parent.name, "seeds": [0, 1, 2]}))
    with pytest.raises(ValueError, match="no name of its own"):
        load_sweep(child)
    child.write_text(yaml.safe_dump({"extends": parent.name, "name": "child", "seeds": [0]}))
    assert load_sweep(child).name == "child"


def test_take_over_of_a_folder_in_use_writes_nothing(tmp_path: Path, fake) -> None:
    path = write_sweep(tmp_path, [{"name": "se", "set": {"model.attention": "se"}}], seeds=[0])
    out = tmp_path / "out"
    run_sweep(path, out, train_fn=fake, echo=_quiet)
    owner = (out / "sweep.json").read_bytes()
    other = tmp_path / "other.yaml"
    other.write_text(path.read_text().replace("name: tiny", "name: intruder"))
    with SweepLock(out), pytest.raises(RuntimeError, match="in use by another sweep"):
        run_sweep(other, out, train_fn=fake, echo=_quiet, take_over=True)
    assert (out / "sweep.json").read_bytes() == owner
    assert len(fake.calls) == 1


def test_report_only_into_a_missing_folder_fails_and_writes_nothing(tmp_path: Path) -> None:
    path = write_sweep(tmp_path, [{"name": "se", "set": {"model.attention": "se"}}], seeds=[0])
    typo = tmp_path / "typo_folder"
    assert main([str(path), "--out", str(typo), "--report-only"]) == 2
    assert not typo.exists()


def test_report_only_names_runs_whose_settings_changed(tmp_path: Path, fake, capsys) -> None:
    path = write_sweep(tmp_path, [{"name": "se", "set": {"model.attention": "se"}}], seeds=[0])
    out = tmp_path / "out"
    run_sweep(path, out, train_fn=fake, echo=_quiet)
    argv = [str(path), "--out", str(out), "--report-only", "--set", "model.lr=0.5"]
    assert main(argv) == 0
    said = capsys.readouterr().out
    assert "1 finished run(s) ran with other settings" in said and "se/seed0" in said
    assert "model.lr: 0.1 -> 0.5" in (out / "report.md").read_text()


def test_a_seed_in_a_set_is_refused(tmp_path: Path) -> None:
    variants = [{"name": "se", "set": {"seed_everything": 7}}]
    with pytest.raises(ValueError, match="'set' gives seed_everything"):
        load_sweep(write_sweep(tmp_path, variants))
    ok = [{"name": "se"}]
    with pytest.raises(ValueError, match="'set' gives seed_everything"):
        load_sweep(write_sweep(tmp_path, ok, set={"seed_everything": 3}))


def test_fast_dev_run_with_test_last_is_refused_before_any_run(tmp_path: Path, fake) -> None:
    path = write_sweep(tmp_path, [{"name": "se"}], seeds=[0, 1], test="last")
    with pytest.raises(ValueError, match="fast_dev_run writes none"):
        run_sweep(path, tmp_path / "out", train_fn=fake, echo=_quiet,
                  overrides={"trainer.fast_dev_run": 1})  # fmt: skip
    assert fake.calls == []


def test_an_owner_file_naming_no_sweep_is_called_damaged(tmp_path: Path, fake) -> None:
    from visattn.ablate.runner import SweepFolderTaken

    path = write_sweep(tmp_path, [{"name": "se"}], seeds=[0])
    out = tmp_path / "out"
    out.mkdir()
    (out / "sweep.json").write_text('{"sweep": null}')
    with pytest.raises(SweepFolderTaken, match=r"is damaged .*got None"):
        run_sweep(path, out, train_fn=fake, echo=_quiet)


def test_the_run_line_shows_the_sweeps_metric(tmp_path: Path, fake) -> None:
    path = write_sweep(tmp_path, [{"name": "se"}], seeds=[0], metric="test/acc", test="last")
    lines: list[str] = []
    fake_test = fake

    def with_test(args, *, test=None, then=None):
        summary = fake_test(args, test=test)
        summary["test_acc"] = 0.5
        then(None, None, summary)
        return summary

    run_sweep(path, tmp_path / "out", train_fn=with_test, echo=lines.append)
    assert any("ok, test/acc 0.5000" in ln for ln in lines), lines


def test_new_runs_with_another_compile_setting_are_refused_not_mixed_in(
    tmp_path: Path, fake
) -> None:
    variants = [{"name": "se", "set": {"model.attention": "se"}}]
    out = tmp_path / "out"
    run_sweep(write_sweep(tmp_path, variants, seeds=[0]), out, train_fn=fake, echo=_quiet)
    record = json.loads((out / "runs/se/seed0/result.json").read_text())
    assert record["execution"]["model.compile"] == "false"
    two = write_sweep(tmp_path, variants, seeds=[0, 1])
    with pytest.raises(ValueError, match="one precision and compile setting"):
        run_sweep(two, out, train_fn=fake, echo=_quiet, overrides={"model.compile": True})
    assert len(fake.calls) == 1
    run_sweep(two, out, train_fn=fake, echo=_quiet)  # as the finished run ran: trains seed 1
    assert len(fake.calls) == 2
    # a finished sweep re-run compiled trains nothing, so nothing is mixed
    run_sweep(two, out, train_fn=fake, echo=_quiet, overrides={"model.compile": True})
    assert len(fake.calls) == 2


def test_variants_with_two_compile_settings_are_refused_before_any_run(
    tmp_path: Path, fake
) -> None:
    variants = [
        {"name": "plain", "set": {"model.compile": False}},
        {"name": "compiled", "set": {"model.compile": True}},
    ]
    path = write_sweep(tmp_path, variants, seeds=[0])
    with pytest.raises(ValueError, match=r"finished runs have none, this pass would train with"):
        run_sweep(path, tmp_path / "out", train_fn=fake, echo=_quiet)
    assert fake.calls == []
