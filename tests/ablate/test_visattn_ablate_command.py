"""``python -m visattn ablate`` is ``python -m visattn.ablate`` (every option passed through),
and ``python -m visattn --help`` lists it next to blocks, models and export."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("lightning")

from helpers.paths import REPO

from visattn.__main__ import main

SWEEP = """\
name: two_variants
base: [{quickstart}]
seeds: [0, 1]
set: {{trainer.max_epochs: 1, data.num_train: 64}}
variants:
  - {{name: none, set: {{model.attention: null}}}}
  - {{name: se, set: {{model.attention: {{name: se}}}}}}
"""


def _sweep(tmp_path: Path) -> Path:
    quickstart = REPO / "configs" / "quickstart.yaml"
    path = tmp_path / "sweep.yaml"
    path.write_text(SWEEP.format(quickstart=quickstart))
    return path


def test_help_lists_the_ablate_command(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as done:
        main(["--help"])
    assert done.value.code == 0
    out = capsys.readouterr().out
    assert "{blocks,models,weights,export,ablate,yolo}" in out and "run or resume a sweep" in out


def test_ablate_help_shows_the_sweep_options(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as done:
        main(["ablate", "--help"])
    assert done.value.code == 0
    out = capsys.readouterr().out
    for option in ("--out", "--jobs", "--dry-run", "--report-only", "--executor", "--set"):
        assert option in out, option


def test_ablate_dry_run_equals_the_module_command(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from visattn.ablate.__main__ import main as ablate_main

    sweep = _sweep(tmp_path)
    args = [str(sweep), "--out", str(tmp_path / "out"), "--dry-run", "--set", "data.batch_size=8"]
    assert ablate_main(args) == 0
    expected = capsys.readouterr().out
    assert main(["ablate", *args]) == 0
    assert capsys.readouterr().out == expected
    assert expected.count("--data.batch_size=8") == 4  # 2 variants x 2 seeds, the --set applied
    assert not (tmp_path / "out" / "results.csv").exists()  # a dry run trains nothing


def test_ablate_errors_come_from_the_sweep_parser(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as done:
        main(["ablate", "sweep.yaml"])  # --out missing
    assert done.value.code == 2
    assert "--out" in capsys.readouterr().err
