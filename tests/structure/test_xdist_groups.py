"""The suite's ``xdist_group`` marks hold: ``--dist loadgroup`` (pyproject's addopts) sends a
group's tests to one worker, so a group's shared fixture (the docs site, the YOLO and
leaderboard fixtures, a fresh interpreter) is built once and the multi-process tests do not run
beside each other. pytest-xdist carries the group as a suffix of the item's id; pytest 9.2's
structured ids drop it silently (pytest-xdist#1386), hence the ``pytest<9.2`` pin."""

from __future__ import annotations

import os

import pytest

GROUP = "xdist_group_check"


@pytest.mark.xdist_group(GROUP)
def test_a_grouped_test_carries_its_group_to_the_scheduler(request: pytest.FixtureRequest):
    if not os.environ.get("PYTEST_XDIST_WORKER"):
        pytest.skip("runs in a pytest-xdist worker (the whole suite's run)")
    if not request.config.getvalue("loadgroup"):
        pytest.skip("--dist is not loadgroup")
    assert request.node.nodeid.endswith(f"@{GROUP}"), (
        f"pytest {pytest.__version__} with pytest-xdist: the test id {request.node.nodeid!r} "
        "lost its group, so --dist loadgroup splits every xdist_group across workers; keep the "
        "pytest pin below 9.2 until pytest-xdist suffixes structured ids"
    )
