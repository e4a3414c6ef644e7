"""The measured part of the ``slow`` tier (tests/helpers/slow_list.py) is read as written."""

from __future__ import annotations

from pathlib import Path

from helpers import slow_list

ROOT = Path(__file__).resolve().parents[2]


def test_durations_add_setup_call_and_teardown_and_skip_other_lines() -> None:
    text = (
        "============ slowest durations ============\n"
        "2.50s call     tests/a/test_x.py::test_one[se-{'k': 1}]\n"
        "0.75s setup    tests/a/test_x.py::test_one[se-{'k': 1}]\n"
        "0.01s teardown tests/a/test_x.py::test_two\n"
        "(3 durations < 0.005s hidden.  Use -vv to show these durations.)\n"
    )
    times = slow_list.durations(text)
    assert times == {
        "tests/a/test_x.py::test_one[se-{'k': 1}]": 3.25,
        "tests/a/test_x.py::test_two": 0.01,
    }


def test_durations_name_grouped_tests_as_collection_does() -> None:
    """``--dist loadgroup`` reports a grouped test as ``<id>@<group>``; an ``@`` inside the
    parameters stays."""
    text = (
        "4.00s call     tests/a/test_x.py::test_one[SIGKILL]@multiprocess\n"
        "1.00s setup    tests/a/test_x.py::test_two@docs_site\n"
        "0.50s call     tests/a/test_x.py::test_three[a@b]\n"
    )
    assert slow_list.durations(text) == {
        "tests/a/test_x.py::test_one[SIGKILL]": 4.0,
        "tests/a/test_x.py::test_two": 1.0,
        "tests/a/test_x.py::test_three[a@b]": 0.5,
    }


def test_the_list_skips_comments_and_names_files_that_exist(tmp_path: Path) -> None:
    listed = tmp_path / "slow.txt"
    listed.write_text("# header\n\ntests/a.py::test_b\n")
    assert slow_list.load(listed) == {"tests/a.py::test_b"}
    assert slow_list.load(tmp_path / "absent.txt") == frozenset()
    files = {node.split("::")[0] for node in slow_list.load()}
    assert files and all((ROOT / f).is_file() for f in files), "stale tests/slow_tests.txt"
