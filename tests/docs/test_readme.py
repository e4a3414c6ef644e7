"""The README's sweep snippet ("Compare blocks on your data") resolves as the real pass does,
every variant built; the README stays within its 200 lines."""

from __future__ import annotations

import re

from helpers.paths import REPO

README = REPO / "README.md"


def test_the_readmes_sweep_runs(tmp_path, monkeypatch, capsys) -> None:
    from visattn.ablate import run_sweep

    text = README.read_text()
    snippet = re.search(r"```yaml\n(# my_sweep\.yaml.*?)```", text, re.S).group(1)
    monkeypatch.chdir(REPO)  # base: configs/quickstart.yaml, as a user runs it from the checkout
    (tmp_path / "my_sweep.yaml").write_text(snippet)
    run_sweep(tmp_path / "my_sweep.yaml", tmp_path / "out", dry_run=True)
    printed = capsys.readouterr().out
    assert printed.count("my_sweep] run ") == 15  # 3 variants x 5 seeds


def test_the_readme_is_at_most_200_lines() -> None:
    assert len(README.read_text().splitlines()) <= 200


def _rows(name: str) -> dict[str, dict[str, str]]:
    import csv

    with open(REPO / "benchmarks" / "results" / name) as f:
        return {row["variant"].removeprefix("resnet20_"): row for row in csv.DictReader(f)}


def test_the_readmes_step_costs_are_the_committed_measurements() -> None:
    """Every ``block N.NNx`` of the README's step-cost line is that block's ratio in the file
    the sentence cites, and the bf16 figure is the plain network's speedup there."""
    line = re.search(r"<!-- steps -->(.*?)<!-- /steps -->", README.read_text(), re.S).group(1)
    amd, intel = line.split("on an Intel")
    after = _rows("steps_cpu.csv")
    pairs = re.findall(r"`(\w+)` ([\d.]+)x", amd)
    assert len(pairs) >= 4
    for block, ratio in pairs:
        assert float(ratio) == round(float(after[block]["ratio"]), 2), block
    on_intel = _rows("steps_cpu_intel.csv")
    pairs = re.findall(r"`(\w+)` ([\d.]+)x", intel)
    assert len(pairs) >= 4
    for block, ratio in pairs:
        assert float(ratio) == round(float(on_intel[block]["ratio"]), 2), block
    bf16 = float(re.search(r"step ([\d.]+)x faster", intel).group(1))
    assert bf16 == round(float(on_intel["none"]["bf16_speedup"]), 2)
    # and what bf16 costs in accuracy is the same-host paired check's difference
    cost = float(re.search(r"costs ([\d.]+) points of test accuracy", intel).group(1))
    check = (REPO / "benchmarks" / "results" / "precision_check_bf16_same_host.md").read_text()
    assert -cost == float(re.search(r"paired by seed: ([+-][\d.]+) points", check).group(1))


def test_the_readme_quotes_no_test_count() -> None:
    """Trial of round 7: the README's hand-kept count of tests drifted (4,519 passed against
    4,522 quoted); it quotes none."""
    text = README.read_text()
    assert not re.search(r"\b\d[\d,]* (passed|tests? pass)", text), "a test count in the README"
