"""``cues``: an embedded benchmark whose labels need what attention blocks are built to find.

Deterministic, generated in-process (no files, no network), with the target's box. Every image
is a cluttered scene as in ``shapes`` (dark noisy background, distractor shapes and line
segments in colours that never carry a cue); the task decides what carries the label:

* ``"key"`` (context at a distance): a yellow *target* shape (one of ``K``) in the image, and
  a *key*, a square as large as the target in one of ``K`` key colours, in the opposite
  quadrant.
  The label is ``(shape + key) mod K``: neither object alone says anything about the class
  (each is uniform given the label), so the network must relate two objects far apart. A
  classifier that pools features globally and then applies a linear layer cannot combine them;
  the combination has to happen in the feature maps, where global context (SE, GC, non-local,
  self-attention) reaches every position at once.
* ``"pair"`` (long-range relation): two yellow shapes in opposite quadrants; the label says
  whether they are the same shape (2 classes). Same/different relations are known
  to strain feed-forward CNNs (Kim, Ricci & Serre, Interface Focus 2018).
* ``"target"`` (spatial selection): ``shapes`` with a smaller target and twice the clutter.

The box is the target's (``key``, ``target``) or the first marked shape's (``pair``).
"""

from __future__ import annotations

import numpy as np

from .shapes import COLORS, SHAPES, _draw, draw_clutter, jitter_colors, make_shapes

__all__ = ["CUE_TASKS", "cues_classes", "make_cues"]

CUE_TASKS = ("key", "pair", "target")
_KEY_SHAPES = ("square", "disk", "triangle")
_KEY_COLORS = ("red", "green", "blue")
_MARK = "yellow"
_CLUTTER = ("cyan", "magenta", "white", "gray")


def cues_classes(task: str) -> list[str]:
    """Class names of ``task`` in label order."""
    _check_task(task)
    if task == "key":
        return [f"key_class_{k}" for k in range(len(_KEY_SHAPES))]
    if task == "pair":
        return ["different", "same"]
    return [f"{c}_{s}" for s in _KEY_SHAPES for c in _KEY_COLORS]


def _check_task(task: str) -> None:
    if task not in CUE_TASKS:
        raise ValueError(f"cues dataset: unknown task {task!r}; choose from {list(CUE_TASKS)}")


def _far_positions(rng: np.random.Generator, n: int, s: int, margin: float) -> tuple:
    """Two centres per image in opposite quadrants (diagonal), each ``margin`` from the edge."""
    q = rng.integers(0, 4, n)
    lo, hi = margin, s / 2 - 2
    a = rng.uniform(lo, hi, (n, 2))
    b = s - rng.uniform(lo, hi, (n, 2))
    flip_x, flip_y = (q & 1).astype(bool), (q & 2).astype(bool)
    a[flip_x, 0], b[flip_x, 0] = s - a[flip_x, 0], s - b[flip_x, 0]
    a[flip_y, 1], b[flip_y, 1] = s - a[flip_y, 1], s - b[flip_y, 1]
    return a.astype(np.float32), b.astype(np.float32)


def _boxes(mask: np.ndarray) -> np.ndarray:
    s = mask.shape[1]
    cols, rows = mask.any(1), mask.any(2)
    return np.stack(
        [cols.argmax(1), rows.argmax(1), s - cols[:, ::-1].argmax(1), s - rows[:, ::-1].argmax(1)],
        1,
    ).astype(np.float32)


def _scene(rng: np.random.Generator, n: int, s: int, distractors: int, lines: int) -> tuple:
    """A dark background with clutter in colours outside the cue colours; returns the float
    images ``(n, S, S, 3)`` and the pixel-centre grid."""
    centres = np.arange(s, dtype=np.float32) + 0.5
    grid = (centres[:, None], centres[None, :])
    img = rng.uniform(0, 70, (n, 1, 1, 3)).astype(np.float32) * np.ones((1, s, s, 1), np.float32)
    clutter = np.array([COLORS[c] for c in _CLUTTER], np.float32)
    draw_clutter(img, rng, grid, clutter, distractors, lines, (0.14, 0.24))
    return img, grid


def _check_options(num_images: int, image_size: int, object_size: float, key_size: float) -> None:
    """Refuse sizes the scenes cannot be drawn at, naming the option."""
    if image_size < 24:
        raise ValueError(f"cues dataset: image_size must be >= 24, got {image_size}")
    if not 0.08 <= object_size <= 0.3:
        raise ValueError(f"cues dataset: object_size must be in [0.08, 0.3], got {object_size}")
    if num_images < 0:
        raise ValueError("cues dataset: num_images must be >= 0")
    if not 0.3 <= key_size <= 1.5:
        raise ValueError(f"cues dataset: key_size must be in [0.3, 1.5], got {key_size}")


def _mark_rgb(rng: np.random.Generator, n: int) -> np.ndarray:
    """The marked shapes' colour, jittered per image: ``(n, 3)``."""
    return jitter_colors(rng, np.tile(np.array(COLORS[_MARK], np.float32), (n, 1)))


def _draw_key(
    img: np.ndarray, rng: np.random.Generator, grid: tuple, objects: tuple, key_size: float
) -> tuple[np.ndarray, np.ndarray]:
    """``key``: the target at the first centres, the key square (``key_size`` times the
    target's radius) at the second; ``objects`` is ``(first, second, radius)``. Returns the
    target's mask and the labels ``(shape + key) mod K``."""
    a, b, r = objects
    n, k = len(img), len(_KEY_SHAPES)
    shape_idx = rng.integers(0, k, n)
    key_idx = rng.integers(0, k, n)
    mask = _draw(img, shape_idx, a[:, 0], a[:, 1], r, _mark_rgb(rng, n), grid, _KEY_SHAPES)
    key_rgb = np.array([COLORS[c] for c in _KEY_COLORS], np.float32)[key_idx]
    _draw(img, np.zeros(n, int), b[:, 0], b[:, 1], r * key_size, key_rgb, grid, ["square"])
    return mask, (shape_idx + key_idx) % k


def _draw_pair(
    img: np.ndarray, rng: np.random.Generator, grid: tuple, objects: tuple
) -> tuple[np.ndarray, np.ndarray]:
    """``pair``: two marked shapes at the two centres, the same shape with probability 1/2.
    Returns the first shape's mask and the labels (1: same)."""
    a, b, r = objects
    n, k = len(img), len(_KEY_SHAPES)
    same = rng.integers(0, 2, n).astype(bool)
    first = rng.integers(0, k, n)
    other = (first + rng.integers(1, k, n)) % k
    second = np.where(same, first, other)
    mask = _draw(img, first, a[:, 0], a[:, 1], r, _mark_rgb(rng, n), grid, _KEY_SHAPES)
    _draw(img, second, b[:, 0], b[:, 1], r, _mark_rgb(rng, n), grid, _KEY_SHAPES)
    return mask, same.astype(np.int64)


def make_cues(
    num_images: int,
    *,
    seed: int = 0,
    task: str = "key",
    image_size: int = 32,
    distractors: int = 4,
    lines: int = 2,
    noise: float = 12.0,
    object_size: float | None = None,
    key_size: float = 1.0,
) -> tuple[np.ndarray, np.ndarray, np.ndarray, list[str]]:
    """Generate ``num_images`` images of ``task`` (see the module docstring).

    Args:
        object_size: the target's (and ``pair``'s shapes') diameter as a fraction of
            ``image_size``; default 0.3 for ``key`` (the benchmark's: ResNet-20 learns it
            within a few hundred steps at 24 px), 0.2 for the others.
        key_size: ``key``: the key square's size relative to the target. (A key at 0.6 of a
            0.2 target, 2 pixels at 32 px, left ResNet-20 at chance in every variant after 300
            steps: the benchmark's default is a key as large as the target.)

    Returns:
        ``images`` ``(N, S, S, 3)`` uint8, ``labels`` ``(N,)`` int64, ``boxes`` ``(N, 4)``
        float32 ``(x0, y0, x1, y1)``, class names.
    """
    _check_task(task)
    if object_size is None:
        object_size = 0.3 if task == "key" else 0.2
    _check_options(num_images, image_size, object_size, key_size)
    if task == "target":
        return make_shapes(
            num_images,
            seed=seed,
            image_size=image_size,
            distractors=2 * distractors,
            lines=2 * lines,
            noise=noise,
            target_size=(object_size * 0.7, object_size),
        )
    s = image_size
    rng = np.random.default_rng([seed, num_images, s, CUE_TASKS.index(task)])
    img, grid = _scene(rng, num_images, s, distractors, lines)
    r = np.full(num_images, object_size * s / 2, np.float32)
    a, b = _far_positions(rng, num_images, s, margin=float(r[0]) + 1)
    if task == "key":
        mask, labels = _draw_key(img, rng, grid, (a, b, r), key_size)
    else:
        mask, labels = _draw_pair(img, rng, grid, (a, b, r))
    if noise > 0:
        img += noise * rng.standard_normal(img.shape, dtype=np.float32)
    images = np.clip(np.rint(img), 0, 255).astype(np.uint8)
    return images, labels.astype(np.int64), _boxes(mask), cues_classes(task)


assert set(_CLUTTER).isdisjoint((*_KEY_COLORS, _MARK)) and set(SHAPES) >= set(_KEY_SHAPES)
