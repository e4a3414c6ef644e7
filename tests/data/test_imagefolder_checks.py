"""ImageFolder data checked before the first step: corrupt and truncated images (reported by
path, or skipped with a logged count), the verification cache and progress count, and class
folders that are empty or differ between train and val."""

from __future__ import annotations

import io
import logging
import re
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from visattn.data import VisattnDataModule, imagefolder
from visattn.data.imagefolder import BadImageError, verify_images


def _jpeg_bytes(seed: int = 0, size: int = 40) -> bytes:
    rng = np.random.default_rng(seed)
    buf = io.BytesIO()
    Image.fromarray(rng.integers(0, 256, (size, size, 3), dtype=np.uint8)).save(buf, "JPEG")
    return buf.getvalue()


def write_jpeg_folder(
    root: Path, classes: tuple[str, ...] = ("cat", "dog"), n: int = 3, splits=("train", "val")
) -> None:
    for split in splits:
        for c in classes:
            (root / split / c).mkdir(parents=True)
            for i in range(n):
                (root / split / c / f"{i}.jpg").write_bytes(_jpeg_bytes(i + 10 * len(c)))


def corrupt(path: Path) -> None:
    """Not an image at all (OpenCV returns None: the old code crashed mid-epoch)."""
    path.write_bytes(b"\x00garbage, not a JPEG" * 20)


def truncate(path: Path) -> None:
    """A valid header and half the scan data (OpenCV decodes it with a libjpeg warning only)."""
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])


def _dm(root: Path, **kw) -> VisattnDataModule:
    return VisattnDataModule(
        "imagefolder", root=str(root), image_size=32, num_workers=0, batch_size=2, **kw
    )


@pytest.fixture(autouse=True)
def _no_home_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("VISATTN_CACHE_DIR", str(tmp_path / "visattn-cache"))


# ---------------------------------------------------------------------------- bad image files


@pytest.mark.parametrize("damage", [corrupt, truncate], ids=["corrupt", "truncated"])
@pytest.mark.parametrize("mode", ["fast", "full"])
def test_bad_image_stops_setup_naming_the_file(tmp_path: Path, damage, mode: str) -> None:
    write_jpeg_folder(tmp_path)
    bad = tmp_path / "train" / "dog" / "1.jpg"
    damage(bad)
    dm = _dm(tmp_path, verify_images=mode)
    with pytest.raises(BadImageError, match="skip_bad_images") as err:
        dm.setup("fit")  # Lightning calls setup before the sanity check and the first step
    assert str(bad) in str(err.value)
    assert list(err.value.bad) == [str(bad)]
    assert dm.train_dataset is None


def test_default_mode_is_fast_and_catches_a_truncated_jpeg(tmp_path: Path) -> None:
    write_jpeg_folder(tmp_path)
    bad = tmp_path / "val" / "cat" / "0.jpg"
    truncate(bad)
    with pytest.raises(BadImageError, match="truncated JPEG"):
        _dm(tmp_path).setup("fit")


def test_bad_image_in_val_is_reported_too(tmp_path: Path) -> None:
    write_jpeg_folder(tmp_path)
    bad = tmp_path / "val" / "cat" / "2.jpg"
    corrupt(bad)
    with pytest.raises(BadImageError, match=re.escape(str(bad))):
        _dm(tmp_path).setup("fit")


def test_skip_bad_images_drops_them_and_logs_the_count(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    write_jpeg_folder(tmp_path)
    corrupt(tmp_path / "train" / "dog" / "0.jpg")
    truncate(tmp_path / "train" / "cat" / "2.jpg")
    dm = _dm(tmp_path, skip_bad_images=True)
    with caplog.at_level(logging.WARNING, logger="visattn.data.imagefolder"):
        dm.setup("fit")
    assert len(dm.train_dataset) == 4 and len(dm.val_dataset) == 6
    assert len(dm.train_dataset.targets) == 4
    assert "skipped 2 bad image(s) of 6" in caplog.text
    assert str(tmp_path / "train" / "dog" / "0.jpg") in caplog.text
    x, _ = next(iter(dm.train_dataloader()))  # every remaining file loads
    assert x.shape == (2, 3, 32, 32)
    assert len(dm.test_dataset) == 6  # test falls back to val


def test_skipping_that_empties_a_class_is_refused_naming_it(tmp_path: Path) -> None:
    """P10: every training image of a class was bad: "skipped 3 bad image(s)", and the class
    had no training image (counts [0, 3])."""
    write_jpeg_folder(tmp_path)
    for f in (tmp_path / "train" / "cat").glob("*.jpg"):
        corrupt(f)
    with pytest.raises(BadImageError, match=r"leaves class\(es\) \['cat'\] with no image"):
        _dm(tmp_path, skip_bad_images=True).setup("fit")


@pytest.mark.parametrize("target", [".", ".."])
def test_a_class_folder_linking_back_to_its_split_is_refused(tmp_path: Path, target: str) -> None:
    """P21: a class folder symlinked to its own split became an extra class."""
    write_jpeg_folder(tmp_path)
    (tmp_path / "train" / "loop").symlink_to((tmp_path / "train" / target).resolve())
    with pytest.raises(ValueError, match=r"\['loop'\] of .* link back to the split"):
        _dm(tmp_path).setup("fit")


def test_verify_off_skips_the_check(tmp_path: Path) -> None:
    write_jpeg_folder(tmp_path)
    truncate(tmp_path / "train" / "dog" / "0.jpg")
    dm = _dm(tmp_path, verify_images="off")
    dm.setup("fit")
    assert len(dm.train_dataset) == 6


def test_unknown_verify_mode_names_the_option(tmp_path: Path) -> None:
    write_jpeg_folder(tmp_path)
    with pytest.raises(ValueError, match="verify_images"):
        _dm(tmp_path, verify_images="quick")


def test_bad_png_is_caught(tmp_path: Path) -> None:
    write_jpeg_folder(tmp_path)
    png = tmp_path / "train" / "cat" / "p.png"
    Image.fromarray(np.full((20, 20, 3), 7, np.uint8)).save(png)
    data = png.read_bytes()
    png.write_bytes(data[:-30])  # lose the IDAT's end and IEND
    with pytest.raises(BadImageError, match=r"p\.png"):
        _dm(tmp_path).setup("fit")


# ------------------------------------------------------------------------- cache and progress


def test_results_are_cached_by_size_and_mtime(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    write_jpeg_folder(tmp_path, n=2, splits=("train",))
    files = sorted((tmp_path / "train").rglob("*.jpg"))
    calls: list[tuple[str, str]] = []
    real = imagefolder._check_file

    def counting(path: str, mode: str) -> str | None:
        calls.append((path, mode))
        return real(path, mode)

    monkeypatch.setattr(imagefolder, "_check_file", counting)
    root = tmp_path / "train"
    assert verify_images(files, "fast", cache_root=root) == {}
    assert len(calls) == 4 and imagefolder._cache_file(root).is_file()
    calls.clear()
    assert verify_images(files, "fast", cache_root=root) == {}
    assert calls == []  # all cached
    truncate(files[0])  # size and mtime change: checked again, and found bad
    bad = verify_images(files, "fast", cache_root=root)
    assert list(bad) == [str(files[0])] and len(calls) == 1
    calls.clear()
    assert list(verify_images(files, "fast", cache_root=root)) == [str(files[0])]  # cached bad
    assert calls == []
    # a fast pass does not vouch for a full decode; a full one does for fast
    verify_images(files, "full", cache_root=root)
    assert len(calls) == 3
    calls.clear()
    verify_images(files, "fast", cache_root=root)
    assert calls == []


def test_cache_goes_to_the_cache_dir_when_set(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    write_jpeg_folder(tmp_path / "data", n=1, splits=("train",))
    monkeypatch.setenv("VISATTN_CACHE_DIR", str(tmp_path / "cache"))
    root = tmp_path / "data" / "train"
    verify_images(root.rglob("*.jpg"), "fast", cache_root=root)
    assert not (root / imagefolder.CACHE_NAME).exists()
    assert len(list((tmp_path / "cache" / "verify_images").glob("*.json"))) == 1


def test_damaged_cache_file_is_ignored(tmp_path: Path) -> None:
    write_jpeg_folder(tmp_path, n=1, splits=("train",))
    root = tmp_path / "train"
    imagefolder._cache_file(root).parent.mkdir(parents=True)
    imagefolder._cache_file(root).write_text("{not json")
    corrupt(root / "cat" / "0.jpg")
    assert list(verify_images(root.rglob("*.jpg"), "fast", cache_root=root)) == [
        str(root / "cat" / "0.jpg")
    ]


def test_large_folders_show_a_progress_count(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    write_jpeg_folder(tmp_path, n=3, splits=("train",))
    files = list((tmp_path / "train").rglob("*.jpg"))
    monkeypatch.setattr(imagefolder, "PROGRESS_MIN_FILES", 6)
    verify_images(files, "fast", workers=2)
    assert "verifying images (fast): 6/6" in capsys.readouterr().err
    verify_images(files[:5], "fast", workers=2)  # below the threshold: quiet
    assert capsys.readouterr().err == ""


# -------------------------------------------------------------------------------- class folders


def test_empty_class_folder_is_an_error_naming_it(tmp_path: Path) -> None:
    write_jpeg_folder(tmp_path)
    (tmp_path / "train" / "emu").mkdir()
    (tmp_path / "val" / "emu").mkdir()
    (tmp_path / "train" / "emu" / "notes.txt").write_text("no images here")
    with pytest.raises(ValueError, match="no images") as err:
        _dm(tmp_path)
    assert str(tmp_path / "train" / "emu") in str(err.value)
    assert str(tmp_path / "val" / "emu") in str(err.value)


def test_class_folder_only_in_val_is_an_error_naming_it(tmp_path: Path) -> None:
    write_jpeg_folder(tmp_path)
    (tmp_path / "val" / "emu").mkdir()
    (tmp_path / "val" / "emu" / "0.jpg").write_bytes(_jpeg_bytes())
    with pytest.raises(ValueError, match="in val but not in train") as err:
        _dm(tmp_path)
    assert str(tmp_path / "val" / "emu") in str(err.value)


def test_class_folder_missing_from_val_or_test_is_an_error(tmp_path: Path) -> None:
    write_jpeg_folder(tmp_path)
    write_jpeg_folder(tmp_path, classes=("cat",), splits=("test",))
    with pytest.raises(ValueError, match="missing from test") as err:
        _dm(tmp_path)
    assert str(tmp_path / "test" / "dog") in str(err.value)


def test_agreeing_splits_give_the_class_list(tmp_path: Path) -> None:
    write_jpeg_folder(tmp_path, classes=("b", "a", "c"))
    dm = _dm(tmp_path)
    assert dm.classes == ["a", "b", "c"] and dm.num_classes == 3


def test_the_image_check_writes_nothing_into_the_data_folders(tmp_path: Path) -> None:
    """T7: the check wrote .visattn-verify-images.json into train/ and val/, dirtying git- or
    DVC-tracked data and breaking scripts that list class folders."""
    data = tmp_path / "data"
    write_jpeg_folder(data)
    before = sorted(p.relative_to(data) for p in data.rglob("*"))
    for _ in range(2):  # checked, then read from the cache
        dm = _dm(data, verify_images="fast")
        dm.setup("fit")
    assert sorted(p.relative_to(data) for p in data.rglob("*")) == before
    assert dm.classes == ["cat", "dog"]
    assert list((tmp_path / "visattn-cache" / "verify_images").glob("*.json"))
    (data / "train" / imagefolder.CACHE_NAME).write_text("{}")  # an older version's file
    assert _dm(data).classes == ["cat", "dog"]


def test_without_a_cache_dir_the_cache_is_the_users(tmp_path: Path, monkeypatch) -> None:
    write_jpeg_folder(tmp_path / "d", n=1, splits=("train",))
    monkeypatch.delenv("VISATTN_CACHE_DIR")
    monkeypatch.delenv("XDG_CACHE_HOME", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    root = tmp_path / "d" / "train"
    verify_images(root.rglob("*.jpg"), "fast", cache_root=root)
    assert len(list((tmp_path / "home" / ".cache" / "visattn").rglob("*.json"))) == 1
    assert not (root / imagefolder.CACHE_NAME).exists()


def test_train_cls_prints_a_bad_data_message_whole_without_a_traceback(
    tmp_path: Path, capsys: pytest.CaptureFixture
) -> None:
    """The names of the bad images and the fix come after the message's first line; the
    command line printed only that line."""
    from visattn.training.cli import cli_main

    write_jpeg_folder(tmp_path)
    bad = [tmp_path / "train" / "dog" / "1.jpg", tmp_path / "train" / "cat" / "2.jpg"]
    for path in bad:
        corrupt(path)
    with pytest.raises(SystemExit) as done:
        cli_main(["fit", "--data.dataset=imagefolder", f"--data.root={tmp_path}",
                  "--data.image_size=32", "--data.num_workers=0", "--trainer.max_epochs=1",
                  f"--trainer.default_root_dir={tmp_path / 'run'}"])  # fmt: skip
    err = capsys.readouterr().err
    assert done.value.code == 2 and "Traceback" not in err, err[-2000:]
    assert all(str(path) in err for path in bad), err
    assert "skip_bad_images" in err
