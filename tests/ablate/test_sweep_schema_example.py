"""The ablations guide's sweep-file example loads, and names every key a sweep file takes."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from visattn.ablate import sweep as sweep_module
from visattn.ablate.sweep import load_sweep

ROOT = Path(__file__).resolve().parents[2]
GUIDE = ROOT / "docs" / "guides" / "ablations.md"


def example() -> str:
    text = GUIDE.read_text()
    section = text[text.index("## The sweep file") :]
    return re.search(r"```yaml\n(.*?)```", section, re.S).group(1)


def _saved_example(monkeypatch, tmp_path) -> Path:
    """The example saved as configs/ablations/my_sweep.yaml beside a copy of the sweep it
    extends (the test writes nothing into configs/), run from the project root as the guide's
    commands are."""
    monkeypatch.chdir(ROOT)
    folder = tmp_path / "configs" / "ablations"
    folder.mkdir(parents=True)
    extended = ROOT / "configs" / "ablations" / "families_quick.yaml"
    (folder / extended.name).write_text(extended.read_text())
    (folder / "my_sweep.yaml").write_text(example())
    return folder


def test_the_guides_sweep_example_loads_as_the_file_it_says_it_is(monkeypatch, tmp_path) -> None:
    """Saved beside the sweep it extends (a copy, so the test writes nothing into configs/),
    from the project root as the guide's commands run."""
    folder = _saved_example(monkeypatch, tmp_path)
    sweep = load_sweep(folder / "my_sweep.yaml")
    assert sweep.name == "my_sweep" and sweep.baseline == "none"
    names = [v.name for v in sweep.variants]
    assert "none" in names and "se" in names  # plus those inherited from families_quick
    assert len(sweep.runs(tmp_path / "out")) == 3 * len(names)


def test_the_example_names_every_key_the_loader_accepts() -> None:
    data = yaml.safe_load(example())
    assert set(data) == set(sweep_module._TOP_KEYS)
    assert set().union(*(v.keys() for v in data["variants"])) == set(sweep_module._VARIANT_KEYS)
    assert set(data["profile"]) == set(sweep_module._PROFILE_KEYS)


def test_the_guides_sweep_example_runs(monkeypatch, tmp_path, capsys) -> None:
    """T2: the example's ``set: {model.attention: se}`` (a block name as the placement) failed
    in the real pass with 'Expected a path', while its dry run printed every run and exited 0.
    The dry run now checks every variant as the real pass does; each one resolves and builds."""
    from visattn.ablate import run_sweep

    folder = _saved_example(monkeypatch, tmp_path)
    run_sweep(folder / "my_sweep.yaml", tmp_path / "out", dry_run=True)
    printed = capsys.readouterr().out
    assert "my_sweep" in printed and "--model.attention=se" in printed


def test_a_dry_run_refuses_what_the_real_pass_would(tmp_path) -> None:
    from visattn.ablate import run_sweep

    data = yaml.safe_load(example())
    data.pop("extends")
    data["base"] = [str(ROOT / "configs" / "quickstart.yaml")]
    data["variants"].append({"name": "typo", "set": {"model.attention": "sse"}})
    # as a mapping, jsonargparse reports the name only as "Does not validate against any of
    # the Union subtypes": the sweep says what train_cls.py says, the unknown name
    data["variants"].append({"name": "typo2", "set": {"model.attention": {"name": "sse"}}})
    path = tmp_path / "sweep.yaml"
    path.write_text(yaml.safe_dump(data))
    with pytest.raises(ValueError) as info:
        run_sweep(path, tmp_path / "out", dry_run=True)
    said = str(info.value)
    assert "variants 'typo', 'typo2': UnknownBlockError: unknown block 'sse'; did you mean" in said
