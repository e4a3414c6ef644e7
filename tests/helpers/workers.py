"""A pytest plugin (``-p helpers.workers`` in pyproject's addopts): the suite runs in two
pytest-xdist workers, except when the command line names test ids (``file::test``) or a single
file, where starting workers would cost more than the tests; ``-n N`` given by hand always
wins."""

from __future__ import annotations

from pathlib import Path


def _targets(args: list[str]) -> list[str]:
    return [a for a in args if not a.startswith("-") and (("::" in a) or Path(a).suffix == ".py")]


def pytest_load_initial_conftests(early_config, parser, args: list[str]) -> None:
    given = any(a == "-n" or a.startswith(("-n", "--numprocesses")) for a in args)
    if not given:
        few = len(_targets(args)) == 1 and not any(Path(a).is_dir() for a in args if "::" not in a)
        args[:] = [*args, "-n", "0" if few else "2"]
