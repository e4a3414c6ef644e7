"""``python -m visattn.ablate.worker TASK_JSON``: train one sweep run in this process (started by
the ``--jobs`` executor; see :mod:`visattn.ablate.executors`)."""

from __future__ import annotations

import os
import sys

from .executors import DRIVER_ENV, die_with_parent, run_task_json


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        print("usage: python -m visattn.ablate.worker TASK_JSON", file=sys.stderr)
        return 2
    if os.environ.get(DRIVER_ENV):
        die_with_parent(int(os.environ[DRIVER_ENV]))
    row = run_task_json(args[0])
    return 0 if row.get("status") == "ok" else 1


if __name__ == "__main__":
    sys.exit(main())
