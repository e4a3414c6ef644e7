"""The ``slow`` tier: ``tests/slow_tests.txt``, the one place that says which tests are slow.

``-m "not slow"`` is the quick pass a developer runs between edits. It leaves out the tests a
timed run found over the list's threshold (its first line; :data:`THRESHOLD_S` by default): a
few percent of the tests, which take about half of the default run's time (small trainings,
sweeps, exports, whole-network builds). They stay in the default run. The list is data, written
from a timed run by this module::

    python -m pytest -q -m "not slow" --durations=0 > durations.txt
    python tests/helpers/slow_list.py durations.txt --add --note "machine, date"

(``--add`` keeps the tests already listed, which such a run does not time; without it the list
is replaced, from a run of ``-m "not slow or slow"``.)

A node id that no longer exists is ignored (a renamed test runs in the quick pass until the list
is written again).
"""

from __future__ import annotations

import argparse
import re
from collections import Counter
from pathlib import Path

PATH = Path(__file__).resolve().parents[1] / "slow_tests.txt"
_LINE = re.compile(r"^([\d.]+)s (?:call|setup|teardown)\s+(\S.*?)\s*$")
#: the one statement of the threshold, then one line per timed pass that wrote the list
_HEADER = (
    "# Tests over {over:g} s (setup + call + teardown) in a timed quick pass on an idle machine; "
    "marked slow by tests/conftest.py.\n"
)
_PASS = "# Written by tests/helpers/slow_list.py: {note}\n"
#: seconds (setup + call + teardown, on 2 cores) over which a test is slow
THRESHOLD_S = 1.0


def load(path: Path = PATH) -> frozenset[str]:
    """The node ids listed in ``path`` (none when it is absent)."""
    if not path.is_file():
        return frozenset()
    lines = path.read_text().splitlines()
    return frozenset(s for s in (line.strip() for line in lines) if s and not s.startswith("#"))


def _text(path: Path) -> str:
    return path.read_text() if path.is_file() else ""


def _without_group(nodeid: str) -> str:
    """The node id without the ``@<group>`` that ``--dist loadgroup`` appends to a test marked
    ``xdist_group`` (an ``@`` after the last ``]``, as pytest-xdist reads it): the list names
    tests as collection sees them."""
    at = nodeid.rfind("@")
    return nodeid[:at] if at > nodeid.rfind("]") else nodeid


def durations(text: str) -> Counter[str]:
    """Seconds per node id (setup, call and teardown added) from pytest's ``--durations=0``."""
    out: Counter[str] = Counter()
    for line in text.splitlines():
        m = _LINE.match(line)
        if m:
            out[_without_group(m.group(2))] += float(m.group(1))
    return out


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("durations", type=Path, help="output of pytest --durations=0")
    parser.add_argument(
        "--over", type=float, default=THRESHOLD_S, help=f"seconds (default {THRESHOLD_S:g})"
    )
    parser.add_argument("--note", default="", help="where and how the times were measured")
    parser.add_argument("--add", action="store_true", help="keep the tests already listed")
    args = parser.parse_args(argv)
    times = durations(args.durations.read_text())
    if not times:
        raise SystemExit(f"{args.durations}: no '--durations=0' lines found")
    slow = sorted({t for t, s in times.items() if s > args.over} | (load() if args.add else set()))
    kept = sum(s for t, s in times.items() if s <= args.over)
    old = _text(PATH).splitlines() if args.add else []
    passes = [line + "\n" for line in old if line.startswith("# Written by")]
    header = _HEADER.format(over=args.over) + "".join(passes)
    header += _PASS.format(note=args.note or "no note")
    PATH.write_text(header + "".join(f"{t}\n" for t in slow))
    print(
        f"timed: {len(times)} tests, {sum(times.values()):.0f} s; over {args.over:g} s: "
        f"{sum(times.values()) - kept:.0f} s; {len(slow)} tests listed in {PATH}"
    )


if __name__ == "__main__":
    main()
