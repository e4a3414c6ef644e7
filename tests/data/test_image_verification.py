"""ImageFolder verification agrees with OpenCV, which decodes the images for training: ``fast``
catches a truncated file in every accepted format, both modes refuse what OpenCV cannot read (a
32-bit TIFF, another format under an image name), and whatever passes ``full`` is read by
``cv2.imread`` as the dataset does. The files are made here with PIL and numpy."""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path

import cv2
import numpy as np
import pytest
from PIL import Image

from visattn.data.imagefolder import (
    IMAGE_EXTENSIONS,
    BadImageError,
    ImageFolderDataset,
    verify_images,
)

RNG = np.random.default_rng(0)
RGB = RNG.integers(0, 256, (40, 48, 3), dtype=np.uint8)


def _pil(mode: str = "RGB", **save) -> Callable[[Path], None]:
    def write(path: Path) -> None:
        Image.fromarray(RGB).convert(mode).save(path, **save)

    return write


def _array(array: np.ndarray) -> Callable[[Path], None]:
    return lambda path: Image.fromarray(array).save(path)


# files that train: every accepted extension, and the variants OpenCV reads (palette, 1-bit,
# CMYK, 16-bit, compressed TIFF, lossless WebP)
GOOD = {
    "rgb.jpg": _pil(),
    "cmyk.jpeg": _pil("CMYK"),
    "rgb.png": _pil(),
    "la.png": _pil("LA"),
    "rgb.bmp": _pil(),
    "palette.bmp": _pil("P"),
    "bits.bmp": _pil("1"),
    "rgb.ppm": _pil(),
    "grey.ppm": _pil("L"),
    "rgb.tif": _pil(),
    "lzw.tiff": _pil(compression="tiff_lzw"),
    "uint16.tif": _array(RNG.integers(0, 65535, (40, 48)).astype(np.uint16)),
    "rgb.webp": _pil(),
    "lossless.webp": _pil(lossless=True),
}
# PIL decodes these; OpenCV, which training uses, cannot
OPENCV_CANNOT = {
    "float32.tif": _array(RNG.random((40, 48)).astype(np.float32)),
    "int32.tif": _array(RNG.integers(0, 2**31, (40, 48)).astype(np.int32)),
}


def _make(folder: Path, name: str, write: Callable[[Path], None]) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    write(folder / name)
    return folder / name


def _truncated(folder: Path, name: str, keep: float = 0.6) -> Path:
    path = _make(folder, name, GOOD[name])
    data = path.read_bytes()
    path.write_bytes(data[: int(len(data) * keep)])
    return path


@pytest.fixture(autouse=True)
def _no_cache_dir(tmp_path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("VISATTN_CACHE_DIR", str(tmp_path / "visattn-cache"))


def test_every_accepted_extension_has_a_readable_example() -> None:
    assert {Path(n).suffix for n in GOOD} == set(IMAGE_EXTENSIONS)


@pytest.mark.parametrize("mode", ["fast", "full"])
def test_good_files_of_every_format_pass(tmp_path: Path, mode: str) -> None:
    paths = [_make(tmp_path, n, w) for n, w in GOOD.items()]
    assert verify_images(paths, mode) == {}
    assert all(cv2.imread(str(p), cv2.IMREAD_COLOR) is not None for p in paths)


@pytest.mark.parametrize("name", sorted(GOOD))
@pytest.mark.parametrize("keep", [0.6, 0.95])
def test_fast_catches_truncation_in_every_format(tmp_path: Path, name: str, keep: float) -> None:
    path = _truncated(tmp_path, name, keep)
    bad = verify_images([path], "fast")
    assert list(bad) == [str(path)], f"a truncated {name} passed the fast check"


@pytest.mark.parametrize("mode", ["fast", "full"])
@pytest.mark.parametrize("name", sorted(OPENCV_CANNOT))
def test_tiff_that_opencv_cannot_read_is_refused_naming_opencv(
    tmp_path: Path, name: str, mode: str
) -> None:
    path = _make(tmp_path, name, OPENCV_CANNOT[name])
    with Image.open(path) as im:
        im.load()  # PIL reads it: the old check, which decoded with PIL, let it through
    assert cv2.imread(str(path), cv2.IMREAD_COLOR) is None
    bad = verify_images([path], mode)
    assert "32-bit samples" in bad[str(path)] and "OpenCV" in bad[str(path)]


def test_another_format_under_an_image_name_is_refused(tmp_path: Path) -> None:
    tga = _make(tmp_path, "x.tga", _pil())
    shutil.move(tga, tmp_path / "x.png")
    bad = verify_images([tmp_path / "x.png"], "fast")
    assert "TGA data under a .png name" in bad[str(tmp_path / "x.png")]


def test_whatever_full_passes_opencv_reads(tmp_path: Path) -> None:
    """Agreement on a mixed set: good files, truncations at several points, 32-bit TIFFs."""
    paths = [_make(tmp_path / "good", n, w) for n, w in GOOD.items()]
    paths += [_make(tmp_path / "cannot", n, w) for n, w in OPENCV_CANNOT.items()]
    for keep in (0.3, 0.7, 0.99):
        paths += [_truncated(tmp_path / f"cut{keep}", n, keep) for n in GOOD]
    bad = verify_images(paths, "full")
    for p in paths:
        if str(p) not in bad:
            assert cv2.imread(str(p), cv2.IMREAD_COLOR) is not None, f"{p} passed but fails"
    assert len(bad) == len(paths) - len(GOOD)  # and every damaged file is caught


def _dataset(root: Path) -> ImageFolderDataset:
    for c in ("a", "b"):
        _make(root / c, "0.png", _pil())
    return ImageFolderDataset(root)


def test_dataset_refuses_a_float_tiff_before_training(tmp_path: Path) -> None:
    _dataset(tmp_path)
    _make(tmp_path / "a", "f.tif", OPENCV_CANNOT["float32.tif"])
    ds = ImageFolderDataset(tmp_path)
    with pytest.raises(BadImageError, match=r"f\.tif: TIFF with 32-bit samples"):
        ds.verify("full")


def test_read_error_never_suggests_a_mode_that_already_passed(tmp_path: Path) -> None:
    ds = _dataset(tmp_path)
    ds.verify("full")
    (tmp_path / "a" / "0.png").write_bytes(b"replaced after verification")
    with pytest.raises(OSError, match=r"passed --data\.verify_images full; was it changed"):
        ds[0]
    fresh = _dataset(tmp_path / "unverified")
    (tmp_path / "unverified" / "a" / "0.png").write_bytes(b"never verified")
    with pytest.raises(OSError, match=r"not verified; --data\.verify_images full finds"):
        fresh[0]
