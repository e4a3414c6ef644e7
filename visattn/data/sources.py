"""The data sets ``VisattnDataModule`` can train on: a registry of sources, one entry each.

A :class:`DataSource` says everything the data module needs to know about a data set: its
number of classes (or how to read them before loading), its default image size and
augmentation preset, its normalisation statistics, and how to build its train/val/test splits.
A new data set is one :func:`register_source` call; the data module has no per-data-set branch.

Splits: ``shapes`` generates train/val/test from ``seed``, ``seed + 1``, ``seed + 2``. CIFAR's
val split is the official test set (as in He et al.) unless ``val_split > 0`` holds that many
training images out (a fixed permutation); test is always the test set. ImageFolder reads
``root/train`` and ``root/val`` (and ``root/test`` when present, else val).
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from torch.utils.data import Dataset

from .._registry import Registry
from ..constants import STATS, Triple
from .arrays import ArrayDataset
from .cifar import load_cifar, locate_cifar
from .cues import CUE_TASKS, cues_classes, make_cues
from .imagefolder import ImageFolderDataset, check_class_folders
from .shapes import DEFAULT_COLORS, DEFAULT_SHAPES, DEFAULT_SPLIT_SIZES, make_shapes, shapes_classes

__all__ = [
    "GENERATOR_OPTIONS",
    "DataSource",
    "Splits",
    "get_source",
    "list_datasets",
    "register_source",
    "source_registered",
]

#: the data module's options for generated data (``shapes``, ``cues_*``); file-backed sources
#: read none of them
GENERATOR_OPTIONS = frozenset(
    {"target_shapes", "target_colors", "distractors", "lines", "noise", "target_size"}
)

#: train, val and test datasets, before the ``num_train``/``num_val``/``num_test`` subsets
Splits = tuple[Dataset, Dataset, Dataset]


@dataclass(frozen=True)
class DataSource:
    """One data set ``VisattnDataModule(dataset=name)`` can load.

    The callables receive the data module asking (its ``hparams``, ``root``, ``image_size``,
    ``classes`` and ``transform(train)``).

    Attributes:
        name: the ``--data.dataset`` value.
        build: the train/val/test datasets (:data:`Splits`), with the module's transforms.
        stats: per-channel ``(mean, std)`` of ``[0, 1]`` pixels, for normalisation.
        augment: the preset ``augment="standard"`` means (see ``visattn.data.transforms``).
        image_size: the default side of the images fed to the model.
        num_classes: a fixed number of classes, or None when ``classes`` reads them.
        classes: the class names, known before loading (None: read by ``build``).
        fixed_size: the images come at ``image_size`` only (another ``image_size`` is refused).
        in_memory: the images are arrays in memory (``device_augment`` can work on them).
        resize_eval: evaluation resizes then centre-crops (files of any size).
        root_help: set when the source needs ``--data.root``: what the folder holds.
        generator_options: the options of generated data (:data:`GENERATOR_OPTIONS`) this
            source reads; the data module drops the others with a notice.
        prepare: fetches the files (``download=True``), once, before ``build``.
    """

    name: str
    build: Callable[[Any], Splits]
    stats: tuple[Triple, Triple]
    augment: str
    image_size: int
    num_classes: int | None = None
    classes: Callable[[Any], list[str]] | None = None
    fixed_size: bool = False
    in_memory: bool = True
    resize_eval: bool = False
    root_help: str | None = None
    generator_options: frozenset[str] = frozenset()
    prepare: Callable[[Any], None] | None = None

    def __post_init__(self) -> None:
        if (self.num_classes is None) == (self.classes is None):
            raise ValueError(f"data source {self.name!r}: give exactly one of num_classes, classes")

    @property
    def unread_options(self) -> frozenset[str]:
        """The options of generated data (:data:`GENERATOR_OPTIONS`) this source does not read:
        the data module puts them back to their defaults, and a resumed run does not compare
        them."""
        return GENERATOR_OPTIONS - self.generator_options


_SOURCES: Registry[DataSource] = Registry(
    "dataset", error=ValueError, hint=lambda _: f"choose from {list_datasets()}"
)


def register_source(source: DataSource) -> DataSource:
    """Add ``source`` to the registry; a name registered twice is a ``ValueError``."""
    if source.name in _SOURCES:
        raise ValueError(f"data source {source.name!r} is already registered")
    return _SOURCES.add(source.name, source)


@contextmanager
def source_registered(source: DataSource) -> Iterator[DataSource]:
    """Register ``source`` for the duration of a ``with`` block (tests, experiments), then
    remove it."""
    register_source(source)
    try:
        yield source
    finally:
        _SOURCES.remove(source.name)


def list_datasets() -> list[str]:
    """The registered data set names, in registration order."""
    return list(_SOURCES)


def get_source(name: str) -> DataSource:
    """The registered source ``name``; an unknown name is a ``ValueError`` naming the choices."""
    return _SOURCES.lookup(name)


# ---- shapes ----------------------------------------------------------------------------------


def _shapes_classes(dm: Any) -> list[str]:
    return shapes_classes(dm.hparams.target_shapes, dm.hparams.target_colors)


def _generated_splits(dm: Any, generate: Callable[[int, int], tuple]) -> Splits:
    """Train, val and test of a generated data set: ``generate(n, seed)`` gives ``(images,
    labels, boxes, classes)``; the splits take the seeds ``seed``, ``seed + 1``, ``seed + 2``,
    the sizes of ``num_train`` / ``num_val`` / ``num_test`` (or ``DEFAULT_SPLIT_SIZES``), and
    the training augmentation on the training split only."""
    h = dm.hparams

    def split(index: int, n: int | None, key: str) -> ArrayDataset:
        images, labels, boxes, classes = generate(n or DEFAULT_SPLIT_SIZES[key], h.seed + index)
        return ArrayDataset(images, labels, classes, dm.transform(index == 0), boxes)

    return split(0, h.num_train, "train"), split(1, h.num_val, "val"), split(2, h.num_test, "test")


def _build_shapes(dm: Any) -> Splits:
    h = dm.hparams
    return _generated_splits(
        dm,
        lambda n, seed: make_shapes(
            n,
            seed=seed,
            image_size=dm.image_size,
            shapes=h.target_shapes or DEFAULT_SHAPES,
            colors=h.target_colors or DEFAULT_COLORS,
            distractors=h.distractors,
            lines=h.lines,
            noise=h.noise,
            **({} if h.target_size is None else {"target_size": tuple(h.target_size)}),
        ),
    )


# ---- cues: context at a distance, long-range relation, spatial selection ---------------------


def _cues(task: str) -> tuple[Callable[[Any], list[str]], Callable[[Any], Splits]]:
    def classes(dm: Any) -> list[str]:
        return cues_classes(task)

    def build(dm: Any) -> Splits:
        h = dm.hparams
        return _generated_splits(
            dm,
            lambda n, seed: make_cues(
                n,
                seed=seed,
                task=task,
                image_size=dm.image_size,
                distractors=h.distractors,
                lines=h.lines,
                noise=h.noise,
            ),
        )

    return classes, build


# ---- CIFAR -----------------------------------------------------------------------------------


def _prepare_cifar(dm: Any) -> None:
    locate_cifar(dm.hparams.dataset, dm.root, download=True)


def _build_cifar(dm: Any) -> Splits:
    h = dm.hparams
    args = dict(verify=h.verify, download=h.download)
    images, labels, classes = load_cifar(h.dataset, dm.root, train=True, **args)
    test_images, test_labels, _ = load_cifar(h.dataset, dm.root, train=False, **args)
    train = ArrayDataset(images, labels, classes, dm.transform(True))
    test = ArrayDataset(test_images, test_labels, classes, dm.transform(False))
    if not h.val_split:
        return train, test, test
    if not 0 < h.val_split < len(train):
        raise ValueError(f"val_split must be in (0, {len(train)}), got {h.val_split}")
    perm = np.random.default_rng([h.seed, 7]).permutation(len(train))
    val = ArrayDataset(images, labels, classes, dm.transform(False))
    val = val.subset(np.sort(perm[: h.val_split]))
    return train.subset(np.sort(perm[h.val_split :])), val, test


# ---- ImageFolder -----------------------------------------------------------------------------


def _imagefolder_splits(root: Path) -> tuple[str, ...]:
    return ("train", "val", "test") if (root / "test").is_dir() else ("train", "val")


def _imagefolder_classes(dm: Any) -> list[str]:
    root = Path(dm.hparams.root)
    return check_class_folders(root, _imagefolder_splits(root))


def _build_imagefolder(dm: Any) -> Splits:
    h, root = dm.hparams, Path(dm.hparams.root)

    def split(name: str) -> ImageFolderDataset:
        """One split, its files checked (``verify_images``) before training."""
        ds = ImageFolderDataset(root / name, dm.classes, dm.transform(name == "train"))
        ds.verify(h.verify_images, skip_bad=h.skip_bad_images)
        return ds

    train, val = split("train"), split("val")
    # no test/: test on val (a copy: the subsets rebind samples per split)
    test = split("test") if "test" in _imagefolder_splits(root) else copy.copy(val)
    return train, val, test


for _source in (
    DataSource(
        "shapes",
        _build_shapes,
        STATS["shapes"],
        augment="flip",
        image_size=32,
        classes=_shapes_classes,
        generator_options=GENERATOR_OPTIONS,
    ),
    DataSource(
        "cifar10",
        _build_cifar,
        STATS["cifar10"],
        augment="cifar",
        image_size=32,
        num_classes=10,
        fixed_size=True,
        prepare=_prepare_cifar,
    ),
    DataSource(
        "cifar100",
        _build_cifar,
        STATS["cifar100"],
        augment="cifar",
        image_size=32,
        num_classes=100,
        fixed_size=True,
        prepare=_prepare_cifar,
    ),
    DataSource(
        "imagefolder",
        _build_imagefolder,
        STATS["imagefolder"],
        augment="imagenet",
        image_size=224,
        classes=_imagefolder_classes,
        in_memory=False,
        resize_eval=True,
        root_help="with train/ and val/",
    ),
):
    register_source(_source)
for _task in CUE_TASKS:  # cues_key, cues_pair, cues_target
    _classes, _build = _cues(_task)
    register_source(
        DataSource(
            f"cues_{_task}",
            _build,
            STATS["shapes"],
            augment="flip",
            image_size=32,
            classes=_classes,
            generator_options=frozenset({"distractors", "lines", "noise"}),
        )
    )
