"""CIFAR-10/100 read from the python pickles of Krizhevsky (2009), in torchvision's layout,
with an integrity check.

Layout: ``ROOT/cifar-10-batches-py/data_batch_1..5, test_batch``; ``ROOT/cifar-100-python/train,
test``. Each file's md5 is compared with torchvision's list of the official archive's sums before
anything is unpickled; a copy that differs (re-packed, truncated) is refused with a message
naming the file, unless ``verify=False`` (then a warning is logged).

The pickles are read by a restricted unpickler that resolves only the numpy array types the format
holds (:data:`PICKLE_GLOBALS`), so a file that names any other callable is refused before it
runs, with or without the md5 check.
"""

from __future__ import annotations

import hashlib
import logging
import pickle
from pathlib import Path
from typing import Any
from urllib.error import URLError

import numpy as np
from torchvision.datasets import CIFAR10, CIFAR100
from torchvision.datasets.utils import download_and_extract_archive

from .errors import DatasetIntegrityError, DatasetLayoutError, DatasetNotFoundError

__all__ = [
    "CIFAR_SPECS",
    "PICKLE_GLOBALS",
    "DatasetIntegrityError",
    "UnsafePickleError",
    "load_cifar",
    "locate_cifar",
    "md5sum",
]

log = logging.getLogger(__name__)
_UNVERIFIED: set[tuple[str, Path]] = set()  # (data set, folder) read unverified, said


class UnsafePickleError(DatasetIntegrityError, pickle.UnpicklingError):
    """A CIFAR file asks the unpickler for a callable outside :data:`PICKLE_GLOBALS`."""


#: the only globals a CIFAR batch may name: numpy's array reconstruction (the official files were
#: written by numpy 1.x, ``numpy.core``; numpy 2 calls it ``numpy._core``; protocol 5 rebuilds
#: arrays with ``_frombuffer``) and ``_codecs.encode``, which Python 3's protocol-2 pickles use
#: for ``bytes`` (a re-pickled copy). None of them runs code the file chooses.
PICKLE_GLOBALS = frozenset(
    {
        ("numpy", "ndarray"),
        ("numpy", "dtype"),
        *((f"numpy.{core}.multiarray", "_reconstruct") for core in ("core", "_core")),
        *((f"numpy.{core}.numeric", "_frombuffer") for core in ("core", "_core")),
        ("_codecs", "encode"),
    }
)


class _CifarUnpickler(pickle.Unpickler):
    """Unpickles plain containers and numpy arrays; any other global is refused unresolved."""

    def __init__(self, file: Any, path: Path) -> None:
        super().__init__(file, encoding="latin1")
        self.path = path

    def find_class(self, module: str, name: str) -> Any:
        if (module, name) not in PICKLE_GLOBALS:
            raise UnsafePickleError(
                f"{self.path}: refused to unpickle: the file asks for {module}.{name}, which a "
                "CIFAR batch never holds (only numpy arrays, lists, dicts, strings and numbers). "
                "It is not the official data and may run code; re-download it with "
                "--data.download true into an empty --data.root."
            )
        return super().find_class(module, name)


def _torchvision_spec(cls: Any, label_key: str) -> dict[str, Any]:
    return {
        "folder": cls.base_folder,
        "train": [tuple(x) for x in cls.train_list],
        "test": [tuple(x) for x in cls.test_list],
        "meta": (cls.meta["filename"], cls.meta["md5"], cls.meta["key"]),
        "label_key": label_key,
        "torchvision": cls,
    }


def _specs() -> dict[str, dict[str, Any]]:
    return {
        "cifar10": _torchvision_spec(CIFAR10, "labels"),
        "cifar100": _torchvision_spec(CIFAR100, "fine_labels"),
    }


#: file names and md5 sums of the official archives, taken from torchvision.
CIFAR_SPECS: dict[str, dict[str, Any]] = _specs()


def md5sum(path: str | Path, chunk: int = 1 << 20) -> str:
    h = hashlib.md5()
    with open(path, "rb") as f:
        while block := f.read(chunk):
            h.update(block)
    return h.hexdigest()


def _cifar_folder(name: str, root: Path) -> Path:
    """``root/<folder>``, or ``root`` itself when it already is the batches folder."""
    spec = CIFAR_SPECS[name]
    folder = root / spec["folder"]
    if not folder.is_dir() and (root / spec["train"][0][0]).is_file():
        return root
    return folder


def _missing_message(name: str, folder: Path, missing: list[str]) -> str:
    return (
        f"{name} not found: looked for {folder} (missing: {', '.join(missing)}). "
        f"Either download it with --data.download true (into --data.root), or point "
        f"--data.root PATH at the folder that contains {CIFAR_SPECS[name]['folder']}/."
    )


def locate_cifar(name: str, root: str | Path, *, download: bool = False) -> Path:
    """The folder holding ``name``'s files under ``root``, downloading the official archive
    (torchvision's URL and md5) first when files are missing and ``download`` is set.

    Raises:
        DatasetNotFoundError: (a ``FileNotFoundError``) files missing and ``download`` off;
            names the path and both fixes.
        ConnectionError: the download failed (no network, HTTP error); names the URL and the
            folder to fill by hand.
    """
    if name not in CIFAR_SPECS:
        raise ValueError(f"unknown CIFAR dataset {name!r}; choose from {sorted(CIFAR_SPECS)}")
    spec = CIFAR_SPECS[name]
    root = Path(root).expanduser()
    wanted = [f for f, _ in (*spec["train"], *spec["test"])] + [spec["meta"][0]]
    folder = _cifar_folder(name, root)
    missing = [f for f in wanted if not (folder / f).is_file()]
    if missing and download:
        cls = spec["torchvision"]
        root.mkdir(parents=True, exist_ok=True)
        try:
            download_and_extract_archive(cls.url, str(root), filename=cls.filename, md5=cls.tgz_md5)
        except URLError as e:  # no network, DNS, proxy, HTTP error
            raise ConnectionError(
                f"{name}: could not download {cls.url} into {root} ({getattr(e, 'reason', e)}). "
                f"Check the network, or fetch the archive on another machine and unpack it so "
                f"that {root / spec['folder']}/ holds its files, then run without "
                "--data.download."
            ) from e
        folder = root / spec["folder"]
        missing = [f for f in wanted if not (folder / f).is_file()]
    if missing:
        raise DatasetNotFoundError(_missing_message(name, folder, missing))
    return folder


def load_cifar(
    name: str,
    root: str | Path,
    *,
    train: bool,
    verify: bool = True,
    download: bool = False,
) -> tuple[np.ndarray, np.ndarray, list[str]]:
    """Read one CIFAR split into memory.

    Args:
        name: ``"cifar10"`` or ``"cifar100"`` (fine labels).
        root: folder holding ``cifar-10-batches-py/`` (or ``cifar-100-python/``), or that folder.
        train: the 50,000 training images, else the 10,000 test images.
        verify: compare every file's md5 with the official archive's (torchvision's list).
        download: fetch and extract the official archive into ``root`` first if files are missing.

    Returns:
        ``images`` ``(N, 32, 32, 3)`` uint8 RGB, ``labels`` ``(N,)`` int64, class names.

    Raises:
        DatasetNotFoundError: (a ``FileNotFoundError``) files missing and ``download`` is off
            (the message names the path).
        DatasetIntegrityError: an md5 differs and ``verify`` is on.
        UnsafePickleError: a file names a callable a CIFAR batch never holds (checked with or
            without ``verify``; nothing in the file runs).
    """
    if name not in CIFAR_SPECS:
        raise ValueError(f"unknown CIFAR dataset {name!r}; choose from {sorted(CIFAR_SPECS)}")
    spec = CIFAR_SPECS[name]
    root = Path(root).expanduser()
    files = spec["train"] if train else spec["test"]
    meta_name, meta_md5, meta_key = spec["meta"]
    wanted = [*files, (meta_name, meta_md5)]
    folder = locate_cifar(name, root, download=download)

    if verify:
        for fname, expected in wanted:
            actual = md5sum(folder / fname)
            if actual != expected:
                raise DatasetIntegrityError(
                    f"{name}: integrity check failed for {folder / fname}: md5 {actual}, "
                    f"expected {expected} (the official archive's). The file is corrupted or "
                    "a re-packed copy; re-download it with --data.download true into an empty "
                    "--data.root, or, if this is a re-packed copy you trust, pass "
                    "--data.verify false (a warning is then logged)."
                )
    elif (name, folder) not in _UNVERIFIED:  # said once a process, not once a split and stage
        _UNVERIFIED.add((name, folder))
        log.warning(
            "%s: integrity check disabled (--data.verify false): reading %s without comparing "
            "md5 sums with the official archive; results may not be comparable to published ones",
            name,
            folder,
        )

    images, labels = [], []
    for fname, _ in files:
        entry = _unpickle(folder / fname)
        data = np.asarray(entry["data"], dtype=np.uint8)
        if data.ndim != 2 or data.shape[1] != 3 * 32 * 32:
            raise DatasetLayoutError(
                f"{folder / fname}: 'data' has shape {data.shape}, expected (N, 3072)"
            )
        images.append(data.reshape(-1, 3, 32, 32).transpose(0, 2, 3, 1))
        labels.append(_batch_labels(entry, spec["label_key"], len(data), folder / fname))
    names = _unpickle(folder / meta_name).get(meta_key)
    if names is None:
        raise DatasetIntegrityError(f"{folder / meta_name}: no {meta_key!r} entry (class names)")
    classes = [c.decode() if isinstance(c, bytes) else str(c) for c in names]
    labels = _checked_labels(np.concatenate(labels), len(classes), f"{folder} ({name})")
    return np.ascontiguousarray(np.concatenate(images)), labels, classes


def _batch_labels(entry: dict[str, Any], key: str, n: int, path: Path) -> np.ndarray:
    if key not in entry:
        raise DatasetIntegrityError(f"{path}: no {key!r} entry (is this a CIFAR batch?)")
    labels = np.asarray(entry[key], dtype=np.int64).reshape(-1)
    if len(labels) != n:
        raise DatasetIntegrityError(f"{path}: {len(labels)} labels for {n} images")
    return labels


def _checked_labels(labels: np.ndarray, n_classes: int, what: str) -> np.ndarray:
    bad = (labels < 0) | (labels >= n_classes)
    if bad.any():
        first = int(np.flatnonzero(bad)[0])
        raise DatasetIntegrityError(
            f"{what}: {int(bad.sum())} label(s) outside 0..{n_classes - 1} (its classes), e.g. "
            f"{int(labels[first])} at image {first}: a damaged or mixed-up copy"
        )
    return labels


def _unpickle(path: Path) -> dict[str, Any]:
    """One CIFAR file: a Python-2 pickle of a dict with bytes keys (latin1 keeps the uint8 arrays
    intact), read by :class:`_CifarUnpickler`, so no code in the file runs."""
    try:
        with open(path, "rb") as f:
            entry = _CifarUnpickler(f, path).load()
    except UnsafePickleError:
        raise
    except (pickle.UnpicklingError, EOFError, ValueError, TypeError, IndexError) as e:
        raise DatasetIntegrityError(
            f"{path}: not a readable CIFAR batch ({type(e).__name__}: {e}); the file is "
            "truncated or is not a Python pickle. Download the data set again (--data.download "
            "true) or point --data.root at an intact copy"
        ) from e
    if not isinstance(entry, dict):
        raise DatasetLayoutError(
            f"{path}: expected a pickled dict (a CIFAR batch), got {type(entry)}"
        )
    return {k.decode() if isinstance(k, bytes) else k: v for k, v in entry.items()}
