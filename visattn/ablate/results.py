"""results.csv: one row per run, written atomically (the statistics over its rows are
:mod:`visattn.ablate.stats`).

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
- ``wall_s``: wall time of the training call (``fit``, plus ``test`` where run; a run resumed
  from a checkpoint adds its earlier pieces' time up to that checkpoint); ``epochs``: epochs
  completed;
- ``val/acc``: best validation top-1 accuracy (a fraction in [0, 1]); ``val/acc_last``: that of
  the last epoch; ``test/acc``: test top-1 accuracy where tested (empty otherwise);
  ``train/loss``, ``val/loss``: the last epoch's losses (from the run's ``metrics.csv``);
  ``attempts``: how often the run was started (more than 1 when a worker died and it was
  retried);
- ``loc/pointing``: pointing-game hit rate and ``loc/energy``: share of attention energy inside
  the target's box, each the mean over the ``loc/blocks`` spatial, hybrid and residual blocks
  scored (empty when the data has no boxes; see :mod:`visattn.visualize.localization`);
- ``gradcam/pointing`` and ``gradcam/energy``: the same two scores for Grad-CAM of the last stage
  for the true label (every network, the baseline included; see
  :func:`visattn.visualize.localization.score_gradcam`);
- ``val/acc_diff``, ``test/acc_diff``: this run's accuracy minus that of its baseline variant's
  run with the same seed (the per-seed differences the report's paired comparison averages;
  empty for baseline rows and for runs whose partner is missing or failed);
- ``log_dir``, ``metrics_csv``, ``ckpt``: the run's artefacts, relative to the results.csv folder;
  ``ckpt_size``, ``ckpt_sha256``: the checkpoint's size and hash when the run finished.
"""

from __future__ import annotations

import csv
import io
import math
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from ..files import atomic_write_bytes, atomic_write_text

__all__ = [
    "NUMERIC_COLUMNS",
    "PAIRED_METRICS",
    "RESULT_COLUMNS",
    "atomic_write_bytes",
    "atomic_write_text",
    "read_results",
    "with_paired_diffs",
    "write_results",
]

#: Every results.csv column, in order, with the type its cells are read back as.
_COLUMN_TYPES: dict[str, type] = {
    "run": str,
    "variant": str,
    "seed": int,
    "status": str,
    "error": str,
    "model": str,
    "attention": str,
    "params": int,
    "macs": int,
    "latency_ms": float,
    "batch_latency_ms": float,
    "throughput": float,
    "throughput_batch": int,
    "profile_device": str,
    "profile_cpu": str,
    "profile_load": float,
    "profile_threads": int,
    "num_classes": int,
    "wall_s": float,
    "epochs": int,
    "val/acc": float,
    "val/acc_last": float,
    "test/acc": float,
    "train/loss": float,
    "val/loss": float,
    "attempts": int,
    "loc/pointing": float,
    "loc/energy": float,
    "loc/blocks": int,
    "gradcam/pointing": float,
    "gradcam/energy": float,
    "val/acc_diff": float,
    "test/acc_diff": float,
    "log_dir": str,
    "metrics_csv": str,
    "ckpt": str,
    "ckpt_size": int,
    "ckpt_sha256": str,
}
RESULT_COLUMNS = tuple(_COLUMN_TYPES)
NUMERIC_COLUMNS = frozenset(c for c, t in _COLUMN_TYPES.items() if t is not str)
_INT_COLUMNS = frozenset(c for c, t in _COLUMN_TYPES.items() if t is int)
#: metrics compared per seed with the baseline (``<metric>_diff`` columns).
PAIRED_METRICS = ("val/acc", "test/acc")


def _cell(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, float):
        return "" if math.isnan(value) else repr(value)
    return str(value)


def with_paired_diffs(
    rows: Sequence[dict[str, Any]], baseline: str | Mapping[str, str] | None = None
) -> list[dict[str, Any]]:
    """Copies of ``rows`` with ``val/acc_diff`` and ``test/acc_diff`` filled in: the run's value
    minus that of the ``ok`` run of its baseline variant with the same seed (``None`` for
    baseline variants, failed runs and runs without such a partner).

    ``baseline``: the baseline variant (default: the first variant), or ``{variant: baseline}``.
    """
    first = rows[0]["variant"] if rows else None
    base_of = (
        (lambda v: baseline.get(v, first))
        if isinstance(baseline, Mapping)
        else (lambda v: baseline if baseline is not None else first)
    )
    ok = {(r["variant"], r["seed"]): r for r in rows if r.get("status") == "ok"}
    out = []
    for r in rows:
        r = dict(r)
        partner = ok.get((base_of(r["variant"]), r["seed"]))
        for m in PAIRED_METRICS:
            value = r.get(m) if r.get("status") == "ok" else None
            other = None if partner is None or partner is r else partner.get(m)
            is_base = base_of(r["variant"]) == r["variant"]
            r[f"{m}_diff"] = None if value is None or other is None or is_base else value - other
        out.append(r)
    return out


def write_results(
    path: str | Path,
    rows: Iterable[dict[str, Any]],
    *,
    baseline: str | Mapping[str, str] | None = None,
) -> None:
    """Write ``rows`` (dicts keyed by :data:`RESULT_COLUMNS`) to ``path`` atomically, with the
    per-seed differences to ``baseline`` (see :func:`with_paired_diffs`).

    Raises:
        ValueError: a row has a key outside :data:`RESULT_COLUMNS`.
    """
    rows = with_paired_diffs(list(rows), baseline)
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
