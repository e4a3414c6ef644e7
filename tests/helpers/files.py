"""Reading the CSV files that runs, sweeps and benchmarks write."""

from __future__ import annotations

import csv
from pathlib import Path


def read_csv(path: str | Path) -> list[dict[str, str]]:
    """The rows of the CSV file at ``path`` as dicts keyed by its header (all values strings)."""
    with open(path, newline="") as f:
        return list(csv.DictReader(f))
