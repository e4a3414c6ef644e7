"""results.csv: one row per run, written atomically; and the per-variant statistics.

Columns (``RESULT_COLUMNS``, in this order):

- ``run``: ``<variant>/seed<k>``; ``variant``: the sweep variant; ``seed``: its seed_everything;
- ``status``: ``ok`` or ``failed``; ``error``: for a failed run, the first line of the exception
  (``Type: message``);
- ``model``: the backbone or model name trained; ``attention``: the resolved attention placement
  as JSON (``null`` for none);
- ``params``: parameters of the trained network; ``macs``: multiply-accumulates per image at the
  data's image size;
- ``latency_ms``: median eval-mode forward time at batch 1; ``batch_latency_ms``: the same at batch
  ``throughput_batch``; ``throughput``: images per second at that batch
  (``1000 * throughput_batch / batch_latency_ms``); ``profile_device``: where they were measured;
- ``wall_s``: wall time of the training call (``fit``, plus ``test`` where run); ``epochs``: epochs
  completed;
- ``val/acc``: best validation top-1 accuracy (a fraction in [0, 1]); ``val/acc_last``: that of
  the last epoch; ``test/acc``: test top-1 accuracy where tested (empty otherwise);
- ``loc/pointing``: pointing-game hit rate and ``loc/energy``: share of attention energy inside
  the target's box, each the mean over the ``loc/blocks`` spatial, hybrid and residual blocks
  scored (empty when the data has no boxes; see :mod:`visattn.localization`);
- ``log_dir``, ``metrics_csv``, ``ckpt``: the run's artefacts, relative to the results.csv folder.
"""

from __future__ import annotations

import csv
import io
import math
import statistics
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from scipy import stats as _stats

from ..utils import atomic_write_bytes, atomic_write_text

__all__ = [
    "NUMERIC_COLUMNS",
    "RESULT_COLUMNS",
    "MeanStd",
    "atomic_write_bytes",
    "atomic_write_text",
    "mean_std",
    "read_results",
    "welch_ci",
    "write_results",
]

RESULT_COLUMNS = (
    "run",
    "variant",
    "seed",
    "status",
    "error",
    "model",
    "attention",
    "params",
    "macs",
    "latency_ms",
    "batch_latency_ms",
    "throughput",
    "throughput_batch",
    "profile_device",
    "wall_s",
    "epochs",
    "val/acc",
    "val/acc_last",
    "test/acc",
    "loc/pointing",
    "loc/energy",
    "loc/blocks",
    "log_dir",
    "metrics_csv",
    "ckpt",
)
NUMERIC_COLUMNS = frozenset(
    {
        "seed",
        "params",
        "macs",
        "latency_ms",
        "batch_latency_ms",
        "throughput",
        "throughput_batch",
        "wall_s",
        "epochs",
        "val/acc",
        "val/acc_last",
        "test/acc",
        "loc/pointing",
        "loc/energy",
        "loc/blocks",
    }
)
_INT_COLUMNS = frozenset({"seed", "params", "macs", "throughput_batch", "epochs", "loc/blocks"})


def _cell(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, float):
        return "" if math.isnan(value) else repr(value)
    return str(value)


def write_results(path: str | Path, rows: Iterable[dict[str, Any]]) -> None:
    """Write ``rows`` (dicts keyed by :data:`RESULT_COLUMNS`) to ``path`` atomically.

    Raises:
        ValueError: a row has a key outside :data:`RESULT_COLUMNS`.
    """
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=RESULT_COLUMNS, lineterminator="\n")
    writer.writeheader()
    for row in rows:
        extra = sorted(set(row) - set(RESULT_COLUMNS))
        if extra:
            raise ValueError(f"results row {row.get('run')!r} has unknown column(s) {extra}")
        writer.writerow({k: _cell(row.get(k)) for k in RESULT_COLUMNS})
    atomic_write_text(path, buf.getvalue())


def _parse(column: str, text: str) -> Any:
    if column not in NUMERIC_COLUMNS:
        return text
    if text == "":
        return None
    return int(float(text)) if column in _INT_COLUMNS else float(text)


def read_results(path: str | Path) -> list[dict[str, Any]]:
    """Read a results.csv; numeric columns become int/float, empty cells ``None``."""
    with open(path, newline="", encoding="utf-8") as f:
        return [{k: _parse(k, v) for k, v in row.items()} for row in csv.DictReader(f)]


@dataclass(frozen=True)
class MeanStd:
    """Mean, sample standard deviation (``ddof=1``; ``nan`` for ``n < 2``) and count."""

    mean: float
    std: float
    n: int


def mean_std(values: Sequence[float]) -> MeanStd:
    """:class:`MeanStd` of the finite values (``nan`` mean for none)."""
    xs = [float(v) for v in values if v is not None and math.isfinite(float(v))]
    if not xs:
        return MeanStd(math.nan, math.nan, 0)
    return MeanStd(statistics.fmean(xs), statistics.stdev(xs) if len(xs) > 1 else math.nan, len(xs))


def welch_ci(a: MeanStd, b: MeanStd, confidence: float = 0.95) -> tuple[float, float, float]:
    """Difference of means ``a - b`` and its confidence interval by Welch's t (unequal variances).

    ``se = sqrt(s_a^2/n_a + s_b^2/n_b)``, degrees of freedom by Welch-Satterthwaite
    ``df = se^4 / ((s_a^2/n_a)^2/(n_a-1) + (s_b^2/n_b)^2/(n_b-1))``, interval
    ``diff -/+ t_{(1+confidence)/2, df} * se`` (Welch, Biometrika 1947).

    Returns:
        ``(diff, low, high)``; the bounds are ``nan`` when either side has fewer than 2 values,
        and equal ``diff`` when both sides have zero variance.
    """
    diff = a.mean - b.mean
    if a.n < 2 or b.n < 2:
        return diff, math.nan, math.nan
    va, vb = a.std**2 / a.n, b.std**2 / b.n
    se = math.sqrt(va + vb)
    if se == 0:
        return diff, diff, diff
    df = (va + vb) ** 2 / (va**2 / (a.n - 1) + vb**2 / (b.n - 1))
    half = float(_stats.t.ppf(0.5 + confidence / 2, df)) * se
    return diff, diff - half, diff + half
