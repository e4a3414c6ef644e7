"""The registry of data sets (``visattn.data.sources``): a new data set is one registered entry,
and the data module takes its classes, size, augmentation, statistics and splits from it."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from visattn.data import VisattnDataModule
from visattn.data.arrays import ArrayDataset
from visattn.data.sources import (
    DataSource,
    get_source,
    list_datasets,
    register_source,
    source_registered,
)

STATS = ((0.25, 0.5, 0.75), (0.5, 0.25, 0.125))


def _build_stripes(dm: VisattnDataModule) -> tuple[ArrayDataset, ArrayDataset, ArrayDataset]:
    """Three classes of horizontal, vertical and no stripes, 20 images per split."""

    def split(seed: int, train: bool) -> ArrayDataset:
        rng = np.random.default_rng(seed)
        size = dm.image_size
        labels = rng.integers(0, 3, 20)
        images = np.zeros((20, size, size, 3), np.uint8)
        images[labels == 0, ::2] = 255
        images[labels == 1, :, ::2] = 255
        return ArrayDataset(images, labels, ["h", "v", "none"], dm.transform(train))

    return split(0, True), split(1, False), split(2, False)


STRIPES = DataSource("stripes", _build_stripes, STATS, augment="none", image_size=12, num_classes=3)


def test_the_shipped_data_sets_are_registered_entries() -> None:
    assert list_datasets() == [
        "shapes",
        "cifar10",
        "cifar100",
        "imagefolder",
        "cues_key",
        "cues_pair",
        "cues_target",
    ]
    assert get_source("cifar100").num_classes == 100 and get_source("cifar10").fixed_size
    assert get_source("imagefolder").image_size == 224 and not get_source("imagefolder").in_memory
    with pytest.raises(
        ValueError, match=r"unknown dataset 'cifar1'; did you mean 'cifar10'.*\? \(choose from"
    ):
        get_source("cifar1")
    with pytest.raises(ValueError, match="already registered"):
        register_source(DataSource("shapes", _build_stripes, STATS, "none", 8, 3))
    assert get_source("shapes").augment == "flip"  # the shipped entry stays


def test_a_new_data_set_is_one_registered_entry() -> None:
    with source_registered(STRIPES):
        dm = VisattnDataModule("stripes", batch_size=4, num_workers=0, num_train=8)
        assert dm.num_classes == 3 and dm.image_shape == (3, 12, 12)
        assert (dm.mean, dm.std, dm.augment) == (*STATS, "none")
        dm.setup("fit")
        assert [len(d) for d in (dm.train_dataset, dm.val_dataset, dm.test_dataset)] == [8, 20, 20]
        assert dm.classes == ["h", "v", "none"]
        x, y = next(iter(dm.val_dataloader()))
        # normalised with the source's statistics: denormalising gives the 0/255 pixels back
        pixels = dm.denormalize(x)
        torch.testing.assert_close(pixels, pixels.round(), atol=1e-5, rtol=0)
        assert x.shape == (4, 3, 12, 12) and y.max() < 3
        with pytest.raises(ValueError, match="device_augment implements the presets"):
            VisattnDataModule("stripes", device_augment=True, augment="imagenet")
    with pytest.raises(ValueError, match="unknown dataset 'stripes'"):
        VisattnDataModule("stripes")


def test_a_source_gives_a_class_count_or_a_way_to_read_the_classes() -> None:
    with pytest.raises(ValueError, match="exactly one of num_classes, classes"):
        DataSource("bad", _build_stripes, STATS, "none", 8)
