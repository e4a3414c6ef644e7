"""A sweep resolves each run's options once, in the driver; its workers parse nothing; the
markers written before settings were canonical stay valid."""

from __future__ import annotations

import sys
from pathlib import Path

import jsonargparse
import pytest
import yaml
from helpers.ablate import TINY_SET
from helpers.paths import REPO

import visattn.ablate.runner as runner_mod
from visattn.ablate import run_sweep
from visattn.ablate.job import completed, resume_point
from visattn.ablate.sweep import load_sweep
from visattn.models.resnet import ResNet
from visattn.training import config as run_config

CIFAR_SWEEP = REPO / "configs/ablations/cifar10_cpu.yaml"
CIFAR_RESULTS = REPO / "benchmarks/results/cifar10_cpu"
#: the --set options the committed CIFAR-10 results were run with (see their report)
CIFAR_SET = {"data.root": "../shared/data", "data.verify": False}


def test_a_tiny_sweep_parses_each_variant_once_and_builds_each_network_at_most_twice(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two variants, two seeds, real training with a test and the evaluation: each variant's
    options are parsed once, in the driver (its other seed is that parse with the seed and the
    folder set; none in the worker that trains it); each network is built once per variant for
    the check before anything trains and once per run for its fit, which the test and the
    evaluation reuse (4 builds a run before they did)."""
    counts = {"driver": 0, "worker": 0}
    phase, depth = ["driver"], [0]
    for sub in ("fit", "test"):  # the parser's defaults, once per process: not a run's parse
        run_config._default_leaves(sub)  # (warm here, so the count does not depend on order)
    for name in ("parse_args", "parse_object", "parse_string", "parse_path", "parse_env"):
        original = getattr(jsonargparse.ArgumentParser, name)

        def counted(self, *a, _original=original, **k):
            # a parse of options, not jsonargparse checking a value's type with a parser inside
            caller = sys._getframe(1).f_code.co_filename
            counts[phase[0]] += depth[0] == 0 and "jsonargparse" not in caller
            depth[0] += 1
            try:
                return _original(self, *a, **k)
            finally:
                depth[0] -= 1

        monkeypatch.setattr(jsonargparse.ArgumentParser, name, counted)
    train_and_mark = runner_mod.train_and_mark

    def in_the_worker(*a, **k):
        phase[0] = "worker"
        try:
            return train_and_mark(*a, **k)
        finally:
            phase[0] = "driver"

    monkeypatch.setattr(runner_mod, "train_and_mark", in_the_worker)
    builds: list[str] = []
    build = ResNet.__init__

    def counted_build(self, *a, **k):
        builds.append(phase[0])
        build(self, *a, **k)

    monkeypatch.setattr(ResNet, "__init__", counted_build)
    sweep = {
        "name": "parses",
        "base": [str(REPO / "configs/quickstart.yaml")],
        "seeds": [0, 1],
        "set": {**TINY_SET, "trainer.max_epochs": 1, "trainer.logger": False},
        "test": "last",
        "variants": [
            {"name": "none", "set": {"model.attention": None}},
            {"name": "se", "set": {"model.attention": {"name": "se"}}},
        ],
    }
    path = tmp_path / "sweep.yaml"
    path.write_text(yaml.safe_dump(sweep))
    rows = run_sweep(path, tmp_path / "out", echo=lambda s: None)  # real training, validated
    assert [r["status"] for r in rows] == ["ok"] * 4
    assert all(r["test/acc"] is not None and r["latency_ms"] for r in rows)
    assert counts == {"driver": 2, "worker": 0}
    assert builds == ["driver"] * 2 + ["worker"] * 4  # the checks, then one per run
    assert len(builds) <= 2 * len(rows)


def _same_as_a_parse(run) -> None:
    parsed = run_config.RunConfig.parse(run.args)
    assert tuple(run.resolved) == tuple(parsed), run.key
    assert run.resolved.namespace == parsed.namespace, run.key
    assert list(run.settings.items()) == list(parsed.settings.items()), run.key


def test_each_run_of_a_variant_resolves_as_a_parse_of_its_own_arguments() -> None:
    """A variant's runs share one parse (the other seeds set the seed and the folder on it):
    every run of the long CIFAR-10 rung, the equal-budget control among them, resolves to what
    parsing its own arguments gives, arguments, namespace and settings, in order."""
    runs = load_sweep(REPO / "configs/ablations/cifar10_long_cpu.yaml").runs("/runs", CIFAR_SET)
    assert len({r.variant for r in runs}) < len(runs)  # some runs share their variant's parse
    for run in runs:
        _same_as_a_parse(run)


def test_runs_of_a_variant_whose_arguments_differ_elsewhere_are_parsed_in_full(
    tmp_path: Path,
) -> None:
    """The shared parse serves only arguments equal but for the last two (seed, folder): a run
    given other options by hand is parsed on its own, not given its neighbour's options."""
    from dataclasses import replace

    runs = load_sweep(CIFAR_SWEEP).runs(tmp_path, CIFAR_SET)
    first, other = runs[0], next(r for r in runs[1:] if r.variant == runs[0].variant)
    assert first.resolved.config["model"]["lr"] != 0.3  # the variant's parse
    changed = replace(other, args=(*other.args[:-2], "--model.lr=0.3", *other.args[-2:]))
    assert changed.shared is first.shared
    _same_as_a_parse(changed)
    assert changed.resolved.config["model"]["lr"] == 0.3
    _same_as_a_parse(other)


#: every committed real-data sweep: (sweep file, results folder, the --set it ran with)
COMMITTED = {
    "cifar10_cpu": (CIFAR_SWEEP, CIFAR_RESULTS, CIFAR_SET),
    "cifar10_bf16_check": (
        REPO / "configs/ablations/cifar10_bf16_check.yaml",
        REPO / "benchmarks/results/cifar10_bf16_check",
        CIFAR_SET,
    ),
    "cifar10_long_cpu": (
        REPO / "configs/ablations/cifar10_long_cpu.yaml",
        REPO / "benchmarks/results/cifar10_long_cpu",
        CIFAR_SET,
    ),
    "imagenette112": (
        REPO / "configs/ablations/imagenette112_cpu.yaml",
        REPO / "benchmarks/results/imagenette112",
        {"data.root": "../shared/data/imagenette-112"},
    ),
}


@pytest.mark.parametrize("name", sorted(COMMITTED))
def test_every_committed_sweeps_finished_runs_stay_finished(name: str) -> None:
    """No change to how options resolve may make a committed run train again: each finished
    run of each committed sweep is still recognised as done, with its recorded settings."""
    sweep_file, results, extra = COMMITTED[name]
    if not results.is_dir():
        pytest.skip(f"no committed {name} results")
    runs = [
        r for r in load_sweep(sweep_file).runs(results, extra) if (r.root / "result.json").is_file()
    ]
    assert runs, "no finished run committed"
    for run in runs:
        row, why = completed(run, results)
        assert row is not None and why.startswith("done"), (run.key, why)


@pytest.mark.parametrize("name", sorted(COMMITTED))
def test_a_worker_receives_each_runs_spec_as_json_and_finds_its_finished_runs_done(
    name: str,
) -> None:
    """What a ``--jobs`` worker receives is JSON (no pickle): the run's :class:`RunSpec` and its
    resolved namespace. The run it rebuilds has the driver's settings byte for byte, so a
    finished run is as done in the worker as in the driver."""
    from visattn.ablate.job import RunTask
    from visattn.training.config import RunSpec

    sweep_file, results, extra = COMMITTED[name]
    if not results.is_dir():
        pytest.skip(f"no committed {name} results")
    sweep = load_sweep(sweep_file)
    firsts = {r.variant: r for r in reversed(sweep.runs(results, extra))}  # each variant's first
    for run in firsts.values():
        text = RunTask.of(run, sweep, results, 1, 1, None).to_json()
        task = RunTask.from_json(text)
        assert RunSpec.from_json(task.spec) == run.resolved.spec
        assert task.run.settings == run.settings and list(task.run.settings) == list(run.settings)
        if (run.root / "result.json").is_file():
            row, why = completed(task.run, results)
            assert row is not None and why.startswith("done"), (run.key, why)


@pytest.mark.skipif(not CIFAR_RESULTS.is_dir(), reason="no committed CIFAR-10 results")
def test_the_committed_cifar10_cut_off_runs_resume_and_a_changed_option_trains_again() -> None:
    """Beside the finished runs (each still done: the test above): a committed run that was cut
    off goes on from its checkpoint where that is on the machine, and the same sweep with an
    option changed would train a finished run again, naming the option."""
    sweep = load_sweep(CIFAR_SWEEP)
    runs = [r for r in sweep.runs(CIFAR_RESULTS, CIFAR_SET) if (r.root / "result.json").is_file()]
    assert runs, "no finished run committed"
    started = [
        r for r in sweep.runs(CIFAR_RESULTS, CIFAR_SET) if (r.root / "started.json").is_file()
    ]
    for run in started:
        if not (run.root / "result.json").exists() and any(run.root.rglob("last.ckpt")):
            assert resume_point(run) is not None, run.key  # a cut-off run goes on
    changed = sweep.runs(CIFAR_RESULTS, {**CIFAR_SET, "model.lr": 0.2})
    row, why = completed(next(r for r in changed if r.key == runs[0].key), CIFAR_RESULTS)
    assert row is None and "model.lr" in why


def test_an_old_marker_naming_a_foreign_class_stops_the_sweep_without_importing_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """P2: an old-format marker's options were resolved with the parser, which imports the
    classes they name; a marker is data that users commit and clone."""
    from visattn.models.checkpoint import UntrustedClassError

    (tmp_path / "evilmod.py").write_text(
        "import pathlib\npathlib.Path(__file__).with_name('imported.marker').write_text('ran')\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    record = {"settings": {"trainer.logger": '{"class_path": "evilmod.Evil"}'}}  # no format
    with pytest.raises(UntrustedClassError, match=r"trainer\.logger.*evilmod\.Evil"):
        run_config.changed_settings(record, {})
    assert not (tmp_path / "imported.marker").exists()
    # a bare class path as the value is caught too
    with pytest.raises(UntrustedClassError):
        run_config.changed_settings({"settings": {"trainer.logger": '"evilmod.Evil"'}}, {})
