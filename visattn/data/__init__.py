"""Data: one module per source (``cifar``, ``imagefolder``, ``shapes``; ``arrays`` holds
in-memory images), albumentations pipelines (``transforms``) and the ``VisattnDataModule`` used
by ``train_cls.py`` (``datamodule``)."""

from .arrays import ArrayDataset
from .cifar import CIFAR_SPECS, DatasetIntegrityError, load_cifar, locate_cifar
from .datamodule import DATASETS, STATS, VisattnDataModule
from .imagefolder import (
    BadImageError,
    ImageFolderDataset,
    check_class_folders,
    find_classes,
    verify_images,
)
from .shapes import COLORS, SHAPES, make_shapes, shapes_classes
from .transforms import DeviceAugment, build_transforms, seed_worker

__all__ = [
    "CIFAR_SPECS",
    "COLORS",
    "DATASETS",
    "SHAPES",
    "STATS",
    "ArrayDataset",
    "BadImageError",
    "DatasetIntegrityError",
    "DeviceAugment",
    "ImageFolderDataset",
    "VisattnDataModule",
    "build_transforms",
    "check_class_folders",
    "find_classes",
    "load_cifar",
    "locate_cifar",
    "make_shapes",
    "seed_worker",
    "shapes_classes",
    "verify_images",
]
