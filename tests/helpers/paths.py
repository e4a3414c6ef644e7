"""Where the checkout and the real data are."""

from __future__ import annotations

from pathlib import Path

#: the repository root (``configs/``, ``benchmarks/``, ``docs/``)
REPO = Path(__file__).resolve().parents[2]


def _find_shared_data() -> Path:
    """The nearest ``shared/data`` folder above the checkout (a clone or a worktree next to it);
    ``REPO.parent / "shared" / "data"`` when there is none (it then does not exist)."""
    for parent in REPO.parents:
        if (parent / "shared" / "data").is_dir():
            return parent / "shared" / "data"
    return REPO.parent / "shared" / "data"


#: the real data sets (CIFAR-10 in ``cifar-10-batches-py``), read by the tests marked ``data``;
#: tests/conftest.py skips those when the folder their marker names is absent
SHARED_DATA = _find_shared_data()
