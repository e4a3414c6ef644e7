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
