"""``python -m visattn.ablate.worker TASK_JSON``: train one sweep run in this process (started by
the ``--jobs`` executor; see :mod:`visattn.ablate.executors`)."""

from __future__ import annotations

import json
import sys

from .executors import run_task


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        print("usage: python -m visattn.ablate.worker TASK_JSON", file=sys.stderr)
        return 2
    row = run_task(json.loads(args[0]))
    return 0 if row.get("status") == "ok" else 1


if __name__ == "__main__":
    sys.exit(main())
