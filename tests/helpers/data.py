"""Tiny data sets on disk in the layouts the data module reads."""

from __future__ import annotations

import pickle
from pathlib import Path

import cv2
import numpy as np

from visattn.data import cifar as ds_mod


def write_tiny_cifar(
    root: Path, n_train: int = 40, n_test: int = 20, name: str = "cifar10"
) -> None:
    """Official-layout CIFAR pickles with random pixels (protocol 2, bytes keys, as upstream)."""
    rng = np.random.default_rng(0)
    spec = ds_mod.CIFAR_SPECS[name]
    folder = root / spec["folder"]
    folder.mkdir(parents=True)
    label_key = spec["label_key"].encode()
    n_classes = 10 if name == "cifar10" else 100
    per_file = {f: n_train // len(spec["train"]) for f, _ in spec["train"]}
    per_file.update({f: n_test for f, _ in spec["test"]})
    for fname, n in per_file.items():
        entry = {
            b"data": rng.integers(0, 256, (n, 3072), dtype=np.uint8),
            label_key: [int(v) for v in rng.integers(0, n_classes, n)],
            b"batch_label": b"tiny",
        }
        with open(folder / fname, "wb") as f:
            pickle.dump(entry, f, protocol=2)
    meta_name, _, meta_key = spec["meta"]
    with open(folder / meta_name, "wb") as f:
        pickle.dump(
            {meta_key.encode(): [f"class{i}".encode() for i in range(n_classes)]}, f, protocol=2
        )


def write_tiny_imagefolder(
    root: Path, classes: tuple[str, ...] = ("cat", "dog", "fox"), n: int = 4
) -> None:
    """``root/{train,val}/<class>/<i>.png``: ``n`` random images per class, of heights 40 to
    39 + n and width 48."""
    rng = np.random.default_rng(0)
    for split in ("train", "val"):
        for c in classes:
            (root / split / c).mkdir(parents=True)
            for i in range(n):
                img = rng.integers(0, 256, (40 + i, 48, 3), dtype=np.uint8)
                cv2.imwrite(str(root / split / c / f"{i}.png"), img)
