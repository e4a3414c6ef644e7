"""ImageFolder data: ``ROOT/<split>/<class>/<image>`` files, checked before training.

Checks, all run by :class:`~visattn.data.VisattnDataModule` before the first step:

* **Class folders** (:func:`check_class_folders`): every split's class folders hold at least one
  image, and every split has the same class list as ``train`` (an empty folder would otherwise
  become an extra output, and a folder only in ``val`` would be silently dropped). Errors name the
  exact folders.
* **Image files** (:func:`verify_images`): every file is checked, in parallel threads, once;
  results are cached by path, size and modification time, so later runs only check new or
  changed files. Both modes agree with OpenCV, which reads the images for training:
  ``"fast"`` checks the header and that the file is complete for its format (PIL ``verify``
  and PNG chunk CRCs; a JPEG's end-of-image marker; a TIFF's strips inside the file; the raw
  pixel bytes of BMP, netpbm and uncompressed TIFF read), and refuses what OpenCV cannot decode
  (another format under an image extension, TIFF samples over 16 bits); ``"full"`` adds the
  decode training does (``cv2.imread``) for every file. A bad file is reported by path.
  The results are cached under ``$VISATTN_CACHE_DIR`` (default ``$XDG_CACHE_HOME/visattn``
  or ``~/.cache/visattn``), keyed by the split folder; nothing is written into the data.
* **Hidden folders and files** (a name starting with ``.``, e.g. ``.ipynb_checkpoints`` or
  macOS's ``._x.jpg``) are no class and no sample.
"""

from __future__ import annotations

import functools
import hashlib
import json
import logging
import os
import sys
import time
from collections.abc import Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np
import torch
from PIL import Image
from torch.utils.data import Dataset

from .._extras import missing_extra
from .arrays import Transform, to_tensor_uint8
from .errors import DatasetLayoutError, DatasetNotFoundError

__all__ = [
    "IMAGE_EXTENSIONS",
    "IMAGE_FORMATS",
    "VERIFY_MODES",
    "BadImageError",
    "ImageFolderDataset",
    "check_class_folders",
    "find_classes",
    "verify_images",
]

log = logging.getLogger(__name__)

#: the file extensions an ImageFolder reads: the formats OpenCV (which decodes them for training)
#: reads, see :data:`IMAGE_FORMATS`.
IMAGE_EXTENSIONS = (".jpg", ".jpeg", ".png", ".bmp", ".ppm", ".tif", ".tiff", ".webp")
#: the formats (PIL's names) behind :data:`IMAGE_EXTENSIONS`; a file holding another one is bad.
IMAGE_FORMATS = ("JPEG", "PNG", "BMP", "PPM", "TIFF", "WEBP")
#: OpenCV's TIFF reader takes samples of at most this many bits (no float32 or int32 TIFF).
OPENCV_TIFF_MAX_BITS = 16
#: ``verify_images`` modes, weakest last.
VERIFY_MODES = ("full", "fast", "off")
#: folders with at least this many files get a progress bar while they are verified.
PROGRESS_MIN_FILES = 2000
_CACHE_VERSION = 2  # 2: checks that agree with OpenCV
#: the cache file older versions wrote into the split folder (hidden: no class, no sample)
CACHE_NAME = ".visattn-verify-images.json"


@functools.cache
def _opencv() -> ModuleType:
    """OpenCV, which decodes the images for training (the ``train`` extra): imported when the
    first image is read (once; every image of a data loader asks), so that the folder checks and
    the rest of ``visattn.data`` work without it."""
    try:
        import cv2
    except ImportError as e:
        raise missing_extra(e, "train", "reading ImageFolder images (OpenCV)") from e
    return cv2


class BadImageError(ValueError):
    """Image files that cannot be decoded; ``bad`` maps each path to the reason."""

    def __init__(self, message: str, bad: dict[str, str]) -> None:
        super().__init__(message)
        self.bad = bad


def _is_hidden(path: Path, folder: Path) -> bool:
    return any(part.startswith(".") for part in path.relative_to(folder).parts)


def _image_files(folder: Path) -> list[Path]:
    """Image files under ``folder``, at any depth; hidden ones (``._x.jpg``, macOS metadata) and
    those in hidden folders are skipped."""
    return sorted(
        p
        for p in folder.rglob("*")
        if p.suffix.lower() in IMAGE_EXTENSIONS and not _is_hidden(p, folder)
    )


def find_classes(directory: str | Path) -> list[str]:
    """Sorted names of the sub-folders of ``directory`` (the classes of an ImageFolder split);
    hidden folders (``.ipynb_checkpoints``, any name starting with ``.``) are skipped."""
    directory = Path(directory)
    if not directory.is_dir():
        raise DatasetNotFoundError(
            f"ImageFolder split not found: {directory} (expected ROOT/train/<class>/*.jpg and "
            "ROOT/val/<class>/*.jpg; pass --data.root PATH pointing at ROOT)"
        )
    classes = sorted(p.name for p in directory.iterdir() if p.is_dir() and p.name[0] != ".")
    here = directory.resolve()
    loops = [c for c in classes if here.is_relative_to((directory / c).resolve())]
    if loops:
        raise DatasetLayoutError(
            f"class folder(s) {loops} of {directory} link back to the split itself or a folder "
            "above it: they would be a class holding every other class's images. Remove the "
            "link(s)"
        )
    if not classes:
        raise DatasetNotFoundError(f"no class folders in {directory}")
    return classes


def check_class_folders(root: str | Path, splits: Sequence[str] = ("train", "val")) -> list[str]:
    """The class list of an ImageFolder ``root``, checked across ``splits``.

    Returns:
        the sorted class folders of ``root/<splits[0]>``.

    Raises:
        FileNotFoundError: a split folder is missing or has no class folders.
        ValueError: fewer than two classes, a class folder holds no image, or the splits' class
            lists differ; the message names every offending folder.
    """
    root = Path(root)
    found = {s: find_classes(root / s) for s in splits}
    first, classes = splits[0], found[splits[0]]
    if len(classes) < 2:
        raise DatasetLayoutError(
            f"ImageFolder {root}: {root / first} has one class folder ({classes[0]}); a "
            "classifier needs at least two (one sub-folder of images per class)"
        )
    problems = []
    for split, names in found.items():
        empty = [root / split / c for c in names if not _image_files(root / split / c)]
        if empty:
            problems.append(
                f"class folder(s) with no images ({', '.join(IMAGE_EXTENSIONS)}): "
                + ", ".join(str(p) for p in empty)
                + " (an empty folder would become an extra class: add images or remove it)"
            )
        if split == first:
            continue
        extra = [root / split / c for c in names if c not in classes]
        missing = [root / split / c for c in classes if c not in names]
        if extra:
            problems.append(
                f"class folder(s) in {split} but not in {first}: "
                + ", ".join(str(p) for p in extra)
                + f" (their images would be ignored; add them to {root / first} or remove them)"
            )
        if missing:
            problems.append(
                f"class folder(s) of {first} missing from {split}: "
                + ", ".join(str(p) for p in missing)
            )
    if problems:
        raise DatasetLayoutError(
            f"ImageFolder {root}: {first} and the other splits must have the same non-empty "
            "class folders:\n  " + "\n  ".join(problems)
        )
    return classes


# ---- image verification --------------------------------------------------------------------


def _structure_problem(im: Any, path: str) -> str | None:
    """What makes an opened image unreadable for OpenCV or incomplete, from its header and the
    file's size (no pixel decode), or None."""
    size = os.path.getsize(path)
    if im.format not in IMAGE_FORMATS:
        return (
            f"{im.format} data under a {Path(path).suffix} name: not a format the loader reads "
            f"({', '.join(IMAGE_FORMATS)})"
        )
    if im.format == "TIFF":
        bits = im.tag_v2.get(258) or (1,)
        bits = bits if isinstance(bits, tuple) else (bits,)
        if max(bits) > OPENCV_TIFF_MAX_BITS:
            return (
                f"TIFF with {max(bits)}-bit samples (mode {im.mode}): OpenCV, which reads the "
                f"images for training, reads at most {OPENCV_TIFF_MAX_BITS}-bit samples; convert "
                "it to 8 or 16 bits"
            )
        for offsets, counts in ((273, 279), (324, 325)):  # strips, tiles
            starts, lengths = im.tag_v2.get(offsets), im.tag_v2.get(counts)
            if starts and lengths:
                end = max(o + n for o, n in zip(starts, lengths))
                if end > size:
                    return f"truncated TIFF (its data runs to byte {end}, the file has {size})"
    if im.format == "BMP":
        with open(path, "rb") as f:
            declared = int.from_bytes(f.read(6)[2:6], "little")  # bfSize
        if declared > size:
            return f"truncated BMP (its header says {declared} bytes, the file has {size})"
    return None


def _check_file(path: str, mode: str) -> str | None:
    """None when ``path`` passes ``mode``'s checks (see :func:`verify_images`), else the
    reason."""
    try:
        with Image.open(path) as im:
            problem = _structure_problem(im, path)
            if problem:
                return problem
            if all(tile[0] == "raw" for tile in im.tile):
                im.load()  # raw pixel bytes (BMP, netpbm, plain TIFF): reading them is the check
            else:
                im.verify()  # header and structure, no pixel decode
            if im.format == "JPEG":
                with open(path, "rb") as f:
                    f.seek(max(os.path.getsize(path) - 64, 0))
                    if b"\xff\xd9" not in f.read():
                        return "truncated JPEG (no end-of-image marker)"
    except Exception as e:  # PIL raises many types (OSError, SyntaxError, ValueError, ...)
        return f"{type(e).__name__}: {e}"
    cv2 = _opencv() if mode == "full" else None
    if cv2 is not None and cv2.imread(path, cv2.IMREAD_COLOR) is None:
        return "OpenCV, which reads the images for training, cannot decode it"
    return None


def _cache_file(root: Path) -> Path:
    """Where the results for the files under ``root`` are cached: in ``$VISATTN_CACHE_DIR``,
    else ``$XDG_CACHE_HOME/visattn``, else ``~/.cache/visattn``; never in the data folder (a
    file there would dirty git- or DVC-tracked data and show up in scripts that list classes)."""
    env = os.environ.get("VISATTN_CACHE_DIR")
    xdg = os.environ.get("XDG_CACHE_HOME")
    base = Path(env) if env else (Path(xdg) if xdg else Path.home() / ".cache") / "visattn"
    digest = hashlib.sha1(str(root.resolve()).encode()).hexdigest()[:16]
    return base / "verify_images" / f"{root.name}-{digest}.json"


def _load_cache(path: Path) -> dict[str, list]:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    if not isinstance(data, dict) or data.get("version") != _CACHE_VERSION:
        return {}
    files = data.get("files")
    return files if isinstance(files, dict) else {}


def _save_cache(path: Path, files: dict[str, list]) -> None:
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        tmp.write_text(json.dumps({"version": _CACHE_VERSION, "files": files}))
        os.replace(tmp, path)
    except OSError as e:  # a cache that cannot be written only costs time
        log.warning("could not write the image-verification cache %s: %s", path, e)


class _Progress:
    """A one-line progress count on stderr (only for large folders)."""

    def __init__(self, total: int, label: str, enabled: bool) -> None:
        self.total, self.label, self.enabled = total, label, enabled
        self.done, self.last = 0, 0.0

    def update(self, n: int = 1) -> None:
        self.done += n
        now = time.monotonic()
        if self.enabled and (now - self.last > 0.5 or self.done == self.total):
            self.last = now
            end = "\n" if self.done == self.total else ""
            print(f"\r{self.label}: {self.done}/{self.total}", end=end, file=sys.stderr, flush=True)


def verify_images(
    paths: Iterable[str | Path],
    mode: str = "fast",
    *,
    cache_root: str | Path | None = None,
    workers: int | None = None,
    progress: bool | None = None,
) -> dict[str, str]:
    """Check that image files decode.

    Args:
        paths: image files.
        mode: ``"fast"`` (header, structure and completeness, formats OpenCV reads),
            ``"full"`` (that, and every file decoded with OpenCV as in training) or ``"off"``.
        cache_root: the folder holding ``paths``; its results are cached (keyed by path, size
            and modification time) under ``$VISATTN_CACHE_DIR`` (default
            ``~/.cache/visattn``), in a file named after ``cache_root``, never inside it.
            None: no cache.
        workers: parallel threads (default: the CPU count, at most 8).
        progress: print a progress count; None: when there are at least
            :data:`PROGRESS_MIN_FILES` files to check.

    Returns:
        ``{path: reason}`` for every bad file (empty when all are good).
    """
    if mode not in VERIFY_MODES:
        raise ValueError(f"verify_images must be one of {list(VERIFY_MODES)}, got {mode!r}")
    if mode == "full":
        _opencv()  # a missing OpenCV is named before any file is checked
    paths = [str(p) for p in paths]
    if mode == "off" or not paths:
        return {}
    strength = {"fast": 1, "full": 2}
    cache_path = None if cache_root is None else _cache_file(Path(cache_root))
    cache = _load_cache(cache_path) if cache_path is not None else {}
    bad: dict[str, str] = {}
    todo: list[tuple[str, list]] = []
    for p in paths:
        try:
            st = os.stat(p)
        except OSError as e:
            bad[p] = f"cannot stat: {e}"
            continue
        key = [st.st_size, st.st_mtime_ns]
        hit = cache.get(p)
        # an entry answers for its own mode and weaker ones; a bad file is bad under any mode
        if hit and hit[:2] == key and (hit[3] is not None or strength[hit[2]] >= strength[mode]):
            if hit[3] is not None:
                bad[p] = hit[3]
            continue
        todo.append((p, key))
    if todo:
        n_workers = workers or min(8, os.cpu_count() or 1)
        show = len(todo) >= PROGRESS_MIN_FILES if progress is None else progress
        bar = _Progress(len(todo), f"verifying images ({mode})", show)

        def job(item: tuple[str, list]) -> tuple[str, list, str | None]:
            return item[0], item[1], _check_file(item[0], mode)

        with ThreadPoolExecutor(max_workers=n_workers) as pool:
            for p, key, reason in pool.map(job, todo, chunksize=1):
                cache[p] = [*key, mode, reason]
                if reason is not None:
                    bad[p] = reason
                bar.update()
        if cache_path is not None:
            _save_cache(cache_path, cache)
    return bad


# ---- dataset -------------------------------------------------------------------------------


class ImageFolderDataset(Dataset):
    """``root/<class>/<image>`` files, read with OpenCV as RGB uint8 when indexed.

    Args:
        root: the split folder (e.g. ``imagenette/train``).
        classes: class names in label order; None takes the sorted sub-folders of ``root``
            (pass the train split's classes for val so the labels agree).
        transform: as for :class:`~visattn.data.arrays.ArrayDataset`.

    Raises:
        FileNotFoundError: a class folder is missing, or no image at all.
        ValueError: a class folder holds no image (named).
    """

    def __init__(
        self,
        root: str | Path,
        classes: Sequence[str] | None = None,
        transform: Transform | None = None,
    ) -> None:
        self.root = Path(root)
        self.classes = list(classes) if classes is not None else find_classes(self.root)
        missing = [str(self.root / c) for c in self.classes if not (self.root / c).is_dir()]
        if missing:
            raise DatasetNotFoundError(f"{self.root}: class folders missing: {', '.join(missing)}")
        samples, empty = [], []
        for label, name in enumerate(self.classes):
            files = _image_files(self.root / name)
            if not files:
                empty.append(str(self.root / name))
            samples += [(str(path), label) for path in files]
        if empty:
            raise DatasetLayoutError(
                f"class folder(s) with no images ({', '.join(IMAGE_EXTENSIONS)}): "
                f"{', '.join(empty)}"
            )
        self.samples = samples
        self.targets = np.array([s[1] for s in samples], dtype=np.int64)
        self.transform = transform
        self.verified: str | None = None  # the verify_images mode that passed, if any

    def verify(
        self, mode: str = "fast", *, skip_bad: bool = False, workers: int | None = None
    ) -> dict[str, str]:
        """Check every image file (see :func:`verify_images`; cached per ``root``).

        Args:
            mode: ``"fast"``, ``"full"`` or ``"off"``.
            skip_bad: drop bad files from the dataset (a warning gives their count and the
                first paths) instead of raising.
            workers: parallel threads.

        Returns:
            ``{path: reason}`` of the bad files (dropped when ``skip_bad``).

        Raises:
            BadImageError: bad files and not ``skip_bad``; the message names them.
        """
        bad = verify_images(
            [p for p, _ in self.samples], mode, cache_root=self.root, workers=workers
        )
        self.verified = mode
        if not bad:
            return bad
        listing = "\n  ".join(f"{p}: {r}" for p, r in list(bad.items())[:20])
        more = f"\n  ... and {len(bad) - 20} more" if len(bad) > 20 else ""
        if not skip_bad:
            raise BadImageError(
                f"{len(bad)} of {len(self.samples)} images under {self.root} cannot be decoded "
                f"(verify_images={mode}):\n  {listing}{more}\nRemove or replace them, or pass "
                "--data.skip_bad_images true to train without them.",
                bad,
            )
        keep = [i for i, (p, _) in enumerate(self.samples) if p not in bad]
        if not keep:
            raise BadImageError(f"every image under {self.root} is bad:\n  {listing}{more}", bad)
        emptied = sorted({t for _, t in self.samples} - {self.samples[i][1] for i in keep})
        if emptied:
            names = [self.classes[t] if t < len(self.classes) else str(t) for t in emptied]
            raise BadImageError(
                f"skipping the bad images under {self.root} leaves class(es) {names} with no "
                f"image: a network trained or scored on this split would never see them. "
                f"Replace the bad files:\n  {listing}{more}",
                bad,
            )
        self.samples = [self.samples[i] for i in keep]
        self.targets = self.targets[keep]
        log.warning(
            "skipped %d bad image(s) of %d under %s (--data.skip_bad_images):\n  %s%s",
            len(bad),
            len(bad) + len(keep),
            self.root,
            listing,
            more,
        )
        return bad

    def _unreadable_hint(self) -> str:
        if self.verified == "full":
            return "it passed --data.verify_images full; was it changed or removed since?"
        if self.verified == "fast":
            return (
                "it passed --data.verify_images fast (header and completeness); full decodes "
                "every file with OpenCV before the first step"
            )
        return "the files were not verified; --data.verify_images full finds every such file"

    def __len__(self) -> int:
        return len(self.samples)

    def __getitem__(self, index: int) -> tuple[torch.Tensor, int]:
        path, label = self.samples[index]
        cv2 = _opencv()
        bgr = cv2.imread(path, cv2.IMREAD_COLOR)
        if bgr is None:
            raise OSError(f"OpenCV cannot read image {path}: {self._unreadable_hint()}")
        image = cv2.cvtColor(bgr, cv2.COLOR_BGR2RGB)
        x = (
            to_tensor_uint8(image)
            if self.transform is None
            else self.transform(image=image)["image"]
        )
        return x, label
