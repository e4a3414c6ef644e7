"""``shapes``: an embedded, seeded, cluttered single-target dataset (no files, no network).

Clutter plus one small target whose shape and colour are the label, with the target's bounding
box in ``boxes`` (used by the localisation check of attention maps).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

__all__ = [
    "COLORS",
    "DEFAULT_COLORS",
    "DEFAULT_SHAPES",
    "DEFAULT_SPLIT_SIZES",
    "SHAPES",
    "check_target_size",
    "make_shapes",
    "shapes_classes",
]


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


#: the target shapes and colours of the default ``shapes`` data (9 classes).
DEFAULT_SHAPES: tuple[str, ...] = ("square", "disk", "triangle")
DEFAULT_COLORS: tuple[str, ...] = ("red", "green", "blue")


#: images per split when ``num_train`` / ``num_val`` / ``num_test`` are not given.
DEFAULT_SPLIT_SIZES: dict[str, int] = {"train": 5000, "val": 1000, "test": 1000}


def shapes_classes(
    shapes: Sequence[str] | None = None, colors: Sequence[str] | None = None
) -> list[str]:
    """Class names ``"<color>_<shape>"`` in label order (``shape_index * len(colors) +
    color_index``); None takes the defaults :data:`DEFAULT_SHAPES` / :data:`DEFAULT_COLORS`."""
    shapes = DEFAULT_SHAPES if shapes is None else shapes
    colors = DEFAULT_COLORS if colors is None else colors
    return [f"{c}_{sh}" for sh in shapes for c in colors]


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


def jitter_colors(rng: np.random.Generator, base: np.ndarray) -> np.ndarray:
    """``(n, 3)`` RGB colours with Gaussian jitter (sd 12), clipped to 0-255."""
    return np.clip(base + rng.normal(0, 12, base.shape), 0, 255).astype(np.float32)


def draw_clutter(
    img: np.ndarray,
    rng: np.random.Generator,
    grid: tuple[np.ndarray, np.ndarray],
    clutter_rgb: np.ndarray,
    distractors: int,
    lines: int,
    size_range: tuple[float, float],
) -> None:
    """Paint ``lines`` line segments and ``distractors`` shapes of any kind in :data:`SHAPES`
    into ``img`` ``(n, S, S, 3)`` (float), in colours drawn from ``clutter_rgb`` ``(m, 3)``;
    shapes are ``size_range`` (fractions of ``S``) wide."""
    n, s = img.shape[0], img.shape[1]
    all_shapes = list(SHAPES)
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
        rgb = jitter_colors(rng, clutter_rgb[rng.integers(0, len(clutter_rgb), n)])
        np.copyto(img, rgb[:, None, None, :], where=mask[..., None])
    lo, hi = size_range
    for _ in range(distractors):
        r = rng.uniform(lo, hi, n) * s / 2
        cx, cy = rng.uniform(0, s, n), rng.uniform(0, s, n)
        rgb = jitter_colors(rng, clutter_rgb[rng.integers(0, len(clutter_rgb), n)])
        _draw(img, rng.integers(0, len(all_shapes), n), cx, cy, r, rgb, grid, all_shapes)


def check_target_size(target_size: Any) -> tuple[float, float]:
    """``target_size`` as ``(lo, hi)``: two fractions of the image side, ``0 < lo <= hi < 1``.

    Raises:
        ValueError: not two numbers, or outside that range.
    """
    try:
        lo, hi = (float(v) for v in target_size)
    except (TypeError, ValueError):
        raise ValueError(
            f"shapes dataset: target_size must be [lo, hi], got {target_size!r}"
        ) from None
    if not 0 < lo <= hi < 1:
        raise ValueError(
            f"shapes dataset: target_size must satisfy 0 < lo <= hi < 1, got {list(target_size)}"
        )
    return lo, hi


def _check_options(
    shapes: Sequence[str],
    colors: Sequence[str],
    image_size: int,
    target_size: tuple[float, float],
    counts: tuple[int, int, int],
) -> None:
    """Refuse impossible ``make_shapes`` options (``counts``: images, distractors, lines)."""
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
    check_target_size(target_size)
    if min(counts) < 0:
        raise ValueError("shapes dataset: num_images, distractors and lines must be >= 0")


def make_shapes(
    num_images: int,
    *,
    seed: int = 0,
    image_size: int = 32,
    shapes: Sequence[str] = DEFAULT_SHAPES,
    colors: Sequence[str] = DEFAULT_COLORS,
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
    _check_options(shapes, colors, image_size, target_size, (num_images, distractors, lines))
    s = image_size
    target_rgb = np.array([COLORS[c] for c in colors], dtype=np.float32)
    clutter_rgb = np.array([COLORS[c] for c in COLORS if c not in colors], dtype=np.float32)
    lo, hi = target_size
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

        draw_clutter(img, rng, grid, clutter_rgb, distractors, lines, (lo, hi))
        r = rng.uniform(lo, hi, n) * s / 2
        cx = rng.uniform(r + 1, s - r - 1)
        cy = rng.uniform(r + 1, s - r - 1)
        shape_idx = rng.integers(0, len(shapes), n)
        color_idx = rng.integers(0, len(colors), n)
        rgb = jitter_colors(rng, target_rgb[color_idx])
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
    return out_images, out_labels, out_boxes, shapes_classes(shapes, colors)
