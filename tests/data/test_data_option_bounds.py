"""Data options that would fail deep inside training are refused when the data module is built:
an ``image_size`` past :data:`~visattn.data.transforms.MAX_IMAGE_SIZE` (it used to die in numpy
asking for terabytes), and hidden folders and files of an ImageFolder (``.ipynb_checkpoints``,
macOS's ``._x.jpg``), which are skipped instead of becoming a class or a sample."""

from __future__ import annotations

import logging
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from visattn.data import VisattnDataModule
from visattn.data.imagefolder import check_class_folders, find_classes
from visattn.data.transforms import MAX_IMAGE_SIZE


@pytest.mark.parametrize("dataset", ["shapes", "imagefolder"])
def test_image_size_over_the_limit_is_a_named_error(tmp_path: Path, dataset: str) -> None:
    with pytest.raises(
        ValueError, match=rf"image_size 100000 is over the limit of {MAX_IMAGE_SIZE}"
    ):
        VisattnDataModule(dataset, root=str(tmp_path), image_size=100_000, num_workers=0)


@pytest.mark.parametrize("size", [0, -3, 2.5])
def test_image_size_below_one_or_fractional_is_refused(size: float) -> None:
    with pytest.raises(ValueError, match="image_size"):
        VisattnDataModule("shapes", image_size=size, num_workers=0)


def test_image_size_at_the_limit_is_accepted() -> None:
    dm = VisattnDataModule("shapes", image_size=MAX_IMAGE_SIZE, num_workers=0)
    assert dm.image_shape == (3, MAX_IMAGE_SIZE, MAX_IMAGE_SIZE)  # nothing is generated yet


def _png(path: Path) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    Image.fromarray(np.full((12, 12, 3), 9, np.uint8)).save(path)


def _folder_with_hidden_entries(root: Path) -> None:
    for split in ("train", "val"):
        for c in ("cat", "dog"):
            _png(root / split / c / "0.png")
        # Jupyter's autosave folder, with an image in it, and a hidden sub-folder of a class
        _png(root / split / ".ipynb_checkpoints" / "0-checkpoint.png")
        _png(root / split / "cat" / ".thumbs" / "t.png")
        # macOS metadata next to an image: named like an image, not one
        (root / split / "dog" / "._0.png").write_bytes(b"\x00\x05\x16\x07 AppleDouble")


def test_hidden_folders_are_not_classes(tmp_path: Path) -> None:
    _folder_with_hidden_entries(tmp_path)
    assert find_classes(tmp_path / "train") == ["cat", "dog"]
    assert check_class_folders(tmp_path) == ["cat", "dog"]


def test_one_class_folder_is_named_before_training(tmp_path: Path) -> None:
    for split in ("train", "val"):
        _png(tmp_path / split / "cat" / "0.png")
    with pytest.raises(ValueError, match=r"train has one class folder \(cat\).*at least two"):
        VisattnDataModule("imagefolder", root=str(tmp_path), image_size=12, num_workers=0)


def test_hidden_files_and_folders_are_not_samples(tmp_path: Path) -> None:
    _folder_with_hidden_entries(tmp_path)
    dm = VisattnDataModule("imagefolder", root=str(tmp_path), image_size=12, num_workers=0)
    assert dm.num_classes == 2
    dm.setup("fit")  # the AppleDouble file would fail verification if it were read
    names = sorted(Path(p).relative_to(tmp_path) for p, _ in dm.train_dataset.samples)
    assert names == [Path("train/cat/0.png"), Path("train/dog/0.png")]


# ------------------------------------------------------------- sizes, counts and classes


@pytest.mark.parametrize("size", [0, -32])
def test_non_positive_image_size_names_the_option(size: int) -> None:
    for dataset in ("shapes", "cifar10"):
        with pytest.raises(ValueError, match="image_size must be a positive"):
            VisattnDataModule(dataset, image_size=size)


@pytest.mark.parametrize("key", ["num_train", "num_val", "num_test"])
def test_shapes_with_zero_images_is_an_error_not_the_default(key: str) -> None:
    with pytest.raises(ValueError, match=rf"{key} must be >= 1"):
        VisattnDataModule("shapes", **{key: 0})


def test_data_num_classes_is_checked_against_the_data() -> None:
    assert VisattnDataModule("shapes", num_classes=9).num_classes == 9
    assert VisattnDataModule("cifar100", num_classes=100).num_classes == 100
    with pytest.raises(ValueError, match="num_classes 5 given, but the shapes data has 9"):
        VisattnDataModule("shapes", num_classes=5)


def _target_sides(dm: VisattnDataModule) -> np.ndarray:
    """The longer side of each training target's box, in pixels."""
    dm.setup("fit")
    b = dm.train_dataset.boxes.numpy()
    return np.maximum(b[:, 2] - b[:, 0], b[:, 3] - b[:, 1])


def test_target_size_sets_the_range_of_the_targets_side() -> None:
    """A target's side is at most ``target_size[1] x image_size`` (+1 for rasterisation) and,
    from ``[0.22, 0.32]`` (the default) to ``[0.28, 0.4]``, the mean side grows with the mean
    of the range: (0.34 - 0.27) x 32 = 2.2 px."""
    options = dict(num_train=400, num_val=8, num_test=8, image_size=32, num_workers=0)
    big = _target_sides(VisattnDataModule("shapes", target_size=[0.28, 0.4], **options))
    default = _target_sides(VisattnDataModule("shapes", **options))
    assert big.max() <= 0.4 * 32 + 1 and default.max() <= 0.32 * 32 + 1
    assert 1.5 < big.mean() - default.mean() < 3.0, (big.mean(), default.mean())


@pytest.mark.parametrize("size", [[0.4, 0.28], [0.0, 0.3], [0.3, 1.0], [0.3], "big"])
def test_impossible_target_size_is_refused_before_any_data_is_made(size) -> None:
    with pytest.raises(ValueError, match="target_size"):
        VisattnDataModule("shapes", target_size=size, num_workers=0)


def test_options_of_generated_data_are_dropped_with_a_notice_elsewhere(caplog, monkeypatch) -> None:
    """A quickstart config switched to other data keeps shapes' target_size and clutter: the
    source that does not read them gets them back at their defaults, and one notice names them,
    once per process (a sweep's dry run printed it 6 times)."""
    import visattn.data.datamodule as datamodule

    monkeypatch.setattr(datamodule, "_DROPPED_SAID", set())
    with caplog.at_level(logging.WARNING, logger="visattn.data.datamodule"):
        dm = VisattnDataModule("cues_key", target_size=[0.3, 0.4], noise=5.0, num_workers=0)
        again = VisattnDataModule("cues_key", target_size=[0.3, 0.4], noise=5.0, num_workers=0)
    assert dm.hparams.target_size is None and dm.hparams.noise == 5.0  # cues reads the noise
    assert again.hparams.target_size is None  # dropped again, without a second notice
    notices = [r.getMessage() for r in caplog.records]
    assert notices == [
        "data: option target_size of the shapes data; the 'cues_key' data does not read it, "
        "so it is dropped"
    ]
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="visattn.data.datamodule"):
        dm = VisattnDataModule("cifar10", target_size=[0.3, 0.4], lines=0, num_workers=0)
    assert (dm.hparams.target_size, dm.hparams.lines) == (None, 2)
    assert "options lines, target_size of the shapes, cues_key, cues_pair, cues_target data" in (
        caplog.text
    )
