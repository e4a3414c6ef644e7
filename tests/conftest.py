"""Fixtures and hooks of the whole suite: a seeded random state and one torch thread per test,
no log handler left on a test's closed output stream, the tests marked ``data`` skipped when the
real data is absent, the tests listed in tests/slow_tests.txt marked ``slow``
(tests/helpers/slow_list.py), and the ``heavy`` tier (see tests/helpers/tiers.py) deselected
unless ``-m`` names it."""

from __future__ import annotations

import sys

import pytest
import torch
from helpers import slow_list
from helpers.logs import rebind_closed_handlers
from helpers.paths import SHARED_DATA


@pytest.fixture(autouse=True)
def _own_cache_dir(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch):
    """visattn's cache (image-check results) in the test session's temporary folder, never in
    the user's ~/.cache."""
    monkeypatch.setenv("VISATTN_CACHE_DIR", str(tmp_path_factory.getbasetemp() / "visattn-cache"))


@pytest.fixture(autouse=True)
def _seed() -> None:
    """Every test starts from the same random state, so failures reproduce."""
    torch.manual_seed(0)


@pytest.fixture(autouse=True)
def _one_torch_thread():
    """One intra-op thread: on 2 CPU cores shared with other jobs, OpenMP threads spinning against
    other processes make small forward passes many times slower. Results do not depend on it."""
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


#: the fixtures that give a test output streams of its own, closed when it ends
CAPTURE_FIXTURES = frozenset({"capsys", "capsysbinary", "capfd", "capfdbinary"})


@pytest.fixture(autouse=True)
def _log_handlers_keep_an_open_stream(request: pytest.FixtureRequest):
    """A library imported for the first time inside a test that captures its output binds its
    log handler to that test's stream (tests/helpers/logs.py): after such a test, such a handler
    writes to the session's stream, so no test's result depends on which ran before it. (The
    session's own capture stream stays open: other tests leave nothing to mend.)"""
    yield
    if CAPTURE_FIXTURES.intersection(request.fixturenames):
        rebind_closed_handlers(sys.stderr)


def pytest_configure(config: pytest.Config) -> None:
    # pytest-xdist registers this marker itself; registered here too so that a run without
    # xdist (`-p no:xdist`) still passes --strict-markers
    config.addinivalue_line(
        "markers", "xdist_group(name): run these tests in one pytest-xdist worker"
    )


def pytest_runtest_setup(item: pytest.Item) -> None:
    """A test marked ``data`` (``@pytest.mark.data`` or ``@pytest.mark.data("<folder>")``, by
    default ``cifar-10-batches-py``) reads ``SHARED_DATA / folder``; skipped when it is absent."""
    marker = item.get_closest_marker("data")
    if marker is not None:
        folder = SHARED_DATA / (marker.args[0] if marker.args else "cifar-10-batches-py")
        if not folder.is_dir():
            pytest.skip(f"no real data at {folder}")


@pytest.hookimpl(tryfirst=True)  # before pytest's own -m deselection reads the markers
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    measured = slow_list.load()  # the measured part of the slow tier (tests/helpers/slow_list.py)
    for item in items:
        if item.nodeid in measured:
            item.add_marker(pytest.mark.slow)
    # The one place the heavy tier is deselected: unless the -m expression names `heavy`
    # (`pytest -m heavy`, `-m "heavy or not heavy"`), its cases do not run.
    if "heavy" not in (config.getoption("markexpr") or ""):
        heavy = [item for item in items if item.get_closest_marker("heavy")]
        if heavy:
            config.hook.pytest_deselected(items=heavy)
            items[:] = [item for item in items if not item.get_closest_marker("heavy")]
