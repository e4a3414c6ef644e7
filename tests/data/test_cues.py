"""The ``cues`` benchmark: deterministic, balanced, and its cues where the docstring says."""

from __future__ import annotations

import numpy as np
import pytest

from visattn.data.cues import CUE_TASKS, cues_classes, make_cues
from visattn.data.shapes import COLORS


@pytest.mark.parametrize("task", CUE_TASKS)
def test_deterministic_shapes_and_balanced(task: str):
    a = make_cues(600, seed=4, task=task)
    b = make_cues(600, seed=4, task=task)
    for x, y in zip(a[:3], b[:3]):
        np.testing.assert_array_equal(x, y)
    images, labels, boxes, classes = a
    assert images.shape == (600, 32, 32, 3) and images.dtype == np.uint8
    assert labels.dtype == np.int64 and classes == cues_classes(task)
    counts = np.bincount(labels, minlength=len(classes))
    assert counts.min() > 0.6 * 600 / len(classes)
    assert (boxes[:, 0] < boxes[:, 2]).all() and (boxes[:, 2] <= 32).all()
    assert not np.array_equal(make_cues(600, seed=5, task=task)[0], images)


def _is_yellow(images: np.ndarray) -> np.ndarray:
    ref = np.array(COLORS["yellow"], np.float32)
    return np.abs(images.astype(np.float32) - ref).max(-1) < 70


@pytest.mark.parametrize("task", ["key", "pair"])
def test_the_box_holds_the_yellow_target(task: str):
    images, _, boxes, _ = make_cues(200, seed=0, task=task, noise=0.0)
    yellow = _is_yellow(images)
    for i in range(len(images)):
        x0, y0, x1, y1 = boxes[i].astype(int)
        assert yellow[i, y0:y1, x0:x1].mean() > 0.3


def test_pair_objects_sit_in_opposite_quadrants():
    images, _, boxes, _ = make_cues(200, seed=1, task="pair", noise=0.0)
    yellow = _is_yellow(images)
    for i in range(len(images)):
        cx, cy = (boxes[i, 0] + boxes[i, 2]) / 2, (boxes[i, 1] + boxes[i, 3]) / 2
        qx = slice(16, 32) if cx < 16 else slice(0, 16)
        qy = slice(16, 32) if cy < 16 else slice(0, 16)
        assert yellow[i, qy, qx].sum() >= 4  # the second shape, diagonally opposite


def test_the_key_square_is_as_large_as_the_target_by_default():
    kw = dict(task="key", noise=0.0, distractors=0, lines=0)
    images = make_cues(50, seed=3, **kw)[0]
    key = np.array([COLORS[c] for c in ("red", "green", "blue")], np.float32)
    key_px = (np.abs(images[:, :, :, None, :].astype(np.float32) - key).max(-1) < 40).any(-1)
    target_px = _is_yellow(images)
    ratio = key_px.sum((1, 2)) / target_px.sum((1, 2))
    assert 0.6 < np.median(ratio) < 2.0  # a square vs a disk/triangle/square of the same radius
    small = make_cues(50, seed=3, key_size=0.5, **kw)[0]
    small_px = (np.abs(small[:, :, :, None, :].astype(np.float32) - key).max(-1) < 40).any(-1)
    assert small_px.sum() < 0.5 * key_px.sum()


def test_clutter_never_uses_a_cue_colour():
    images, _, _, _ = make_cues(100, seed=2, task="key", distractors=12, lines=6, noise=0.0)
    cue = np.array([COLORS[c] for c in ("red", "green", "blue", "yellow")], np.float32)
    d = np.abs(images[:, :, :, None, :].astype(np.float32) - cue).max(-1).min(-1)
    # cue-coloured pixels: the target and the key only (two small objects per image)
    assert ((d < 40).sum((1, 2)) < 0.2 * 32 * 32).all()


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"task": "nope"}, "unknown task"),
        ({"image_size": 16}, "image_size"),
        ({"object_size": 0.5}, "object_size"),
        ({"key_size": 2.0}, "key_size"),
    ],
)
def test_bad_options_are_refused(kwargs: dict, match: str):
    with pytest.raises(ValueError, match=match):
        make_cues(10, **kwargs)


@pytest.mark.parametrize("task", CUE_TASKS)
def test_each_task_is_a_registered_dataset(task: str):
    pytest.importorskip("lightning")
    from visattn.data.datamodule import VisattnDataModule

    dm = VisattnDataModule(dataset=f"cues_{task}", num_train=8, num_val=4, num_test=4)
    dm.setup("fit")
    assert dm.classes == cues_classes(task) and dm.num_classes == len(cues_classes(task))
    x, y = dm.train_dataset[0][:2]
    assert tuple(x.shape) == (3, 32, 32) and 0 <= int(y) < dm.num_classes
