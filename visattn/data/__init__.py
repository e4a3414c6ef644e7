"""Data: datasets (CIFAR, ImageFolder, the embedded ``shapes``), albumentations pipelines and
the ``VisattnDataModule`` used by ``train_cls.py``."""

from .datamodule import DATASETS, STATS, VisattnDataModule
from .datasets import (
    ArrayDataset,
    DatasetIntegrityError,
    ImageFolderDataset,
    load_cifar,
    make_shapes,
)
from .transforms import DeviceAugment, build_transforms, seed_worker

__all__ = [
    "DATASETS",
    "STATS",
    "ArrayDataset",
    "DatasetIntegrityError",
    "DeviceAugment",
    "ImageFolderDataset",
    "VisattnDataModule",
    "build_transforms",
    "load_cifar",
    "make_shapes",
    "seed_worker",
]
