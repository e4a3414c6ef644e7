"""Data: the shapes generator, CIFAR reading and its integrity check, ImageFolder, transforms,
worker reseeding and the on-device CIFAR augmentation."""

from __future__ import annotations

import hashlib
import logging
import pickle
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import torch
from helpers.data import write_tiny_cifar, write_tiny_imagefolder
from helpers.paths import SHARED_DATA

from visattn.data import (
    DatasetIntegrityError,
    DeviceAugment,
    VisattnDataModule,
    build_transforms,
    load_cifar,
    make_shapes,
    seed_worker,
)
from visattn.data import cifar as ds_mod
from visattn.data.shapes import COLORS

# ------------------------------------------------------------------------------------- helpers


def _md5(path: Path) -> str:
    return hashlib.md5(path.read_bytes()).hexdigest()


def patch_expected_md5(monkeypatch: pytest.MonkeyPatch, root: Path, name: str = "cifar10") -> None:
    """Make the tiny files 'official' by replacing the expected sums with their own."""
    spec = dict(ds_mod.CIFAR_SPECS[name])
    folder = root / spec["folder"]
    spec["train"] = [(f, _md5(folder / f)) for f, _ in spec["train"]]
    spec["test"] = [(f, _md5(folder / f)) for f, _ in spec["test"]]
    meta_name, _, key = spec["meta"]
    spec["meta"] = (meta_name, _md5(folder / meta_name), key)
    monkeypatch.setitem(ds_mod.CIFAR_SPECS, name, spec)


# -------------------------------------------------------------------------------------- shapes


def test_shapes_is_deterministic_and_seed_dependent() -> None:
    a = make_shapes(64, seed=3)
    b = make_shapes(64, seed=3)
    c = make_shapes(64, seed=4)
    for x, y in zip(a[:3], b[:3]):
        np.testing.assert_array_equal(x, y)
    assert not np.array_equal(a[0], c[0])


def test_shapes_has_every_class_in_balance() -> None:
    images, labels, _, classes = make_shapes(5000, seed=0)
    assert images.shape == (5000, 32, 32, 3) and images.dtype == np.uint8
    # every class occurs, roughly uniformly
    counts = np.bincount(labels, minlength=len(classes))
    assert len(classes) == 9 and counts.min() > 5000 / 9 * 0.8


def test_shapes_target_colour_in_box_tells_the_colour_label() -> None:
    """Recompute the colour part of the label from the pixels inside the box: the pixels nearest
    to the labelled target colour must be in the box, and no clutter uses a target colour."""
    colors = ("red", "green", "blue")
    images, labels, boxes, _ = make_shapes(300, seed=1, colors=colors, noise=0.0)
    palette = np.array([COLORS[c] for c in colors], dtype=np.float32)
    for img, label, box in zip(images, labels, boxes):
        x0, y0, x1, y1 = box.astype(int)
        assert 0 <= x0 < x1 <= 32 and 0 <= y0 < y1 <= 32
        patch = img[y0:y1, x0:x1].reshape(-1, 3).astype(np.float32)
        dist = np.linalg.norm(patch[:, None, :] - palette[None], axis=-1)  # (P, 3)
        close = dist.min(1) < 60
        votes = np.bincount(dist.argmin(1)[close], minlength=3)
        assert votes.argmax() == label % len(colors)
        # the box is tight: its border rows/columns contain target-coloured pixels
        tgt = np.linalg.norm(img.astype(np.float32) - palette[label % 3], axis=-1) < 60
        inside = tgt[y0:y1, x0:x1]
        assert inside[0].any() and inside[-1].any() and inside[:, 0].any() and inside[:, -1].any()


def test_shapes_clutter_never_uses_a_target_colour() -> None:
    """Outside the target's box no pixel is near any target colour, so only the target can
    tell the class (its shape must be read where that colour is)."""
    colors = ("red", "green", "blue")
    images, _, boxes, _ = make_shapes(200, seed=2, colors=colors, noise=0.0, distractors=8, lines=4)
    palette = np.array([COLORS[c] for c in colors], dtype=np.float32)
    for img, box in zip(images, boxes):
        x0, y0, x1, y1 = box.astype(int)
        outside = np.ones((32, 32), bool)
        outside[y0:y1, x0:x1] = False
        pix = img[outside].astype(np.float32)
        dist = np.linalg.norm(pix[:, None, :] - palette[None], axis=-1)
        assert dist.min() > 60


def test_shapes_options_are_validated() -> None:
    with pytest.raises(ValueError, match="unknown colors"):
        make_shapes(4, colors=("red", "purple"))
    with pytest.raises(ValueError, match="unknown shapes"):
        make_shapes(4, shapes=("square", "hexagon"))
    with pytest.raises(ValueError, match="clutter"):
        make_shapes(4, colors=tuple(COLORS)[:7])


def test_shapes_datamodule_classes_and_boxes_align_with_val_loader() -> None:
    dm = VisattnDataModule(
        "shapes",
        num_train=32,
        num_val=16,
        num_test=8,
        num_workers=0,
        batch_size=16,
        target_shapes=["square", "disk"],
        target_colors=["red", "blue"],
    )
    assert dm.num_classes == 4
    dm.setup("fit")
    assert dm.val_dataset.boxes.shape == (16, 4)
    x, y = next(iter(dm.val_dataloader()))
    assert x.shape == (16, 3, 32, 32) and x.dtype == torch.float32
    # val images are the generated ones, normalised, no geometric change
    pixels = dm.denormalize(x) * 255
    np.testing.assert_allclose(
        pixels.permute(0, 2, 3, 1).numpy(), dm.val_dataset.images.astype(np.float32), atol=0.6
    )
    assert torch.equal(y, torch.as_tensor(dm.val_dataset.targets))


# --------------------------------------------------------------------------------------- CIFAR


def test_cifar_wrong_checksum_fails_with_documented_message(tmp_path: Path) -> None:
    write_tiny_cifar(tmp_path)
    with pytest.raises(DatasetIntegrityError) as err:
        load_cifar("cifar10", tmp_path, train=True)
    msg = str(err.value)
    path = tmp_path / "cifar-10-batches-py" / "data_batch_1"
    assert str(path) in msg
    assert _md5(path) in msg and "c99cafc152244af753f735de768cd75f" in msg
    assert "--data.verify false" in msg and "re-packed" in msg


def test_cifar_verify_false_reads_the_files_and_warns(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    write_tiny_cifar(tmp_path)
    with caplog.at_level(logging.WARNING):
        images, labels, classes = load_cifar("cifar10", tmp_path, train=True, verify=False)
    assert "integrity check disabled" in caplog.text
    assert images.shape == (40, 32, 32, 3) and images.dtype == np.uint8
    caplog.clear()  # the other split, and the same again (a fit's setup, then its test): no repeat
    with caplog.at_level(logging.WARNING):
        load_cifar("cifar10", tmp_path, train=False, verify=False)
        load_cifar("cifar10", tmp_path, train=True, verify=False)
    assert "integrity check disabled" not in caplog.text
    # independent decoding of the first image: rows of R, G, B planes of 32x32
    with open(tmp_path / "cifar-10-batches-py" / "data_batch_1", "rb") as f:
        raw = pickle.load(f, encoding="bytes")
    first = raw[b"data"][0]
    np.testing.assert_array_equal(images[0, :, :, 0], first[:1024].reshape(32, 32))
    np.testing.assert_array_equal(images[0, :, :, 2], first[2048:].reshape(32, 32))
    assert labels[: len(raw[b"labels"])].tolist() == raw[b"labels"]
    assert classes[:2] == ["class0", "class1"]


def test_cifar_matching_checksums_pass_verification(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    write_tiny_cifar(tmp_path, name="cifar100")
    patch_expected_md5(monkeypatch, tmp_path, "cifar100")
    images, _, classes = load_cifar("cifar100", tmp_path, train=False)
    assert images.shape == (20, 32, 32, 3) and len(classes) == 100


def test_cifar_corrupted_file_fails_even_when_expected_list_matched(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    write_tiny_cifar(tmp_path)
    patch_expected_md5(monkeypatch, tmp_path)
    path = tmp_path / "cifar-10-batches-py" / "test_batch"
    data = bytearray(path.read_bytes())
    data[-10] ^= 0xFF
    path.write_bytes(bytes(data))
    with pytest.raises(DatasetIntegrityError, match="test_batch"):
        load_cifar("cifar10", tmp_path, train=False)


def test_missing_cifar_names_path_and_both_fixes(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError) as err:
        load_cifar("cifar10", tmp_path / "nowhere", train=True)
    msg = str(err.value)
    assert str(tmp_path / "nowhere" / "cifar-10-batches-py") in msg
    assert "--data.download true" in msg and "--data.root" in msg


def test_download_fetches_the_official_archive_when_files_are_missing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import visattn.data.cifar as cifar

    calls = []

    def fake_download(url: str, download_root: str, filename: str, md5: str) -> None:
        calls.append((url, filename, md5))
        write_tiny_cifar(Path(download_root))  # what extracting the archive would leave

    # the name visattn.data.cifar calls (torchvision's download_and_extract_archive)
    monkeypatch.setattr(cifar, "download_and_extract_archive", fake_download)
    dm = VisattnDataModule("cifar10", root=str(tmp_path), download=True, verify=False)
    dm.prepare_data()
    assert calls == [
        (
            "https://www.cs.toronto.edu/~kriz/cifar-10-python.tar.gz",
            "cifar-10-python.tar.gz",
            "c58f30108f718f92721af3b95e74349a",
        )
    ]
    dm.setup("fit")
    assert len(dm.train_dataset) == 40 and len(calls) == 1  # present now: no second download


def test_a_failed_download_names_the_url_and_the_folder_to_fill_by_hand(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import urllib.error
    import urllib.request

    def offline(*args: object, **kwargs: object) -> None:
        raise urllib.error.URLError("Name or service not known")

    # torchvision's own download code runs; only the network is gone
    monkeypatch.setattr(urllib.request, "urlopen", offline)
    dm = VisattnDataModule("cifar10", root=str(tmp_path), download=True, verify=False)
    with pytest.raises(ConnectionError) as err:
        dm.prepare_data()
    msg = str(err.value)
    assert "https://www.cs.toronto.edu/~kriz/cifar-10-python.tar.gz" in msg
    assert "Name or service not known" in msg and str(tmp_path / "cifar-10-batches-py") in msg


@pytest.mark.data
def test_shared_repacked_cifar10_is_refused_then_accepted_with_verify_off() -> None:
    with pytest.raises(DatasetIntegrityError, match="test_batch"):
        load_cifar("cifar10", SHARED_DATA, train=False)
    images, labels, classes = load_cifar("cifar10", SHARED_DATA, train=False, verify=False)
    assert images.shape == (10000, 32, 32, 3) and np.bincount(labels).tolist() == [1000] * 10
    assert classes[0] == "airplane"


# ---------------------------------------------------------------------------------- ImageFolder


def test_imagefolder_classes_come_from_folders_and_images_are_resized(tmp_path: Path) -> None:
    write_tiny_imagefolder(tmp_path)
    dm = VisattnDataModule(
        "imagefolder", root=str(tmp_path), image_size=32, num_workers=0, batch_size=4
    )
    assert dm.num_classes == 3 and dm.classes == ["cat", "dog", "fox"]
    dm.setup("fit")
    assert len(dm.train_dataset) == 12 and len(dm.val_dataset) == 12
    x, _ = next(iter(dm.train_dataloader()))
    assert x.shape == (4, 3, 32, 32)
    xv, yv = next(iter(dm.val_dataloader()))
    assert xv.shape == (4, 3, 32, 32) and yv.tolist() == [0, 0, 0, 0]


def test_imagefolder_missing_root_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="train"):
        VisattnDataModule("imagefolder", root=str(tmp_path / "none"))
    with pytest.raises(ValueError, match=r"--data\.root"):
        VisattnDataModule("imagefolder")


# ---------------------------------------------------------------------------------- transforms


def test_cifar_train_transform_is_a_padded_crop_maybe_flipped() -> None:
    rng = np.random.default_rng(0)
    img = rng.integers(1, 256, (32, 32, 3), dtype=np.uint8)
    mean, std = (0.5, 0.4, 0.3), (0.2, 0.25, 0.3)
    t = build_transforms("cifar", image_size=32, mean=mean, std=std, train=True)
    t.set_random_seed(0)
    padded = np.zeros((40, 40, 3), np.float32)
    padded[4:36, 4:36] = img
    seen_offsets = set()
    for _ in range(30):
        out = t(image=img)["image"]
        assert out.shape == (3, 32, 32) and out.dtype == torch.float32
        pix = (out.permute(1, 2, 0).numpy() * np.array(std) + np.array(mean)) * 255
        found = None
        for oy in range(9):
            for ox in range(9):
                win = padded[oy : oy + 32, ox : ox + 32]
                for flip in (False, True):
                    cand = win[:, ::-1] if flip else win
                    if np.abs(cand - pix).max() < 0.5:
                        found = (oy, ox, flip)
        assert found is not None, "output is not a flipped/unflipped window of the padded image"
        seen_offsets.add(found)
    assert len(seen_offsets) > 5


def test_eval_transform_is_deterministic_normalisation() -> None:
    img = np.full((32, 32, 3), 128, np.uint8)
    t = build_transforms("cifar", image_size=32, mean=(0.5,) * 3, std=(0.25,) * 3, train=False)
    out = t(image=img)["image"]
    np.testing.assert_allclose(out.numpy(), (128 / 255 - 0.5) / 0.25, atol=1e-6)


def test_cutout_zeroes_one_square() -> None:
    img = np.full((32, 32, 3), 200, np.uint8)
    t = build_transforms(
        "none", image_size=32, mean=(0.0,) * 3, std=(1.0,) * 3, train=True, cutout=8
    )
    out = t(image=img)["image"]
    assert int((out[0] == 0).sum()) == 64


def test_unknown_augment_is_rejected() -> None:
    with pytest.raises(ValueError, match="augment"):
        VisattnDataModule("shapes", augment="autoaugment")


# ------------------------------------------------------------------------------ worker seeding


def _epoch_batches(loader: torch.utils.data.DataLoader) -> list[torch.Tensor]:
    return [x for x, _ in loader]


def test_two_workers_and_two_epochs_get_different_augmentations() -> None:
    """One image repeated: every sample differs only by its augmentation."""
    dm = VisattnDataModule(
        "shapes", num_train=8, num_val=8, num_workers=2, batch_size=4, augment="flip", cutout=6
    )
    dm.setup("fit")
    ds = dm.train_dataset
    ds.images = np.repeat(ds.images[:1], 8, axis=0)  # identical images
    loader = torch.utils.data.DataLoader(
        ds,
        batch_size=4,
        num_workers=2,
        shuffle=False,
        worker_init_fn=seed_worker,
        persistent_workers=False,
    )
    epoch1 = _epoch_batches(loader)  # batch 0 from worker 0, batch 1 from worker 1
    epoch2 = _epoch_batches(loader)
    assert not torch.equal(epoch1[0], epoch1[1]), "both workers replayed the same augmentations"
    assert not torch.equal(epoch1[0], epoch2[0]), "epoch 2 replayed epoch 1's augmentations"


def test_datamodule_train_loader_differs_across_workers_and_epochs() -> None:
    """The loader the Trainer uses (2 persistent workers): identical images, so batches differ
    only through augmentation."""
    dm = VisattnDataModule(
        "shapes", num_train=16, num_val=8, num_workers=2, batch_size=4, augment="flip", cutout=6
    )
    dm.setup("fit")
    ds = dm.train_dataset
    ds.images = np.repeat(ds.images[:1], 16, axis=0)
    loader = dm.train_dataloader()
    epoch1, epoch2 = _epoch_batches(loader), _epoch_batches(loader)
    assert not torch.equal(epoch1[0], epoch1[1])  # worker 0 vs worker 1
    assert not torch.equal(epoch1[2], epoch2[2])  # same worker, next epoch


def test_without_reseeding_workers_would_repeat_each_other() -> None:
    """The failure the reseeding prevents (keeps the test above honest)."""
    dm = VisattnDataModule(
        "shapes", num_train=8, num_val=8, num_workers=0, batch_size=4, augment="flip", cutout=6
    )
    dm.setup("fit")
    ds = dm.train_dataset
    ds.images = np.repeat(ds.images[:1], 8, axis=0)
    loader = torch.utils.data.DataLoader(
        ds, batch_size=4, num_workers=2, shuffle=False, multiprocessing_context="fork"
    )
    batches = _epoch_batches(loader)
    assert torch.equal(batches[0], batches[1])


def test_datamodule_loaders_are_reproducible_under_the_same_torch_seed() -> None:
    def first_batch() -> torch.Tensor:
        torch.manual_seed(5)
        dm = VisattnDataModule(
            "shapes", num_train=16, num_val=8, num_workers=2, batch_size=8, cutout=4
        )
        dm.setup("fit")
        return next(iter(dm.train_dataloader()))[0]

    assert torch.equal(first_batch(), first_batch())


# ------------------------------------------------------------------------- device augmentation


def test_device_augment_loader_gives_uint8_and_hook_gives_normalised_crops() -> None:
    dm = VisattnDataModule(
        "shapes",
        num_train=64,
        num_val=8,
        num_workers=0,
        batch_size=64,
        augment="cifar",
        device_augment=True,
    )
    dm.setup("fit")
    x, y = next(iter(dm.train_dataloader()))
    assert x.dtype == torch.uint8 and x.shape == (64, 3, 32, 32)
    out, y2 = dm.on_after_batch_transfer((x, y), 0)
    assert out.dtype == torch.float32 and out.shape == x.shape and torch.equal(y, y2)
    # val batches are float already and pass through unchanged
    xv, yv = next(iter(dm.val_dataloader()))
    assert xv.dtype == torch.float32
    assert dm.on_after_batch_transfer((xv, yv), 0)[0] is xv


def test_device_augment_crops_flips_and_normalises_like_the_reference() -> None:
    g = torch.Generator().manual_seed(0)
    x = torch.randint(1, 256, (32, 3, 8, 8), dtype=torch.uint8, generator=g)
    mean, std = (0.4, 0.5, 0.6), (0.2, 0.3, 0.25)
    aug = DeviceAugment(mean, std, pad=2)
    out = aug(x, train=True, generator=torch.Generator().manual_seed(1))
    m = torch.tensor(mean).view(3, 1, 1)
    s = torch.tensor(std).view(3, 1, 1)
    pix = (out * s + m) * 255  # back to pixels, (N, 3, 8, 8)
    padded = torch.zeros(32, 3, 12, 12)
    padded[:, :, 2:10, 2:10] = x.float()
    offsets, flips = set(), 0
    for i in range(32):
        match = [
            (oy, ox, f)
            for oy in range(5)
            for ox in range(5)
            for f in (False, True)
            if torch.allclose(
                (
                    padded[i, :, oy : oy + 8, ox : ox + 8].flip(-1)
                    if f
                    else padded[i, :, oy : oy + 8, ox : ox + 8]
                ),
                pix[i],
                atol=1e-3,
            )
        ]
        assert match, f"image {i} is not a (flipped) window of its padded input"
        offsets.add(match[0][:2])
        flips += match[0][2]
    assert len(offsets) > 8 and 4 < flips < 28  # random per image
    # eval: normalisation only
    ev = aug(x, train=False)
    torch.testing.assert_close(ev, (x.float() / 255 - m) / s)


def test_device_augment_is_random_per_call_and_reproducible_per_seed() -> None:
    x = torch.randint(0, 256, (16, 3, 32, 32), dtype=torch.uint8)
    aug = DeviceAugment((0.5,) * 3, (0.25,) * 3, cutout=8)
    a = aug(x, train=True, generator=torch.Generator().manual_seed(0))
    b = aug(x, train=True, generator=torch.Generator().manual_seed(0))
    c = aug(x, train=True, generator=torch.Generator().manual_seed(1))
    assert torch.equal(a, b) and not torch.equal(a, c)
    holes = (a == 0).all(1).flatten(1).sum(1)  # one 8x8 hole, possibly clipped by the border
    assert ((holes >= 16) & (holes <= 64)).all() and (holes == 64).any()


def test_device_augment_refuses_other_pipelines() -> None:
    with pytest.raises(ValueError, match="device_augment"):
        VisattnDataModule("shapes", device_augment=True, augment="imagenet")
    with pytest.raises(ValueError, match="in-memory"):
        VisattnDataModule("imagefolder", root="x", device_augment=True, augment="cifar")


# ------------------------------------------------------------------------------ package layout


def test_data_package_names_still_import() -> None:
    import visattn.data as data

    for name in data.__all__:
        assert getattr(data, name) is not None, name
    assert (
        data.VisattnDataModule
        is __import__("visattn.data.datamodule", fromlist=["x"]).VisattnDataModule
    )
    with pytest.raises(AttributeError, match="no attribute 'nope'"):
        data.nope


def test_shapes_defaults_and_class_names_have_one_home() -> None:
    from visattn.data import shapes

    dm = VisattnDataModule("shapes", num_train=8, num_val=8, num_test=8, num_workers=0)
    assert dm.classes == shapes.shapes_classes() == make_shapes(4)[3]
    assert len(dm.classes) == len(shapes.DEFAULT_SHAPES) * len(shapes.DEFAULT_COLORS)
    dm.setup("fit")
    assert dm.train_dataset.classes == dm.classes
    custom = VisattnDataModule("shapes", target_shapes=["ring"], target_colors=["cyan", "red"])
    assert (
        custom.classes
        == ["cyan_ring", "red_ring"]
        == shapes.shapes_classes(["ring"], ["cyan", "red"])
    )


def _rewrite_batch(root: Path, change) -> Path:
    path = root / "cifar-10-batches-py" / "data_batch_1"
    with open(path, "rb") as f:
        entry = pickle.load(f, encoding="bytes")
    with open(path, "wb") as f:
        pickle.dump(change(entry), f, protocol=2)
    return path


@pytest.mark.parametrize(
    ("damage", "message"),
    [
        ("truncate", "not a readable CIFAR batch"),
        ("text", "not a readable CIFAR batch"),
        ("label57", r"label\(s\) outside 0\.\.9.*e\.g\. 57 at image 0"),
        ("fewer_labels", "labels for"),
    ],
)
def test_a_damaged_cifar_copy_is_named_with_its_file(tmp_path: Path, damage, message) -> None:
    """P18: truncated or non-pickle batches gave messages without the file name, and label 57
    in a CIFAR-10 batch was accepted until the first step."""
    write_tiny_cifar(tmp_path)
    path = tmp_path / "cifar-10-batches-py" / "data_batch_1"
    if damage == "truncate":
        path.write_bytes(path.read_bytes()[:500])
    elif damage == "text":
        path.write_text("this is not a pickle\n")
    elif damage == "label57":
        _rewrite_batch(tmp_path, lambda e: {**e, b"labels": [57, *e[b"labels"][1:]]})
    else:
        _rewrite_batch(tmp_path, lambda e: {**e, b"labels": e[b"labels"][:-1]})
    with pytest.raises(DatasetIntegrityError, match=message) as err:
        load_cifar("cifar10", tmp_path, train=True, verify=False)
    if damage != "label57":
        assert str(path) in str(err.value)


def test_the_last_batch_of_one_counts_the_trainers_devices() -> None:
    """The data module read a private ``_trainer`` it never has, so under DDP it counted one
    device. 66 images at batch 32: one device trains 32 + 32 + 2 (kept); each of two devices
    trains 33 = 32 + 1, a last batch of one image (dropped)."""
    dm = VisattnDataModule("shapes", num_train=66, num_val=8, batch_size=32, num_workers=0)
    dm.setup("fit")
    assert not dm._last_batch_of_one(dm.train_dataset)
    dm.trainer = SimpleNamespace(world_size=2, training=True)
    assert dm._last_batch_of_one(dm.train_dataset)
