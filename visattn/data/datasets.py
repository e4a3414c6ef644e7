"""Datasets: CIFAR-10/100 (torchvision's on-disk layout, checked), ImageFolder, and ``shapes``.

Every dataset yields ``(image, label)``: the image is whatever its ``transform`` returns from an
``(H, W, 3)`` uint8 RGB array (an albumentations pipeline gives a float ``(3, H, W)`` tensor);
without a transform it is the uint8 ``(3, H, W)`` tensor itself (the device-augmentation path).

* CIFAR is read from the python pickles of Krizhevsky (2009) in torchvision's layout
  (``ROOT/cifar-10-batches-py/data_batch_1..5, test_batch``; ``ROOT/cifar-100-python/train,
  test``). Each file's md5 is compared with torchvision's list of the official archive's sums
  before anything is unpickled; a copy that differs (re-packed, truncated) is refused with a
  message naming the file, unless ``verify=False`` (then a warning is logged).
* ``shapes`` is generated from a seed (no files): clutter plus one small target whose shape and
  colour are the label, with the target's bounding box in ``boxes``.
"""

from __future__ import annotations

import hashlib
import logging
import pickle
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import cv2
import numpy as np
import torch
from torch.utils.data import Dataset

__all__ = [
    "CIFAR_SPECS",
    "COLORS",
    "SHAPES",
    "ArrayDataset",
    "DatasetIntegrityError",
    "ImageFolderDataset",
    "load_cifar",
    "locate_cifar",
    "make_shapes",
]

log = logging.getLogger(__name__)

Transform = Callable[..., dict[str, Any]]


# --------------------------------------------------------------------------------------------
# In-memory and folder datasets
# --------------------------------------------------------------------------------------------


def _to_tensor_uint8(image: np.ndarray) -> torch.Tensor:
    return torch.from_numpy(np.ascontiguousarray(image.transpose(2, 0, 1)))


class ArrayDataset(Dataset):
    """Images held in memory as one uint8 array.

    Args:
        images: ``(N, H, W, 3)`` uint8 RGB.
        targets: ``(N,)`` integer labels.
        classes: class names, index = label.
        transform: albumentations-style callable ``transform(image=...)["image"]``, or None for
            the raw uint8 ``(3, H, W)`` tensor.
        boxes: optional ``(N, 4)`` float ``(x0, y0, x1, y1)`` boxes in pixel coordinates.
    """

    def __init__(
        self,
        images: np.ndarray,
        targets: np.ndarray,
        classes: Sequence[str],
        transform: Transform | None = None,
        boxes: np.ndarray | None = None,
    ) -> None:
        if images.dtype != np.uint8 or images.ndim != 4 or images.shape[-1] != 3:
            raise ValueError(
                f"images must be (N, H, W, 3) uint8, got {images.shape} {images.dtype}"
            )
        if len(images) != len(targets):
            raise ValueError(f"{len(images)} images but {len(targets)} targets")
        self.images = images
        self.targets = np.asarray(targets, dtype=np.int64)
        self.classes = list(classes)
        self.transform = transform
        self.boxes = None if boxes is None else torch.as_tensor(boxes, dtype=torch.float32)

    def __len__(self) -> int:
        return len(self.images)

    def __getitem__(self, index: int) -> tuple[torch.Tensor, int]:
        image = self.images[index]
        x = (
            _to_tensor_uint8(image)
            if self.transform is None
            else self.transform(image=image)["image"]
        )
        return x, int(self.targets[index])

    def subset(self, indices: np.ndarray) -> ArrayDataset:
        """A new dataset holding ``indices`` (copies the selected images)."""
        boxes = None if self.boxes is None else self.boxes[torch.as_tensor(indices)].numpy()
        return ArrayDataset(
            self.images[indices], self.targets[indices], self.classes, self.transform, boxes
        )


IMAGE_EXTENSIONS = (".jpg", ".jpeg", ".png", ".bmp", ".ppm", ".tif", ".tiff", ".webp")


def find_classes(directory: str | Path) -> list[str]:
    """Sorted names of the sub-folders of ``directory`` (the classes of an ImageFolder split)."""
    directory = Path(directory)
    if not directory.is_dir():
        raise FileNotFoundError(
            f"ImageFolder split not found: {directory} (expected ROOT/train/<class>/*.jpg and "
            "ROOT/val/<class>/*.jpg; pass --data.root PATH pointing at ROOT)"
        )
    classes = sorted(p.name for p in directory.iterdir() if p.is_dir())
    if not classes:
        raise FileNotFoundError(f"no class folders in {directory}")
    return classes


class ImageFolderDataset(Dataset):
    """``root/<class>/<image>`` files, read with OpenCV as RGB uint8 when indexed.

    Args:
        root: the split folder (e.g. ``imagenette/train``).
        classes: class names in label order; None takes the sorted sub-folders of ``root``
            (pass the train split's classes for val so the labels agree).
        transform: as for :class:`ArrayDataset`.
    """

    def __init__(
        self,
        root: str | Path,
        classes: Sequence[str] | None = None,
        transform: Transform | None = None,
    ) -> None:
        self.root = Path(root)
        self.classes = list(classes) if classes is not None else find_classes(self.root)
        missing = [c for c in self.classes if not (self.root / c).is_dir()]
        if missing:
            raise FileNotFoundError(f"{self.root}: class folders missing: {missing[:5]}")
        samples = []
        for label, name in enumerate(self.classes):
            for path in sorted((self.root / name).rglob("*")):
                if path.suffix.lower() in IMAGE_EXTENSIONS:
                    samples.append((str(path), label))
        if not samples:
            raise FileNotFoundError(f"no images ({', '.join(IMAGE_EXTENSIONS)}) under {self.root}")
        self.samples = samples
        self.targets = np.array([s[1] for s in samples], dtype=np.int64)
        self.transform = transform

    def __len__(self) -> int:
        return len(self.samples)

    def __getitem__(self, index: int) -> tuple[torch.Tensor, int]:
        path, label = self.samples[index]
        bgr = cv2.imread(path, cv2.IMREAD_COLOR)
        if bgr is None:
            raise OSError(f"cannot read image {path}")
        image = cv2.cvtColor(bgr, cv2.COLOR_BGR2RGB)
        x = (
            _to_tensor_uint8(image)
            if self.transform is None
            else self.transform(image=image)["image"]
        )
        return x, label


# --------------------------------------------------------------------------------------------
# CIFAR
# --------------------------------------------------------------------------------------------


class DatasetIntegrityError(RuntimeError):
    """A dataset file's checksum differs from the official one."""


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
    from torchvision.datasets import CIFAR10, CIFAR100

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
        FileNotFoundError: files missing and ``download`` off; names the path and both fixes.
    """
    if name not in CIFAR_SPECS:
        raise ValueError(f"unknown CIFAR dataset {name!r}; choose from {sorted(CIFAR_SPECS)}")
    spec = CIFAR_SPECS[name]
    root = Path(root).expanduser()
    wanted = [f for f, _ in (*spec["train"], *spec["test"])] + [spec["meta"][0]]
    folder = _cifar_folder(name, root)
    missing = [f for f in wanted if not (folder / f).is_file()]
    if missing and download:
        from torchvision.datasets.utils import download_and_extract_archive

        cls = spec["torchvision"]
        root.mkdir(parents=True, exist_ok=True)
        download_and_extract_archive(cls.url, str(root), filename=cls.filename, md5=cls.tgz_md5)
        folder = root / spec["folder"]
        missing = [f for f in wanted if not (folder / f).is_file()]
    if missing:
        raise FileNotFoundError(_missing_message(name, folder, missing))
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
        FileNotFoundError: files missing and ``download`` is off (the message names the path).
        DatasetIntegrityError: an md5 differs and ``verify`` is on.
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
    else:
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
            raise ValueError(f"{folder / fname}: 'data' has shape {data.shape}, expected (N, 3072)")
        images.append(data.reshape(-1, 3, 32, 32).transpose(0, 2, 3, 1))
        labels.append(np.asarray(entry[spec["label_key"]], dtype=np.int64))
    names = _unpickle(folder / meta_name)[meta_key]
    classes = [c.decode() if isinstance(c, bytes) else str(c) for c in names]
    return np.ascontiguousarray(np.concatenate(images)), np.concatenate(labels), classes


def _unpickle(path: Path) -> dict[str, Any]:
    # The official files are Python-2 pickles of dicts with bytes keys; latin1 keeps the uint8
    # arrays intact. Pickles can run code: only read files you trust (see the md5 check).
    with open(path, "rb") as f:
        entry = pickle.load(f, encoding="latin1")
    return {k.decode() if isinstance(k, bytes) else k: v for k, v in entry.items()}


# --------------------------------------------------------------------------------------------
# shapes: an embedded, seeded, cluttered single-target dataset
# --------------------------------------------------------------------------------------------

#: named RGB colours available to targets and distractors.
COLORS: dict[str, tuple[int, int, int]] = {
    "red": (225, 35, 35),
    "green": (40, 195, 45),
    "blue": (45, 75, 235),
    "yellow": (225, 215, 40),
    "cyan": (40, 205, 210),
    "magenta": (205, 45, 205),
    "white": (235, 235, 235),
    "gray": (140, 140, 140),
}


def _square(dx: np.ndarray, dy: np.ndarray, r: np.ndarray) -> np.ndarray:
    return np.maximum(np.abs(dx), np.abs(dy)) <= r * 0.85


def _disk(dx: np.ndarray, dy: np.ndarray, r: np.ndarray) -> np.ndarray:
    return dx * dx + dy * dy <= r * r


def _triangle(dx: np.ndarray, dy: np.ndarray, r: np.ndarray) -> np.ndarray:
    # apex up: rows from -r to r, half-width growing linearly from 0 to r
    return (dy >= -r) & (dy <= r) & (np.abs(dx) <= (dy + r) / 2)


def _cross(dx: np.ndarray, dy: np.ndarray, r: np.ndarray) -> np.ndarray:
    arm = np.maximum(r / 3, 1.0)
    ax, ay = np.abs(dx), np.abs(dy)
    return ((ax <= arm) & (ay <= r)) | ((ay <= arm) & (ax <= r))


def _ring(dx: np.ndarray, dy: np.ndarray, r: np.ndarray) -> np.ndarray:
    d2 = dx * dx + dy * dy
    return (d2 <= r * r) & (d2 >= (0.5 * r) ** 2)


def _diamond(dx: np.ndarray, dy: np.ndarray, r: np.ndarray) -> np.ndarray:
    return np.abs(dx) + np.abs(dy) <= r


#: shape name -> mask function of pixel offsets from the centre and the radius.
SHAPES: dict[str, Callable[[np.ndarray, np.ndarray, np.ndarray], np.ndarray]] = {
    "square": _square,
    "disk": _disk,
    "triangle": _triangle,
    "cross": _cross,
    "ring": _ring,
    "diamond": _diamond,
}


def _check_names(kind: str, names: Sequence[str], table: dict[str, Any]) -> None:
    if not names:
        raise ValueError(f"shapes dataset: {kind} must not be empty")
    unknown = [n for n in names if n not in table]
    if unknown:
        raise ValueError(f"shapes dataset: unknown {kind} {unknown}; choose from {list(table)}")
    if len(set(names)) != len(names):
        raise ValueError(f"shapes dataset: {kind} has duplicates: {list(names)}")


def _f32(*arrays: np.ndarray) -> tuple[np.ndarray, ...]:
    return tuple(a.astype(np.float32) for a in arrays)


def _draw(
    images: np.ndarray,
    kinds: np.ndarray,
    cx: np.ndarray,
    cy: np.ndarray,
    r: np.ndarray,
    rgb: np.ndarray,
    grid: tuple[np.ndarray, np.ndarray],
    shape_names: Sequence[str],
) -> np.ndarray:
    """Paint one shape per image (vectorised over the batch); returns the (N, S, S) masks."""
    yy, xx = grid
    cx, cy, r = _f32(cx, cy, r)
    n, size = images.shape[0], images.shape[1]
    masks = np.zeros((n, size, size), dtype=bool)
    for k, name in enumerate(shape_names):
        sel = np.flatnonzero(kinds == k)
        if sel.size == 0:
            continue
        dx = xx[None] - cx[sel, None, None]
        dy = yy[None] - cy[sel, None, None]
        masks[sel] = SHAPES[name](dx, dy, r[sel, None, None])
    np.copyto(images, rgb[:, None, None, :], where=masks[..., None])
    return masks


def make_shapes(
    num_images: int,
    *,
    seed: int = 0,
    image_size: int = 32,
    shapes: Sequence[str] = ("square", "disk", "triangle"),
    colors: Sequence[str] = ("red", "green", "blue"),
    distractors: int = 4,
    lines: int = 2,
    noise: float = 12.0,
    target_size: tuple[float, float] = (0.22, 0.32),
    chunk: int = 2048,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, list[str]]:
    """Generate the ``shapes`` dataset: clutter plus one target; the target defines the label.

    Each image: a random dark background with Gaussian pixel noise; ``distractors`` shapes of any
    kind in :data:`SHAPES` and ``lines`` line segments, all in colours NOT in ``colors``; then one
    target of a shape in ``shapes`` and a colour in ``colors``, drawn last (never occluded),
    ``target_size`` (fractions of ``image_size``) wide. The label is
    ``shape_index * len(colors) + color_index``; distractors are drawn independently of it, so
    only the target's pixels tell the class, and recognising its shape needs its location.

    Args:
        num_images: number of images.
        seed: everything is a function of ``(seed, num_images)`` and the options.
        image_size: side ``S`` of the square images.
        shapes, colors: target shapes and colours (names from :data:`SHAPES`, :data:`COLORS`).
        distractors, lines: clutter objects per image.
        noise: standard deviation of the pixel noise (0-255 scale).
        target_size: range of the target's side as fractions of ``S``.
        chunk: images generated per vectorised step (memory bound only).

    Returns:
        ``images`` ``(N, S, S, 3)`` uint8, ``labels`` ``(N,)`` int64, ``boxes`` ``(N, 4)``
        float32 ``(x0, y0, x1, y1)`` (exclusive x1, y1) of the target's pixels, class names
        ``"<color>_<shape>"``.
    """
    _check_names("shapes", shapes, SHAPES)
    _check_names("colors", colors, COLORS)
    clutter_colors = [c for c in COLORS if c not in colors]
    if len(clutter_colors) < 2:
        raise ValueError(
            f"shapes dataset: colors {list(colors)} leave fewer than 2 colours for the clutter; "
            "use at most 6 target colours"
        )
    if image_size < 16:
        raise ValueError(f"shapes dataset: image_size must be >= 16, got {image_size}")
    lo, hi = target_size
    if not 0 < lo <= hi < 1:
        raise ValueError(
            f"shapes dataset: target_size must satisfy 0 < lo <= hi < 1, got {target_size}"
        )
    if num_images < 0 or distractors < 0 or lines < 0:
        raise ValueError("shapes dataset: num_images, distractors and lines must be >= 0")

    s = image_size
    all_shapes = list(SHAPES)
    target_rgb = np.array([COLORS[c] for c in colors], dtype=np.float32)
    clutter_rgb = np.array([COLORS[c] for c in clutter_colors], dtype=np.float32)
    centres = np.arange(s, dtype=np.float32) + 0.5
    grid = (centres[:, None], centres[None, :])
    rng = np.random.default_rng([seed, num_images, s])

    out_images = np.empty((num_images, s, s, 3), dtype=np.uint8)
    out_labels = np.empty(num_images, dtype=np.int64)
    out_boxes = np.empty((num_images, 4), dtype=np.float32)
    for start in range(0, num_images, chunk):
        n = min(chunk, num_images - start)
        img = rng.uniform(0, 70, (n, 1, 1, 3)).astype(np.float32) * np.ones(
            (1, s, s, 1), np.float32
        )

        def jitter(base: np.ndarray, count: int) -> np.ndarray:
            return np.clip(base + rng.normal(0, 12, (count, 3)), 0, 255).astype(np.float32)

        for _ in range(lines):
            p0 = rng.uniform(0, s, (n, 2)).astype(np.float32)
            p1 = rng.uniform(0, s, (n, 2)).astype(np.float32)
            d = p1 - p0
            t = (grid[1][None] - p0[:, 0, None, None]) * d[:, 0, None, None] + (
                grid[0][None] - p0[:, 1, None, None]
            ) * d[:, 1, None, None]
            t = np.clip(t / np.maximum((d * d).sum(1), 1e-6)[:, None, None], 0, 1)
            px = p0[:, 0, None, None] + t * d[:, 0, None, None] - grid[1][None]
            py = p0[:, 1, None, None] + t * d[:, 1, None, None] - grid[0][None]
            mask = px * px + py * py <= 0.6**2 * (s / 32) ** 2
            rgb = jitter(clutter_rgb[rng.integers(0, len(clutter_rgb), n)], n)
            np.copyto(img, rgb[:, None, None, :], where=mask[..., None])

        for _ in range(distractors):
            r = rng.uniform(lo, hi, n) * s / 2
            cx, cy = rng.uniform(0, s, n), rng.uniform(0, s, n)
            rgb = jitter(clutter_rgb[rng.integers(0, len(clutter_rgb), n)], n)
            _draw(img, rng.integers(0, len(all_shapes), n), cx, cy, r, rgb, grid, all_shapes)

        r = rng.uniform(lo, hi, n) * s / 2
        cx = rng.uniform(r + 1, s - r - 1)
        cy = rng.uniform(r + 1, s - r - 1)
        shape_idx = rng.integers(0, len(shapes), n)
        color_idx = rng.integers(0, len(colors), n)
        rgb = jitter(target_rgb[color_idx], n)
        mask = _draw(img, shape_idx, cx, cy, r, rgb, grid, list(shapes))

        if noise > 0:
            img += noise * rng.standard_normal(img.shape, dtype=np.float32)
        out_images[start : start + n] = np.clip(np.rint(img), 0, 255).astype(np.uint8)
        out_labels[start : start + n] = shape_idx * len(colors) + color_idx
        cols, rows = mask.any(1), mask.any(2)
        out_boxes[start : start + n, 0] = cols.argmax(1)
        out_boxes[start : start + n, 1] = rows.argmax(1)
        out_boxes[start : start + n, 2] = s - cols[:, ::-1].argmax(1)
        out_boxes[start : start + n, 3] = s - rows[:, ::-1].argmax(1)
    classes = [f"{c}_{sh}" for sh in shapes for c in colors]
    return out_images, out_labels, out_boxes, classes
