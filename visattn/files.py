"""Files every run and sweep writes or checks: atomic writes, ``metrics.csv``, digests.

* :func:`atomic_write_bytes` / :func:`atomic_write_text`: readers see the old file or the new
  one, never a partial one (temporary file in the same folder, fsync, ``os.replace``).
* :func:`read_metrics_csv` / :func:`read_metric_curve`: the per-epoch ``metrics.csv`` every run
  writes (``visattn.training.callbacks.EpochMetricsCSV``).
* :func:`file_digest`: size and SHA-256 of a file (checkpoint integrity in sweep markers).

Nothing here needs an optional extra (no Lightning), so sweep files and reports can be read
without the ``train`` extra. Loading a trained run is :func:`visattn.training.load.load_run`.
"""

from __future__ import annotations

import csv
import hashlib
import os
import tempfile
from pathlib import Path
from typing import Any

__all__ = [
    "atomic_write_bytes",
    "atomic_write_text",
    "file_digest",
    "read_metric_curve",
    "read_metrics_csv",
]


def _umask() -> int:
    """The process's umask: from ``/proc/self/status`` where Linux gives it (reading it with
    ``os.umask`` means setting it for a moment, which other threads would see)."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("Umask:"):
                return int(line.split()[1], 8)
    except (OSError, ValueError):
        pass
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def _mode_for(path: Path) -> int:
    """The permissions a plain ``open(path, "w")`` would give: the existing file's, or 0666
    less the process's umask."""
    try:
        return path.stat().st_mode & 0o777
    except FileNotFoundError:
        return 0o666 & ~_umask()


def atomic_write_bytes(path: str | os.PathLike, data: bytes) -> None:
    """Write ``data`` to ``path`` so that readers see either the old or the new file, never a
    partial one: a temporary file in the same folder, flushed and fsynced, then ``os.replace``.
    An interruption (even ``KeyboardInterrupt``) leaves the old file and no temporary behind.
    The file gets the permissions ``open`` would give it (its old ones, or the umask's)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, _mode_for(path))  # mkstemp's 0600 would hide results from other users
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def atomic_write_text(path: str | os.PathLike, text: str) -> None:
    """:func:`atomic_write_bytes` for UTF-8 text."""
    atomic_write_bytes(path, text.encode("utf-8"))


def read_metrics_csv(path: str | os.PathLike) -> list[dict[str, Any]]:
    """Rows of a ``metrics.csv`` as dicts: ``epoch``/``step`` ints, other cells floats, empty
    cells ``None``."""
    with open(path, newline="", encoding="utf-8") as f:
        rows = list(csv.DictReader(f))
    out = []
    for row in rows:
        parsed: dict[str, Any] = {}
        for key, value in row.items():
            if value in ("", None):
                parsed[key] = None
            elif key in ("epoch", "step"):
                parsed[key] = int(float(value))
            else:
                parsed[key] = float(value)
        out.append(parsed)
    return out


def read_metric_curve(path: str | os.PathLike, key: str = "val/acc") -> dict[int, float]:
    """``{epoch: value}`` of ``key`` in a ``metrics.csv`` (the last non-empty value of each
    epoch). A missing file or column gives an empty dict."""
    if not Path(path).is_file():
        return {}
    curve: dict[int, float] = {}
    for row in read_metrics_csv(path):
        if row.get(key) is not None and row.get("epoch") is not None:
            curve[row["epoch"]] = row[key]
    return curve


def file_digest(path: str | os.PathLike, chunk: int = 1 << 20) -> dict[str, Any]:
    """``{"size": bytes, "sha256": hex digest}`` of a file."""
    h = hashlib.sha256()
    size = 0
    with open(path, "rb") as f:
        while block := f.read(chunk):
            h.update(block)
            size += len(block)
    return {"size": size, "sha256": h.hexdigest()}
