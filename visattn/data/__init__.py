"""Data: one module per source (``cifar``, ``imagefolder``, ``shapes``; ``arrays`` holds
in-memory images), the registry of the data sets a run can use (``sources``: classes, default
size and augmentation, statistics, splits), albumentations pipelines (``transforms``) and the
``VisattnDataModule`` used by ``train_cls.py`` (``datamodule``).

The datasets import without any optional dependency (an ImageFolder's images are decoded with
OpenCV, of the ``train`` extra, when read); ``VisattnDataModule`` and the transforms need the
``train`` extra (Lightning, albumentations) and are imported when first used."""

import importlib
from typing import Any

from ..constants import STATS
from .arrays import ArrayDataset
from .cifar import CIFAR_SPECS, load_cifar, locate_cifar
from .errors import DatasetIntegrityError, DatasetLayoutError, DatasetNotFoundError
from .imagefolder import (
    BadImageError,
    ImageFolderDataset,
    check_class_folders,
    find_classes,
    verify_images,
)
from .shapes import COLORS, SHAPES, make_shapes, shapes_classes
from .sources import DataSource, get_source, list_datasets, register_source

#: names that need the ``train`` extra, and their modules (loaded on first use)
_LAZY = {
    "VisattnDataModule": "datamodule",
    "DeviceAugment": "transforms",
    "build_transforms": "transforms",
    "seed_worker": "transforms",
}

__all__ = [
    "CIFAR_SPECS",
    "COLORS",
    "SHAPES",
    "STATS",
    "ArrayDataset",
    "BadImageError",
    "DataSource",
    "DatasetIntegrityError",
    "DatasetLayoutError",
    "DatasetNotFoundError",
    "DeviceAugment",
    "ImageFolderDataset",
    "VisattnDataModule",
    "build_transforms",
    "check_class_folders",
    "find_classes",
    "get_source",
    "list_datasets",
    "load_cifar",
    "locate_cifar",
    "make_shapes",
    "register_source",
    "seed_worker",
    "shapes_classes",
    "verify_images",
]


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(importlib.import_module(f".{_LAZY[name]}", __name__), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
