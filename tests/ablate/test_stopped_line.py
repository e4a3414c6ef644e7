"""A stopped sweep says so in one line of its own: what was kept, and that the same command
resumes (trial of round 7: after Ctrl+C a sweep printed no line of its own; inside a fit,
Lightning turns Ctrl+C into ``SystemExit(1)``, which went past the sweep's handler)."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from helpers.ablate import write_sweep

import visattn.ablate.__main__ as command

#: what ``--join`` reads of a planned join before it trains
_JOIN = SimpleNamespace(
    sweep=SimpleNamespace(name="mine"), table="table", rows=[], missing=[], mine=["mine"], own=None
)


def _interrupting(exc: BaseException) -> Any:
    def run_sweep(*args: Any, **kwargs: Any) -> list:
        raise exc

    return run_sweep


@pytest.mark.parametrize(
    ("exc", "why"),
    [
        (KeyboardInterrupt(), ""),
        (SystemExit(1), ""),  # Lightning's Ctrl+C inside a fit
        (KeyboardInterrupt("signal SIGTERM"), " (signal SIGTERM)"),
    ],
    ids=["ctrl-c", "ctrl-c-in-fit", "sigterm"],
)
@pytest.mark.parametrize("join", [False, True], ids=["sweep", "join"])
def test_a_stopped_sweep_prints_what_was_kept_and_how_to_resume(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    exc: BaseException,
    why: str,
    join: bool,
) -> None:
    path = write_sweep(tmp_path, [{"name": "none", "set": {"model.attention": None}}], seeds=(0,))
    monkeypatch.setattr(command, "run_sweep", _interrupting(exc))
    argv = [str(path), "--out", str(tmp_path / "out")]
    if join:
        table = tmp_path / "table"
        table.mkdir()
        monkeypatch.setattr(command, "plan_join", lambda *a: _JOIN)
        monkeypatch.setattr(command, "write_joined_report", lambda *a: table / "joined.md")
        argv += ["--join", str(table)]
    assert command.main(argv) == 130
    err = [ln for ln in capsys.readouterr().err.splitlines() if ln.strip()]
    assert err == [f"stopped{why}: {command.STOPPED}"]
    assert "finished runs are kept" in err[0] and "same command again to resume" in err[0]
