"""Sweeps that survive moves and damage: a copied folder resumes, changed settings are named,
a damaged checkpoint is retrained, results committed without checkpoints resume in a fresh clone,
--report-only rebuilds a damaged results.csv."""

from __future__ import annotations

import csv
import json
import shutil
import subprocess
from pathlib import Path

import pytest
from helpers.ablate import arg, parse_report, write_sweep
from helpers.files import read_csv

from visattn.ablate import run_sweep
from visattn.ablate.__main__ import main as ablate_main
from visattn.ablate.runner import ChangedRunsError, cost_note

VARIANTS = [{"name": "none"}, {"name": "se", "set": {"model.attention": {"name": "se"}}}]


def _trained(tmp_path: Path, fake) -> tuple[Path, Path]:
    path = write_sweep(tmp_path, VARIANTS)
    out = tmp_path / "out"
    run_sweep(path, out, train_fn=fake, echo=lambda s: None)
    fake.calls.clear()
    return path, out


def _keys(calls: list[list[str]]) -> list[str]:
    return sorted(arg(a, "trainer.default_root_dir").split("runs/")[1] for a in calls)


def test_a_copied_sweep_folder_resumes_without_training(tmp_path: Path, fake) -> None:
    path, out = _trained(tmp_path, fake)
    shutil.copytree(out, tmp_path / "copy")
    shutil.move(out, tmp_path / "moved")
    lines: list[str] = []
    for folder in ("copy", "moved"):
        rows = run_sweep(path, tmp_path / folder, train_fn=fake, echo=lines.append)
        assert fake.calls == [], folder
        assert [r["status"] for r in rows] == ["ok"] * 4
    assert any("4 done earlier, 0 to run" in ln for ln in lines)


def test_a_base_config_at_another_path_with_the_same_content_resumes(
    tmp_path: Path,
    fake,
) -> None:
    path, out = _trained(tmp_path, fake)
    elsewhere = tmp_path / "clone"
    elsewhere.mkdir()
    shutil.copy(tmp_path / "base.yaml", elsewhere / "base.yaml")
    text = path.read_text().replace(str(tmp_path / "base.yaml"), str(elsewhere / "base.yaml"))
    path.write_text(text)
    run_sweep(path, out, train_fn=fake, echo=lambda s: None)
    assert fake.calls == []
    # max_epochs is overridden by the sweep's `set`: the runs' settings stay the same
    (elsewhere / "base.yaml").write_text("trainer:\n  max_epochs: 2\n")
    lines: list[str] = []
    run_sweep(path, out, train_fn=fake, dry_run=True, echo=lines.append)
    runs = [ln for ln in lines if "python train_cls.py" in ln]
    assert runs and all("(done)" in ln for ln in runs), lines
    (elsewhere / "base.yaml").write_text("trainer:\n  gradient_clip_val: 0.5\n")  # now it does
    lines.clear()
    run_sweep(path, out, train_fn=fake, dry_run=True, echo=lines.append)
    runs = [ln for ln in lines if "python train_cls.py" in ln]
    assert runs and all(
        "its settings changed: trainer.gradient_clip_val: null -> 0.5" in ln for ln in runs
    ), lines


def test_changed_settings_are_named_and_only_those_runs_rerun(tmp_path: Path, fake) -> None:
    _, out = _trained(tmp_path, fake)
    variants = [VARIANTS[0], {"name": "se", "set": {"model.attention": {"name": "eca"}}}]
    path = write_sweep(tmp_path, variants)
    lines: list[str] = []
    with pytest.raises(ChangedRunsError, match=r"se/seed0: model\.attention"):
        run_sweep(path, out, train_fn=fake, echo=lines.append)
    assert fake.calls == []  # refused before anything trained or was deleted
    run_sweep(path, out, train_fn=fake, echo=lines.append, retrain_changed=True)
    assert _keys(fake.calls) == ["se/seed0", "se/seed1"]
    said = [ln for ln in lines if "se/seed0" in ln and "settings changed" in ln]
    assert said and 'model.attention: [{"name": "se"}] -> [{"name": "eca"}]' in said[0]


def test_a_damaged_checkpoint_is_not_counted_as_done(tmp_path: Path, fake) -> None:
    path, out = _trained(tmp_path, fake)
    ckpt = out / "runs/se/seed0/lightning_logs/version_0/checkpoints/last.ckpt"
    ckpt.write_bytes(b"ckpX")  # same size, other bytes
    (out / "runs/none/seed1/lightning_logs/version_0/checkpoints/last.ckpt").write_bytes(b"ck")
    lines: list[str] = []
    run_sweep(path, out, train_fn=fake, echo=lines.append)
    assert _keys(fake.calls) == ["none/seed1", "se/seed0"]
    assert any("se/seed0 (its checkpoint" in ln and "SHA-256 differs" in ln for ln in lines)
    assert any("none/seed1 (its checkpoint" in ln and "2 bytes, 4 when" in ln for ln in lines)
    row = next(r for r in read_csv(out / "results.csv") if r["run"] == "se/seed0")
    assert row["ckpt_size"] == "4" and len(row["ckpt_sha256"]) == 64


@pytest.mark.parametrize("damage", ["truncated", "garbage", "deleted"])
def test_report_only_rebuilds_a_damaged_results_csv_from_the_markers(
    tmp_path: Path,
    fake,
    damage: str,
    capsys: pytest.CaptureFixture,
) -> None:
    path, out = _trained(tmp_path, fake)
    good = read_csv(out / "results.csv")
    csv_path = out / "results.csv"
    if damage == "truncated":
        csv_path.write_text("".join(csv_path.read_text().splitlines(True)[:3])[:-40])
    elif damage == "garbage":
        csv_path.write_bytes(b"\x00\xffnot,a\nresults file\n")
    else:
        csv_path.unlink()
    assert ablate_main([str(path), "--out", str(out), "--report-only"]) == 0
    assert "rebuilt from 4 completion markers" in capsys.readouterr().out
    assert read_csv(csv_path) == good
    report = (out / "report.md").read_text()
    assert "Runs: 4 ok, 0 failed, 0 not run yet" in report


def test_report_only_refuses_a_damaged_results_csv_without_markers(
    tmp_path: Path,
    fake,
    capsys: pytest.CaptureFixture,
) -> None:
    path, out = _trained(tmp_path, fake)
    shutil.rmtree(out / "runs")
    (out / "results.csv").write_text("garbage\n1,2,3\n")
    assert ablate_main([str(path), "--out", str(out), "--report-only"]) == 2
    err = capsys.readouterr().err
    assert "results.csv is damaged" in err and "no completion markers" in err
    with open(out / "results.csv", newline="") as f:
        assert list(csv.reader(f)) == [["garbage"], ["1", "2", "3"]]  # left as it was


def _git(cwd: Path, *args: str) -> None:
    subprocess.run(
        ["git", "-c", "user.name=t", "-c", "user.email=t@t", *args],
        cwd=cwd,
        check=True,
        capture_output=True,
    )


@pytest.mark.skipif(shutil.which("git") is None, reason="needs git")
def test_a_fresh_clone_of_committed_results_reruns_only_unfinished_runs(
    tmp_path: Path,
    fake,
) -> None:
    """Results committed with the project's .gitignore (no checkpoints, no locks) and cloned on
    another machine: the finished runs stay finished, a damaged checkpoint that is there is still
    refused, and a run that had not finished trains."""
    repo = tmp_path / "repo"
    repo.mkdir()
    shutil.copy(Path(__file__).parents[2] / ".gitignore", repo / ".gitignore")
    path, out = _trained(repo, fake)
    shutil.rmtree(out / "runs/se/seed1")  # cut off before it finished: nothing committed
    _git(repo, "init", "-q")
    _git(repo, "add", "-A")
    _git(repo, "commit", "-q", "-m", "results")
    clone = tmp_path / "clone"
    _git(tmp_path, "clone", "-q", str(repo), str(clone))
    cloned_out = clone / out.relative_to(repo)
    assert not list(cloned_out.rglob("*.ckpt"))  # never committed
    sweep = clone / path.relative_to(repo)
    sweep.write_text(sweep.read_text().replace(str(repo), str(clone)))  # base.yaml's path
    lines: list[str] = []
    rows = run_sweep(sweep, cloned_out, train_fn=fake, echo=lines.append)
    assert _keys(fake.calls) == ["se/seed1"]
    assert [r["status"] for r in rows] == ["ok"] * 4
    assert any("3 done earlier (3 without their checkpoints), 1 to run" in ln for ln in lines)
    # a checkpoint that is there again but is not the one that finished is still refused
    fake.calls.clear()
    ckpt = cloned_out / "runs/none/seed0/lightning_logs/version_0/checkpoints/last.ckpt"
    ckpt.parent.mkdir()
    ckpt.write_bytes(b"ckpX")
    lines.clear()
    run_sweep(sweep, cloned_out, train_fn=fake, echo=lines.append)
    assert _keys(fake.calls) == ["none/seed0"]
    assert any("none/seed0 (its checkpoint" in ln and "SHA-256 differs" in ln for ln in lines)


def test_a_finished_run_without_its_metrics_csv_trains_again(tmp_path: Path, fake) -> None:
    path, out = _trained(tmp_path, fake)
    for ckpt in out.rglob("*.ckpt"):
        ckpt.unlink()
    (out / "runs/se/seed0/lightning_logs/version_0/metrics.csv").unlink()
    lines: list[str] = []
    run_sweep(path, out, train_fn=fake, echo=lines.append)
    assert _keys(fake.calls) == ["se/seed0"]
    assert any("se/seed0 (its metrics.csv is missing)" in ln for ln in lines)


def test_a_finished_run_whose_checkpoint_is_intact_stays_finished_without_its_metrics_csv(
    tmp_path: Path, fake
) -> None:
    """P9: a missing metrics.csv deleted and retrained a run whose checkpoint matched the SHA
    its marker recorded; only the learning curve is lost."""
    path, out = _trained(tmp_path, fake)
    (out / "runs/se/seed0/lightning_logs/version_0/metrics.csv").unlink()
    lines: list[str] = []
    run_sweep(path, out, train_fn=fake, echo=lines.append)
    assert fake.calls == []
    assert any("4 done earlier" in ln for ln in lines)


def test_an_unreadable_marker_is_never_rebuilt_from_results_csv(tmp_path: Path, fake) -> None:
    """Probe of round 7: a hand-edited results.csv row and a damaged marker gave a marker
    rebuilt from the edited row (a report of 'se 35.04 ± 36.37' without a word). results.csv is
    a table anyone may edit, not the run's own record: the run is unfinished and trains again,
    and the edited value reaches no marker and no report."""
    path, out = _trained(tmp_path, fake)
    marker = out / "runs/se/seed1/result.json"
    results = out / "results.csv"
    text = results.read_text()
    row = json.loads(marker.read_text())["row"]
    edited = text.replace(repr(row["val/acc"]), "0.001", 1)
    assert edited != text
    results.write_text(edited)
    marker.write_text("{ damaged")
    lines: list[str] = []
    run_sweep(path, out, train_fn=fake, echo=lines.append)
    assert _keys(fake.calls) == ["se/seed1"]
    assert any("se/seed1 (its completion marker is unreadable" in ln for ln in lines)
    assert json.loads(marker.read_text())["row"]["val/acc"] != 0.001


def test_the_data_folder_is_where_data_lives_not_a_setting(tmp_path: Path, fake) -> None:
    """data.root moves with the machine (its CIFAR copy elsewhere): finished runs stay finished,
    also those whose markers (older visattn) recorded it among their settings."""
    path, out = _trained(tmp_path, fake)
    run_sweep(path, out, overrides={"data.root": "/one/place"}, train_fn=fake, echo=print)
    assert fake.calls == []
    marker = out / "runs/none/seed0/result.json"
    record = json.loads(marker.read_text())
    record["settings"]["data.root"] = json.dumps("/old/machine")
    marker.write_text(json.dumps(record))
    lines: list[str] = []
    run_sweep(path, out, overrides={"data.root": "/another"}, train_fn=fake, echo=lines.append)
    assert fake.calls == []
    assert any("4 done earlier" in ln for ln in lines)


def _report_only(path: Path, out: Path) -> str:
    assert ablate_main([str(path), "--out", str(out), "--report-only"]) == 0
    return (out / "report.md").read_text()


def test_report_only_reports_the_sweep_as_it_stands_after_seeds_were_removed(
    tmp_path: Path, fake
) -> None:
    path = write_sweep(tmp_path, VARIANTS, seeds=(0, 1, 2))
    out = tmp_path / "out"
    run_sweep(path, out, train_fn=fake, echo=lambda s: None)
    path = write_sweep(tmp_path, VARIANTS, seeds=(0, 1))  # seed 2 taken out of the file
    report = _report_only(path, out)
    assert "Runs: 4 ok, 0 failed, 0 not run yet (of 4 planned)" in report
    assert "2 row(s) of results.csv belong to runs this sweep no longer has" in report
    assert parse_report(report)["none"]["n"] == "2"
    assert len(read_csv(out / "results.csv")) == 6  # kept, only left out of the report
    fake.calls.clear()
    run_sweep(path, out, train_fn=fake, echo=lambda s: None)  # a normal pass: the same report
    assert fake.calls == []
    assert (out / "report.md").read_text() == report
    assert len(read_csv(out / "results.csv")) == 6


def test_a_results_row_without_a_completion_marker_is_not_trusted(tmp_path: Path, fake) -> None:
    path, out = _trained(tmp_path, fake)
    clean = _report_only(path, out)
    (out / "runs/se/seed1/result.json").unlink()  # nothing says se/seed1 finished
    report = _report_only(path, out)
    assert "Runs: 3 ok, 0 failed, 1 not run yet (of 4 planned)" in report
    assert "1 row(s) of results.csv have no completion marker (se/seed1)" in report
    assert parse_report(report)["se"]["n"] == "1" and parse_report(clean)["se"]["n"] == "2"
    for marker in (out / "runs").glob("*/seed*/result.json"):  # results.csv without its runs
        marker.unlink()
    report = _report_only(path, out)
    assert "No finished runs yet." in report  # and it says why, not only that
    assert "4 row(s) of results.csv have no completion marker" in report
    assert len(read_csv(out / "results.csv")) == 4


def test_a_sweep_folder_moved_mid_sweep_is_noticed_before_results_are_written(
    tmp_path: Path, fake, capsys: pytest.CaptureFixture
) -> None:
    """The folder is moved while the second run trains: the driver stops with a clear message
    and recreates nothing at the old place; the moved copy resumes, training only what had
    not finished."""
    path = write_sweep(tmp_path, VARIANTS)
    out, moved = tmp_path / "out", tmp_path / "moved"

    def move_during_second_run(args: list[str], **kw) -> dict:
        summary = fake(args, **kw)
        if len(fake.calls) == 2:
            shutil.move(out, moved)
        return summary

    with pytest.raises(RuntimeError, match="moved or deleted"):
        run_sweep(path, out, train_fn=move_during_second_run, echo=lambda s: None)
    assert not out.exists()
    # the locks moved with the folder; a new driver takes them over from the gone process
    for lock in moved.rglob("*.lock"):
        lock.unlink()
    fake.calls.clear()
    rows = run_sweep(path, moved, train_fn=fake, echo=lambda s: None)
    assert _keys(fake.calls) == ["none/seed1", "se/seed0", "se/seed1"]  # none/seed1: no marker
    assert [r["status"] for r in rows] == ["ok"] * 4
    # the command line says it in one line, without a traceback
    fake.calls.clear()
    path2 = write_sweep(tmp_path, VARIANTS, seeds=(5,))
    (moved / "results.csv").unlink()
    (moved / "results.csv").mkdir()  # a folder where the results file goes
    assert ablate_main([str(path2), "--out", str(moved), "--report-only"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and "Traceback" not in err


def test_a_run_cut_off_mid_training_goes_on_from_its_last_checkpoint(tmp_path: Path, fake) -> None:
    """A run interrupted after a checkpoint (Ctrl+C, SIGTERM, a session's end) resumes with
    ``--ckpt_path last`` in its own folder on the next pass, when its settings are unchanged;
    with changed settings it starts again from scratch."""
    import torch

    path = write_sweep(tmp_path, [{"name": "none"}], seeds=(0, 1))
    out = tmp_path / "out"

    def interrupted(args: list[str], **kw) -> dict:
        if arg(args, "seed_everything") == "1":
            ckpt = Path(arg(args, "trainer.default_root_dir")) / "lightning_logs/version_0"
            (ckpt / "checkpoints").mkdir(parents=True)
            torch.save({"epoch": 1, "global_step": 6}, ckpt / "checkpoints/last.ckpt")
            raise KeyboardInterrupt
        return fake(args, **kw)

    with pytest.raises(KeyboardInterrupt):
        run_sweep(path, out, train_fn=interrupted, echo=lambda s: None)
    lines: list[str] = []
    run_sweep(path, out, train_fn=fake, dry_run=True, echo=lines.append)
    assert any("none/seed1 (cut off after epoch 2: resumes from its last checkpoint)" in ln
               for ln in lines)  # fmt: skip

    resumed: list[list[str]] = []

    def resume(args: list[str], *, test=None, then=None) -> dict:
        resumed.append(args)
        root = Path(arg(args, "trainer.default_root_dir"))
        assert (root / "lightning_logs/version_0/checkpoints/last.ckpt").is_file()  # kept
        shutil.rmtree(root / "lightning_logs")  # the fake trainer writes a fresh run
        summary = fake([a for a in args if a != "--ckpt_path=last"], test=test)
        summary["earlier_s"] = 100.0  # the checkpoint's training time (RunSummary)
        then(None, None, summary)
        return summary

    rows = run_sweep(path, out, train_fn=resume, echo=lambda s: None)
    assert [a[-1] for a in resumed] == ["--ckpt_path=last"]
    assert [r["status"] for r in rows] == ["ok", "ok"]
    assert rows[0]["wall_s"] < 100 <= rows[1]["wall_s"]  # the resumed run counts its pieces

    # cut off again, then the settings change: no resume, a clean start
    (out / "runs/none/seed1/result.json").unlink()
    (out / "runs/none/seed1/lightning_logs/version_0/checkpoints/last.ckpt").write_bytes(b"x")
    changed = write_sweep(tmp_path, [{"name": "none", "set": {"model.lr": 0.5}}], seeds=(0, 1))
    lines.clear()
    run_sweep(changed, out, train_fn=fake, dry_run=True, echo=lines.append)
    assert any("none/seed1 (cut off before it finished)" in ln for ln in lines)


def test_each_markers_cost_splits_a_resumed_runs_time_by_processor_and_the_report_sums_it(
    tmp_path: Path, fake
) -> None:
    """A run resumed on another machine: the marker's ``cost`` keeps the earlier pieces' seconds
    under the processor the checkpoint names and adds this piece's under this one; the report
    gives the run-hours by processor with thread-hours, and a marker of an older visattn (no
    ``cost``) under the processor that timed it, threads not recorded."""
    import torch

    from visattn.profile import device_description

    path = write_sweep(tmp_path, [{"name": "none"}], seeds=(0, 1, 2))
    out = tmp_path / "out"
    elsewhere = "Other CPU (avx512f, amx_tile)"

    def resumed_elsewhere(args: list[str], *, test=None, then=None) -> dict:
        summary = fake(args, test=test)
        if arg(args, "seed_everything") == "1":
            summary.update(earlier_s=7200.0, earlier_s_by_device={elsewhere: 7200.0})
        then(None, None, summary)
        return summary

    run_sweep(path, out, train_fn=resumed_elsewhere, echo=lambda s: None)
    here = device_description("cpu")
    markers = {
        s: json.loads((out / f"runs/none/seed{s}/result.json").read_text()) for s in (0, 1, 2)
    }
    cost = markers[1]["cost"]
    assert cost["threads"] == torch.get_num_threads()
    assert set(cost["wall_s_by_device"]) == {elsewhere, here}
    assert cost["wall_s_by_device"][elsewhere] == 7200.0
    this_piece = cost["wall_s_by_device"][here]
    assert 0 < this_piece < 60
    # the row's wall time is the sum of the pieces, as before
    assert markers[1]["row"]["wall_s"] == pytest.approx(7200.0 + this_piece, abs=1e-3)
    assert list(markers[0]["cost"]["wall_s_by_device"]) == [here]

    # seed 2 as an older visattn wrote it: no cost, timed on a third processor
    old = markers[2]
    del old["cost"]
    old["row"].update(wall_s=3600.0, profile_cpu="Old CPU")
    (out / "runs/none/seed2/result.json").write_text(json.dumps(old))
    assert ablate_main([str(path), "--out", str(out), "--report-only"]) == 0
    report = (out / "report.md").read_text()
    line = next(ln for ln in report.splitlines() if ln.startswith("- **Compute spent** by"))
    threads = torch.get_num_threads()
    assert f"{elsewhere}: 2.0 h x {threads} thread(s) = {2.0 * threads:.1f} thread-hours" in line
    assert "(threads not recorded; each under the processor that timed it" in line
    assert "it): 1.0 h on Old CPU." in line
    assert f"{here}: 0.0 h x {threads} thread(s)" in line
    assert "3.0 run-hours" in line
    # CPU time: seed 0 recorded it; seed 1's earlier piece did not (its checkpoint carried only
    # the wall time), so its total is left out rather than given short; seed 2 predates it
    assert "cpu_s_by_device" in markers[0]["cost"] and "cpu_s_by_device" not in cost
    assert line.count("CPU-hours") == 1 and "recorded by 1 of the 3 finished runs." in line


def test_a_processor_whose_runs_used_different_thread_counts_gets_one_sum() -> None:
    # a sweep run on one thread, whose last run went on with two: one line for the processor
    (line,) = cost_note({("CPU A", 1): 7200.0, ("CPU B", 1): 3600.0, ("CPU A", 2): 1800.0})
    assert "CPU A: 2.0 h x 1 thread(s) + 0.5 h x 2 thread(s) = 3.0 thread-hours" in line
    assert line.count("CPU A") == 1 and line.index("CPU A") < line.index("CPU B")
    assert "CPU B: 1.0 h x 1 thread(s) = 1.0 thread-hours" in line
    assert "3.5 run-hours" in line


def test_cpu_time_leaves_out_the_time_a_run_waits(tmp_path: Path, fake) -> None:
    """The marker's ``cpu_s_by_device`` counts what the process computed, not the seconds it
    was stopped or waiting (here a run that sleeps), which ``wall_s_by_device`` does count; a
    resumed run adds the earlier pieces' CPU seconds the checkpoint carried."""
    import time

    from visattn.profile import device_description

    path = write_sweep(tmp_path, [{"name": "none"}], seeds=(0, 1))
    out = tmp_path / "out"
    elsewhere = "Other CPU (avx512f)"

    def sleeps(args: list[str], *, test=None, then=None) -> dict:
        summary = fake(args, test=test)
        time.sleep(0.5)
        if arg(args, "seed_everything") == "1":
            summary.update(
                earlier_s=100.0,
                earlier_s_by_device={elsewhere: 100.0},
                earlier_cpu_s_by_device={elsewhere: 90.0},
            )
        then(None, None, summary)
        return summary

    run_sweep(path, out, train_fn=sleeps, echo=lambda s: None)
    here = device_description("cpu")
    cost = [
        json.loads((out / f"runs/none/seed{s}/result.json").read_text())["cost"] for s in (0, 1)
    ]
    wall, cpu = cost[0]["wall_s_by_device"][here], cost[0]["cpu_s_by_device"][here]
    assert wall >= 0.5 and 0 <= cpu < wall - 0.4
    assert cost[1]["cpu_s_by_device"][elsewhere] == 90.0 and set(cost[1]["cpu_s_by_device"]) == {
        elsewhere,
        here,
    }
