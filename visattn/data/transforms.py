"""Augmentation pipelines (albumentations 2.0) and the on-device CIFAR augmentation.

Presets (``augment`` in the data config):

* ``"cifar"`` - He et al. (CVPR 2016, Sec. 4.2): pad 4 pixels with zeros, random 32x32 crop,
  horizontal flip with p=0.5, normalise with the dataset's mean/std.
* ``"imagenet"`` - Szegedy et al. / torchvision reference: RandomResizedCrop(scale 0.08-1,
  ratio 3/4-4/3), horizontal flip; validation resizes the shorter side to ``size / 0.875`` and
  centre-crops ``size``.
* ``"flip"`` - horizontal flip only (keeps geometry otherwise; the default for ``shapes``).
* ``"none"`` - normalisation only.

Extras, valid with any preset: ``cutout`` (DeVries & Taylor, arXiv 2017: one ``cutout x cutout``
square set to zero after normalisation, p=1) and ``color_jitter`` (brightness, contrast and
saturation factors in ``[1 - s, 1 + s]``, p=0.8).

albumentations 2.0 ``Compose`` keeps its own random generator, independent of numpy, random and
torch seeds; DataLoader workers are forked with copies of it, so every worker (and every epoch,
with non-persistent workers) would replay the same augmentations. :func:`seed_worker` reseeds it
from ``torch.initial_seed()``, which the DataLoader makes distinct per worker and per epoch.
"""

from __future__ import annotations

import math
import random
from typing import Any

import cv2
import numpy as np
import torch
from torch.utils.data import get_worker_info

from .._extras import missing_extra
from ..constants import MAX_IMAGE_SIZE

try:
    import albumentations as A
except ImportError as _err:
    raise missing_extra(_err, "train", "visattn.data.transforms") from _err

__all__ = [
    "AUGMENTS",
    "DEVICE_PRESETS",
    "INTERPOLATIONS",
    "MAX_IMAGE_SIZE",
    "DeviceAugment",
    "build_transforms",
    "check_image_size",
    "seed_transform",
    "seed_worker",
]

AUGMENTS = ("cifar", "imagenet", "flip", "none")


#: interpolation names (timm's pretrained configs) -> OpenCV flags
INTERPOLATIONS = {
    "bilinear": cv2.INTER_LINEAR,
    "bicubic": cv2.INTER_CUBIC,
    "nearest": cv2.INTER_NEAREST,
    "area": cv2.INTER_AREA,
}


def check_image_size(image_size: Any) -> int:
    """``image_size`` as an int, checked: a whole number of pixels in ``[1, MAX_IMAGE_SIZE]``.

    Raises:
        ValueError: anything else; the message names ``image_size`` and the bound.
    """
    if isinstance(image_size, bool) or int(image_size) != image_size:
        raise ValueError(f"image_size must be a whole number of pixels, got {image_size!r}")
    size = int(image_size)
    if size < 1:
        raise ValueError(f"image_size must be a positive number of pixels, got {size}")
    if size > MAX_IMAGE_SIZE:
        raise ValueError(
            f"image_size {size} is over the limit of {MAX_IMAGE_SIZE} pixels: one {size}x{size} "
            f"RGB image alone is {3 * size * size / 2**30:.3g} GiB as uint8 (4x that as float)"
        )
    return size


#: the presets :class:`DeviceAugment` implements, and its settings for each
DEVICE_PRESETS: dict[str, dict[str, Any]] = {
    "cifar": {"pad": 4, "flip": True},
    "flip": {"pad": 0, "flip": True},
    "none": {"pad": 0, "flip": False},
}


def _extras(cutout: int, color_jitter: float) -> tuple[list, list]:
    """(before-normalise, after-normalise) extra transforms."""
    before, after = [], []
    if color_jitter:
        s = float(color_jitter)
        before.append(
            A.ColorJitter(
                brightness=(1 - s, 1 + s),
                contrast=(1 - s, 1 + s),
                saturation=(1 - s, 1 + s),
                hue=(0, 0),
                p=0.8,
            )
        )
    if cutout:
        after.append(
            A.CoarseDropout(
                num_holes_range=(1, 1),
                hole_height_range=(cutout, cutout),
                hole_width_range=(cutout, cutout),
                fill=0,
                p=1.0,
            )
        )
    return before, after


def build_transforms(
    augment: str,
    *,
    image_size: int,
    mean: tuple[float, float, float],
    std: tuple[float, float, float],
    train: bool,
    resize_eval: bool = False,
    crop_pct: float = 0.875,
    interpolation: str = "bilinear",
    cutout: int = 0,
    color_jitter: float = 0.0,
) -> A.Compose:
    """The albumentations pipeline for one split; outputs a float ``(3, S, S)`` tensor.

    Args:
        augment: a preset in :data:`AUGMENTS`.
        image_size: output side ``S``.
        mean, std: per-channel statistics of ``[0, 1]`` pixels.
        train: the training pipeline (random) or the evaluation one (deterministic).
        resize_eval: evaluation resizes (shorter side ``floor(S / crop_pct)``, as timm) and
            centre-crops ``S x S``; for datasets whose images are not already ``S x S``
            (ImageFolder).
        crop_pct, interpolation: that resize's crop fraction and interpolation (``bilinear``,
            ``bicubic``, ``nearest``, ``area``; OpenCV's, where timm uses PIL's), e.g. from a
            pretrained tag's config.
        cutout: side of the cutout square in pixels (0 = off), training only.
        color_jitter: strength ``s`` of colour jitter (0 = off), training only.
    """
    if augment not in AUGMENTS:
        raise ValueError(f"unknown augment {augment!r}; choose from {list(AUGMENTS)}")
    if cutout < 0 or color_jitter < 0:
        raise ValueError(f"cutout and color_jitter must be >= 0, got {cutout}, {color_jitter}")
    normalize = [A.Normalize(mean=mean, std=std, max_pixel_value=255.0), A.ToTensorV2()]
    size = image_size
    if interpolation not in INTERPOLATIONS:
        raise ValueError(
            f"unknown interpolation {interpolation!r}; choose from {list(INTERPOLATIONS)}"
        )
    if not 0 < crop_pct <= 1:
        raise ValueError(f"crop_pct must be in (0, 1], got {crop_pct}")
    if resize_eval:
        scale = math.floor(size / crop_pct)
        evaluation = [
            A.SmallestMaxSize(max_size=scale, interpolation=INTERPOLATIONS[interpolation]),
            A.CenterCrop(size, size),
        ]
    else:
        evaluation = []
    if not train:
        return A.Compose([*evaluation, A.Normalize(mean=mean, std=std), A.ToTensorV2()])
    if augment == "cifar":
        geometric = [
            A.PadIfNeeded(size + 8, size + 8, border_mode=cv2.BORDER_CONSTANT, fill=0),
            A.RandomCrop(size, size),
            A.HorizontalFlip(p=0.5),
        ]
    elif augment == "imagenet":
        geometric = [A.RandomResizedCrop(size=(size, size)), A.HorizontalFlip(p=0.5)]
    elif augment == "flip":
        geometric = [*evaluation, A.HorizontalFlip(p=0.5)]
    else:
        geometric = list(evaluation)
    before, after = _extras(cutout, color_jitter)
    return A.Compose([*geometric, *before, normalize[0], *after, normalize[1]])


def seed_transform(transform: object, seed: int) -> None:
    """Reseed an albumentations pipeline (no-op for None or non-albumentations callables)."""
    setter = getattr(transform, "set_random_seed", None)
    if setter is not None:
        setter(seed % 2**32)


def seed_worker(worker_id: int) -> None:
    """DataLoader ``worker_init_fn``: one OpenCV thread, and distinct seeds for numpy, random and
    the dataset's albumentations pipeline, derived from ``torch.initial_seed()`` (which the
    DataLoader sets to ``base_seed + worker_id``, ``base_seed`` drawn anew for every epoch's
    iterator from the generator seeded by ``seed_everything``)."""
    cv2.setNumThreads(1)
    seed = torch.initial_seed() % 2**32
    np.random.seed(seed)
    random.seed(seed)
    info = get_worker_info()
    if info is not None:
        seed_transform(getattr(info.dataset, "transform", None), seed)


class DeviceAugment:
    """The in-memory presets' augmentation on a whole batch of tensors (on the accelerator, or
    batched on the CPU).

    ``x`` uint8 ``(N, 3, H, W)`` -> float ``(N, 3, H, W)``: (train) zero-pad ``pad`` pixels and
    take a random ``H x W`` crop per image (``pad > 0``), flip half of the images horizontally
    (``flip``), optionally cut out one ``cutout`` square; then normalise. All per-image choices
    are drawn at once and the crop is a single gather, so the cost is a few kernels per batch
    regardless of ``N`` (no per-image Python, unlike a per-sample pipeline in the loader).

    The presets of :func:`build_transforms` it implements (see :data:`DEVICE_PRESETS`):
    ``cifar`` (He et al., CVPR 2016: ``pad=4``, flip), ``flip`` (``pad=0``, flip) and ``none``
    (``pad=0``, no flip). Same distribution as the albumentations pipeline, different random
    stream.

    Args:
        mean, std: per-channel statistics of ``[0, 1]`` pixels.
        pad: padding of the random crop (He et al.: 4); 0 = no crop.
        flip: random horizontal flip with p=0.5.
        cutout: side of the cutout square (0 = off), applied after normalisation as in DeVries &
            Taylor (square centre uniform over the image, clipped at the border).
    """

    def __init__(
        self,
        mean: tuple[float, float, float],
        std: tuple[float, float, float],
        *,
        pad: int = 4,
        flip: bool = True,
        cutout: int = 0,
    ) -> None:
        if pad < 0 or cutout < 0:
            raise ValueError(f"DeviceAugment: pad and cutout must be >= 0, got {pad}, {cutout}")
        self.mean = torch.tensor(mean, dtype=torch.float32).view(1, 3, 1, 1)
        self.std = torch.tensor(std, dtype=torch.float32).view(1, 3, 1, 1)
        self.pad = pad
        self.flip = bool(flip)
        self.cutout = cutout

    @classmethod
    def for_preset(
        cls,
        augment: str,
        mean: tuple[float, float, float],
        std: tuple[float, float, float],
        *,
        cutout: int = 0,
    ) -> DeviceAugment:
        """The batched form of the preset ``augment`` (a key of :data:`DEVICE_PRESETS`)."""
        if augment not in DEVICE_PRESETS:
            raise ValueError(
                f"device augmentation implements the presets {list(DEVICE_PRESETS)}, "
                f"not {augment!r}"
            )
        return cls(mean, std, cutout=cutout, **DEVICE_PRESETS[augment])

    def normalize(self, x: torch.Tensor) -> torch.Tensor:
        mean, std = self.mean.to(x.device), self.std.to(x.device)
        return (x.float() / 255.0 - mean) / std

    def __call__(
        self, x: torch.Tensor, *, train: bool, generator: torch.Generator | None = None
    ) -> torch.Tensor:
        if x.dtype != torch.uint8 or x.ndim != 4:
            raise ValueError(
                f"DeviceAugment expects a uint8 (N, C, H, W) batch, got {x.dtype} {tuple(x.shape)}"
            )
        if not train:
            return self.normalize(x)
        n, _, h, w = x.shape
        dev = x.device

        def rand_int(high: int) -> torch.Tensor:
            return torch.randint(0, high, (n,), device=dev, generator=generator)

        p = self.pad
        if p:
            xp = torch.nn.functional.pad(x, (p, p, p, p))
            oy, ox = rand_int(2 * p + 1), rand_int(2 * p + 1)
            flip = rand_int(2).bool() if self.flip else torch.zeros(n, dtype=torch.bool, device=dev)
            rows = oy[:, None] + torch.arange(h, device=dev)  # (N, H)
            cols = torch.arange(w, device=dev).expand(n, w)
            cols = torch.where(flip[:, None], cols.flip(1), cols) + ox[:, None]  # (N, W)
            batch = torch.arange(n, device=dev)[:, None, None]
            out = xp.permute(0, 2, 3, 1)[batch, rows[:, :, None], cols[:, None, :]]  # (N, H, W, C)
            out = out.permute(0, 3, 1, 2)
        elif self.flip:
            out = torch.where(rand_int(2).bool()[:, None, None, None], x.flip(3), x)
        else:
            out = x
        out = self.normalize(out)
        if self.cutout:
            y0 = rand_int(h)[:, None, None] - self.cutout // 2
            x0 = rand_int(w)[:, None, None] - self.cutout // 2
            ys = torch.arange(h, device=dev)[None, :, None]
            xs = torch.arange(w, device=dev)[None, None, :]
            hole = (ys >= y0) & (ys < y0 + self.cutout) & (xs >= x0) & (xs < x0 + self.cutout)
            out = out.masked_fill(hole[:, None], 0.0)
        return out.contiguous()
