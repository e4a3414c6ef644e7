"""Batched augmentation on tensors (``device_augment``) for the ``cifar``, ``flip`` and ``none``
presets. (The shipped configs leave it off: measured, it brought the quickstart no speed and,
in one run, a lower accuracy; see benchmarks/results/train_cpu.md.)"""

from __future__ import annotations

import pytest
import torch

from visattn.data import DeviceAugment, VisattnDataModule
from visattn.data.transforms import DEVICE_PRESETS

MEAN, STD = (0.4, 0.5, 0.6), (0.2, 0.3, 0.25)


def _pixels(out: torch.Tensor) -> torch.Tensor:
    m, s = torch.tensor(MEAN).view(3, 1, 1), torch.tensor(STD).view(3, 1, 1)
    return (out * s + m) * 255


def test_flip_preset_mirrors_about_half_the_images_and_normalises() -> None:
    x = torch.randint(0, 256, (64, 3, 8, 8), dtype=torch.uint8)
    aug = DeviceAugment.for_preset("flip", MEAN, STD)
    out = aug(x, train=True, generator=torch.Generator().manual_seed(0))
    assert out.dtype == torch.float32 and out.shape == x.shape
    pix = _pixels(out)
    same = [torch.allclose(pix[i], x[i].float(), atol=1e-3) for i in range(64)]
    mirrored = [torch.allclose(pix[i], x[i].flip(-1).float(), atol=1e-3) for i in range(64)]
    assert all(a or b for a, b in zip(same, mirrored))  # no crop: the image or its mirror
    assert 16 < sum(mirrored) < 48
    again = aug(x, train=True, generator=torch.Generator().manual_seed(0))
    other = aug(x, train=True, generator=torch.Generator().manual_seed(1))
    assert torch.equal(out, again) and not torch.equal(out, other)


def test_none_preset_only_normalises_and_cifar_preset_keeps_its_random_stream() -> None:
    x = torch.randint(0, 256, (16, 3, 8, 8), dtype=torch.uint8)
    none = DeviceAugment.for_preset("none", MEAN, STD)
    torch.testing.assert_close(none(x, train=True), none(x, train=False))
    # the cifar preset draws exactly what DeviceAugment(pad=4) always drew
    cifar = DeviceAugment.for_preset("cifar", MEAN, STD, cutout=4)
    plain = DeviceAugment(MEAN, STD, pad=4, cutout=4)
    a = cifar(x, train=True, generator=torch.Generator().manual_seed(3))
    b = plain(x, train=True, generator=torch.Generator().manual_seed(3))
    assert torch.equal(a, b)
    with pytest.raises(ValueError, match="imagenet"):
        DeviceAugment.for_preset("imagenet", MEAN, STD)
    assert set(DEVICE_PRESETS) == {"cifar", "flip", "none"}


def test_shapes_flip_with_device_augment_gives_uint8_batches_then_mirrored_images() -> None:
    dm = VisattnDataModule(
        "shapes", num_train=32, num_val=8, num_test=8, batch_size=32, num_workers=0,
        augment="flip", device_augment=True,
    )  # fmt: skip
    dm.setup("fit")
    x, y = next(iter(dm.train_dataloader()))
    assert x.dtype == torch.uint8
    out, _ = dm.on_after_batch_transfer((x, y), 0)
    mean = torch.tensor(dm.mean).view(3, 1, 1)
    std = torch.tensor(dm.std).view(3, 1, 1)
    pix = (out * std + mean) * 255
    for i in range(len(x)):
        assert torch.allclose(pix[i], x[i].float(), atol=1e-3) or torch.allclose(
            pix[i], x[i].flip(-1).float(), atol=1e-3
        )
    with pytest.raises(ValueError, match="device_augment"):
        VisattnDataModule("shapes", device_augment=True, augment="imagenet")
    with pytest.raises(ValueError, match="color_jitter"):
        VisattnDataModule("shapes", device_augment=True, color_jitter=0.2)
