"""``VisattnDataModule``: one LightningDataModule for shapes, CIFAR-10/100 and ImageFolder data."""

from __future__ import annotations

import inspect
import logging
import math
import os
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

import numpy as np
import torch
from timm.data import ImageNetInfo
from torch.utils.data import DataLoader, Dataset, Sampler

from .._extras import missing_extra
from .._registry import unknown_options
from .._values import OptionError

try:
    import lightning.pytorch as pl
    from lightning.pytorch.utilities import rank_zero_info
except ImportError as _err:
    raise missing_extra(_err, "train", "visattn.data.VisattnDataModule") from _err

from .arrays import ArrayDataset
from .imagefolder import VERIFY_MODES
from .shapes import check_target_size
from .sources import DataSource, get_source, list_datasets
from .transforms import (
    AUGMENTS,
    DEVICE_PRESETS,
    DeviceAugment,
    build_transforms,
    check_image_size,
    seed_transform,
    seed_worker,
)

__all__ = ["EpochSampler", "VisattnDataModule"]

log = logging.getLogger(__name__)


class EpochSampler(Sampler[int]):
    """A random order that depends only on the run's seed and the epoch.

    Lightning calls ``set_epoch`` before every training epoch (as for ``DistributedSampler``),
    which also reseeds the rest of the train pipeline through ``on_epoch``. So every random
    choice of an epoch's data (order, augmentations, worker seeds) is a function of
    ``(seed, epoch)``, and a run resumed at an epoch boundary sees exactly the data of the
    uninterrupted run.
    """

    def __init__(self, n: int, seed: int, on_epoch: Callable[[int], None] | None = None) -> None:
        self.n, self.seed, self.on_epoch = n, int(seed), on_epoch
        self.set_epoch(0)

    def set_epoch(self, epoch: int) -> None:
        self.epoch = int(epoch)
        self.epoch_seed = (self.seed * 1_000_003 + self.epoch * 7_919) % 2**62
        if self.on_epoch is not None:
            self.on_epoch(self.epoch_seed)

    def __iter__(self) -> Iterator[int]:
        g = torch.Generator().manual_seed(self.epoch_seed)
        yield from torch.randperm(self.n, generator=g).tolist()

    def __len__(self) -> int:
        return self.n


class VisattnDataModule(pl.LightningDataModule):
    """Data for classification: datasets, augmentation and loaders.

    The data set is a registered source (:mod:`visattn.data.sources`: its classes, default
    size and augmentation, statistics and splits). Splits: ``shapes`` generates train/val/test
    from ``seed``, ``seed + 1``, ``seed + 2``. CIFAR's val split is the official test set (as in
    He et al.) unless ``val_split > 0`` holds that many training images out (a fixed
    permutation); test is always the test set. ImageFolder reads ``root/train`` and ``root/val``
    (and ``root/test`` when present, else val).

    Args:
        dataset: a registered source: ``"shapes"``, ``"cifar10"``, ``"cifar100"`` or
            ``"imagefolder"`` (``visattn.data.sources.list_datasets()``).
        root: data folder (CIFAR: the folder holding ``cifar-10-batches-py/``; default
            ``./data``; ImageFolder: required). Unused by shapes.
        download: download CIFAR into ``root`` when missing.
        verify: check CIFAR files' md5 against the official archive (see ``load_cifar``).
        verify_images: ImageFolder: check that every image decodes before training (cached; see
            :func:`~visattn.data.imagefolder.verify_images`): ``"fast"`` (header, structure and
            a JPEG's end marker; the default), ``"full"`` (every pixel) or ``"off"``.
        skip_bad_images: ImageFolder: leave out files that fail the check (their count and
            paths are logged) instead of stopping before the first step.
        num_classes: the number of classes the data must have (the model gets it); None (the
            default) takes it from the data: CIFAR-10 10, CIFAR-100 100, ImageFolder the class
            folders of ``train``, shapes ``len(target_shapes) * len(target_colors)``.
        batch_size: per device.
        num_workers: DataLoader worker processes (each reseeded, see ``seed_worker``).
        image_size: side of the images fed to the model (default 32 for shapes/CIFAR, 224 for
            ImageFolder; CIFAR must be 32).
        augment: ``"standard"`` (the dataset's usual preset: cifar for CIFAR, imagenet for
            ImageFolder, flip for shapes) or a preset in ``AUGMENTS``.
        cutout: cutout square side in pixels (0 = off).
        color_jitter: colour jitter strength (0 = off).
        device_augment: for in-memory data (shapes, CIFAR) with the ``cifar``, ``flip`` or
            ``none`` preset: the train loader yields uint8 images, and the preset's pad-crop,
            flip, cutout and normalisation run on whole batches in ``on_after_batch_transfer``
            (on the accelerator, or batched on the CPU; see ``DeviceAugment``): no per-image
            work in the loader, so no loader workers are needed. Same distribution as the
            per-image pipeline, another random stream. val/test are unchanged.
        num_train, num_val, num_test: shapes: images to generate (None = 5,000, 1,000,
            1,000); other datasets: a fixed random subset of that size (None = all); >= 1.
        val_split: CIFAR: hold out this many training images as val (0 = val is the test set).
        seed: seed of shapes' generation and of the subset/hold-out permutations.
        target_shapes, target_colors: shapes' classes (``len(shapes) * len(colors)``).
        distractors, lines, noise: shapes' clutter (cues reads them too).
        target_size: shapes: ``[lo, hi]``, the range of the target's side as fractions of
            ``image_size`` (None = ``[0.22, 0.32]``, :func:`~visattn.data.shapes.make_shapes`'
            default); larger targets make an easier task. Options of generated data that the
            chosen ``dataset`` does not read go back to their defaults, with a logged notice.
        drop_last: drop the last incomplete training batch. A last batch of one image is
            always dropped (BatchNorm cannot train on one image).
        pin_memory: default: when CUDA is available.
        eval_transform: ``"dataset"`` (the source's evaluation pipeline) or a pretrained
            config, timm's mapping with ``input_size``, ``crop_pct``, ``interpolation``,
            ``mean`` and ``std`` (e.g. ``model.pretrained_cfg``): val/test resize the shorter
            side to ``floor(S / crop_pct)`` with that interpolation and centre-crop
            ``S x S`` (``S = input_size[-1]``), and every split normalises with its
            ``mean``/``std``. ``train_cls.py`` also takes a tag (``se_resnet50.ra2_in1k``) or
            ``"model"`` (the tag named by ``--model.model``) and records the mapping.
        class_map: ``"imagenet"``: ImageFolder class folders are WordNet ids (``n01440764``)
            of ImageNet-1k classes, and each image's label is its class's index among the
            1,000 (timm's ``ImageNetInfo`` order, the order of the released weights), so a
            1000-class network is evaluated on a subset of the classes (``num_classes`` is
            1000; the logits of every class compete, as in ImageNet's own evaluation).
    """

    def __init__(
        self,
        dataset: str = "shapes",
        root: str | None = None,
        download: bool = False,
        verify: bool = True,
        verify_images: str = "fast",
        skip_bad_images: bool = False,
        num_classes: int | None = None,
        batch_size: int = 128,
        num_workers: int = 2,
        image_size: int | None = None,
        augment: str = "standard",
        cutout: int = 0,
        color_jitter: float = 0.0,
        device_augment: bool = False,
        num_train: int | None = None,
        num_val: int | None = None,
        num_test: int | None = None,
        val_split: int = 0,
        seed: int = 0,
        target_shapes: list[str] | None = None,
        target_colors: list[str] | None = None,
        distractors: int = 4,
        lines: int = 2,
        noise: float = 12.0,
        target_size: list[float] | None = None,
        drop_last: bool = False,
        pin_memory: bool | None = None,
        eval_transform: str | dict[str, Any] = "dataset",
        class_map: str | None = None,
    ) -> None:
        super().__init__()
        source = get_source(dataset)
        self.eval_cfg = _eval_cfg(eval_transform)
        self.class_index = _class_map(class_map, dataset)
        augment = source.augment if augment == "standard" else augment
        if image_size is not None:
            image_size = check_image_size(image_size)
        # num_classes is checked below and reaches the model by the link; kept out of hparams,
        # where Lightning would find it disagreeing (None) with the module's
        self.save_hyperparameters(ignore=["num_classes"])
        _drop_unread_options(source, self.hparams)
        _check_options(source, self.hparams, augment)
        self.source = source
        self.augment = augment
        self.image_size = source.image_size if image_size is None else int(image_size)
        if (
            isinstance(cutout, bool)
            or not isinstance(cutout, int)
            or not (0 <= cutout < self.image_size)
        ):
            raise OptionError(
                f"cutout must be a square side in pixels from 0 (off) to {self.image_size - 1} "
                f"(the image size is {self.image_size}), got {cutout!r} (data.cutout)"
            )
        self.mean, self.std = source.stats
        if self.eval_cfg is not None:
            self.mean, self.std = self.eval_cfg["mean"], self.eval_cfg["std"]
        self.classes: list[str] | None = source.classes(self) if source.classes else None
        if self.class_index is not None:
            _check_wnids(self.classes or [], self.class_index)
        if num_classes is not None and num_classes != self.num_classes:
            raise ValueError(
                f"num_classes {num_classes} given, but the {dataset} data has "
                f"{self.num_classes} classes; drop --data.num_classes or fix the data"
            )
        self.device_aug = (
            DeviceAugment.for_preset(augment, self.mean, self.std, cutout=cutout)
            if device_augment
            else None
        )
        self._device_gen: torch.Generator | None = None
        self.train_dataset: Dataset | None = None
        self.val_dataset: Dataset | None = None
        self.test_dataset: Dataset | None = None

    # ---- sizes -------------------------------------------------------------------------------

    @property
    def num_classes(self) -> int:  # type: ignore[override]
        """Number of classes, known without loading data (linked to ``model.num_classes``)."""
        if self.class_index is not None:
            return len(self.class_index)
        return self.source.num_classes or len(self.classes or ())

    @property
    def image_shape(self) -> tuple[int, int, int]:
        """``(C, H, W)`` of the images the model sees."""
        return (3, self.image_size, self.image_size)

    @property
    def root(self) -> Path:
        """The data folder (``./data`` when ``root`` is not given)."""
        return Path(self.hparams.root if self.hparams.root is not None else "data")

    def denormalize(self, images: torch.Tensor) -> torch.Tensor:
        """Undo the normalisation: ``(N, 3, H, W)`` -> pixels in ``[0, 1]``."""
        mean = torch.tensor(self.mean, device=images.device).view(1, 3, 1, 1)
        std = torch.tensor(self.std, device=images.device).view(1, 3, 1, 1)
        return (images.float() * std + mean).clamp(0, 1)

    # ---- datasets ----------------------------------------------------------------------------

    def transform(self, train: bool) -> Any:
        """The per-image pipeline of a split (None for training with ``device_augment``: the
        batches are augmented on the device)."""
        h = self.hparams
        if train and self.device_aug is not None:
            return None
        pretrained = {} if train or self.eval_cfg is None else self.eval_cfg
        return build_transforms(
            self.augment,
            image_size=pretrained.get("size", self.image_size),
            mean=self.mean,
            std=self.std,
            train=train,
            resize_eval=bool(pretrained) or self.source.resize_eval,
            crop_pct=pretrained.get("crop_pct", 0.875),
            interpolation=pretrained.get("interpolation", "bilinear"),
            cutout=h.cutout if train else 0,
            color_jitter=h.color_jitter if train else 0.0,
        )

    def _subset(self, ds: Any, n: int | None, salt: int) -> Any:
        if n is None or n >= len(ds):
            return ds
        idx = np.sort(np.random.default_rng([self.hparams.seed, salt]).permutation(len(ds))[:n])
        if isinstance(ds, ArrayDataset):
            return ds.subset(idx)
        ds.samples = [ds.samples[i] for i in idx]
        ds.targets = ds.targets[idx]
        return ds

    def prepare_data(self) -> None:
        if self.hparams.download and self.source.prepare is not None:
            self.source.prepare(self)

    def setup(self, stage: str | None = None) -> None:
        if self.train_dataset is not None:
            return
        h = self.hparams
        train, val, test = self.source.build(self)
        if self.classes is None:
            self.classes = list(train.classes)  # e.g. CIFAR's, read from its meta file
        if self.class_index is not None:  # folder order -> ImageNet-1k indices
            lut = np.array([self.class_index[c] for c in self.classes], dtype=np.int64)
            for ds in {id(d): d for d in (train, val, test)}.values():
                ds.samples = [(path, int(lut[label])) for path, label in ds.samples]
                ds.targets = lut[ds.targets]
        self.train_dataset = self._subset(train, h.num_train, 0)
        self.val_dataset = self._subset(val, h.num_val, 1)
        self.test_dataset = self._subset(test, h.num_test, 2)

    # ---- loaders -----------------------------------------------------------------------------

    def _loader(self, ds: Dataset | None, train: bool) -> DataLoader:
        if ds is None:
            raise RuntimeError("call setup() before asking for a dataloader")
        h = self.hparams
        workers = h.num_workers
        pin = torch.cuda.is_available() if h.pin_memory is None else h.pin_memory
        return DataLoader(
            ds,
            batch_size=h.batch_size,
            sampler=self._train_sampler if train else None,
            num_workers=workers,
            pin_memory=pin,
            drop_last=train and (h.drop_last or self._last_batch_of_one(ds)),
            worker_init_fn=seed_worker,
            generator=self._train_gen if train else None,
            # workers start anew each epoch, seeded from the loader's generator (set per epoch)
            persistent_workers=workers > 0 and not train,
            multiprocessing_context="fork" if workers > 0 and os.name == "posix" else None,
        )

    def _last_batch_of_one(self, ds: Dataset) -> bool:
        """True when an epoch's last training batch (per device) would hold one image, which
        BatchNorm cannot train on (the blocks that normalise pooled features, e.g. bam, srm, sk,
        splat, fail with "Expected more than 1 value per channel"): that batch is dropped."""
        trainer = self.trainer  # LightningDataModule's: set by the Trainer that uses it
        world = max(int(getattr(trainer, "world_size", 1) or 1), 1)
        per_device = math.ceil(len(ds) / world)
        if per_device % self.hparams.batch_size != 1:
            return False
        rank_zero_info(
            f"the last training batch would hold 1 image ({per_device} images per device, batch "
            f"{self.hparams.batch_size}): it is dropped every epoch, as BatchNorm cannot train "
            "on one image"
        )
        return True

    def _seed_epoch(self, seed: int) -> None:
        """Seed the rest of the train pipeline for one epoch (called by the sampler's
        ``set_epoch``): the loader's generator (it seeds the workers), the main-process copy of
        the augmentation (``num_workers=0``) and the device augmentation."""
        self._train_gen.manual_seed(seed)
        ds = self.train_dataset
        if ds is not None and self.hparams.num_workers == 0:
            seed_transform(getattr(ds, "transform", None), seed)
        self._device_seed, self._device_gen = seed, None

    def train_dataloader(self) -> DataLoader:
        self._train_gen = torch.Generator()
        # the run's seed (seed_everything), read when the loader is built
        self._train_sampler = EpochSampler(
            len(self.train_dataset), torch.initial_seed(), on_epoch=self._seed_epoch
        )
        return self._loader(self.train_dataset, True)

    def val_dataloader(self) -> DataLoader:
        return self._loader(self.val_dataset, False)

    def test_dataloader(self) -> DataLoader:
        return self._loader(self.test_dataset, False)

    def on_after_batch_transfer(self, batch: Any, dataloader_idx: int) -> Any:
        """Device augmentation (``device_augment``): uint8 training batches become augmented,
        normalised float batches on the accelerator; everything else passes through."""
        if self.device_aug is None or not isinstance(batch, (tuple, list)) or len(batch) != 2:
            return batch  # e.g. the model summary's example input, a bare tensor
        x, y = batch
        if x.dtype != torch.uint8:
            return batch
        gen = self._device_gen
        if gen is None or gen.device != x.device:
            seed = getattr(self, "_device_seed", 0)
            gen = self._device_gen = torch.Generator(device=x.device).manual_seed(seed)
        trainer = self.trainer
        train = trainer.training if trainer is not None else True
        return self.device_aug(x, train=train, generator=gen), y


_EVAL_KEYS = ("input_size", "crop_pct", "interpolation", "mean", "std")


def _eval_cfg(eval_transform: str | Mapping[str, Any]) -> dict[str, Any] | None:
    """``eval_transform`` as ``{size, crop_pct, interpolation, mean, std}`` (None: the
    dataset's own)."""
    if isinstance(eval_transform, str):
        if eval_transform == "dataset":
            return None
        raise ValueError(
            f"eval_transform {eval_transform!r}: give 'dataset' or a pretrained config (a mapping "
            f"with {', '.join(_EVAL_KEYS)}, e.g. model.pretrained_cfg); train_cls.py also takes a "
            "pretrained tag (visattn.list_pretrained()) or 'model'"
        )
    missing = [k for k in _EVAL_KEYS if eval_transform.get(k) is None]
    if missing:
        raise ValueError(f"eval_transform: the pretrained config lacks {', '.join(missing)}")
    return {
        "size": check_image_size(int(eval_transform["input_size"][-1])),
        "crop_pct": float(eval_transform["crop_pct"]),
        "interpolation": str(eval_transform["interpolation"]),
        "mean": tuple(float(v) for v in eval_transform["mean"]),
        "std": tuple(float(v) for v in eval_transform["std"]),
    }


def _class_map(class_map: str | None, dataset: str) -> dict[str, int] | None:
    """``{wnid: ImageNet-1k index}`` for ``class_map="imagenet"`` (ImageFolder only)."""
    if class_map is None:
        return None
    if class_map != "imagenet":
        raise ValueError(f"class_map must be 'imagenet' or None, got {class_map!r}")
    if dataset != "imagefolder":
        raise ValueError(f"class_map='imagenet' needs dataset='imagefolder', got {dataset!r}")
    return {wnid: i for i, wnid in enumerate(ImageNetInfo().label_names())}


def _check_wnids(classes: list[str], index: Mapping[str, int]) -> None:
    unknown = [c for c in classes if c not in index]
    if unknown:
        said = unknown_options(unknown[:5], index)
        raise ValueError(
            f"class_map='imagenet': {len(unknown)} class folder(s) are not ImageNet-1k WordNet "
            f"ids: {said}; name the folders by wnid (e.g. n01440764, tench)"
        )


def _check_options(source: DataSource, h: Mapping[str, Any], augment: str) -> None:
    """Refuse options (``h``: the data module's hyper-parameters) that cannot work, before any
    data is read."""
    if augment not in AUGMENTS:
        raise ValueError(
            f"unknown augment {augment!r}; choose 'standard' or one of {list(AUGMENTS)}"
        )
    if h["batch_size"] < 1:
        raise OptionError(f"--data.batch_size must be an integer >= 1, got {h['batch_size']}")
    if h["num_workers"] < 0:
        raise OptionError(
            f"--data.num_workers must be an integer >= 0 (0: load in the training process), "
            f"got {h['num_workers']}"
        )
    size = h["image_size"]
    if source.fixed_size and size is not None and int(size) != source.image_size:
        raise ValueError(
            f"{source.name} images are {source.image_size}x{source.image_size}; image_size must "
            f"be {source.image_size} or null, got {size}"
        )
    for key in ("num_train", "num_val", "num_test"):
        if h[key] is not None and h[key] < 1:
            raise ValueError(f"{key} must be >= 1 (or null for the default), got {h[key]}")
    _check_target_size(source, h["target_size"])
    if h["verify_images"] not in VERIFY_MODES:
        raise ValueError(
            f"verify_images must be one of {list(VERIFY_MODES)}, got {h['verify_images']!r}"
        )
    if h["device_augment"]:
        _check_device_augment(source, augment, h["color_jitter"])
    if source.root_help is not None and h["root"] is None:
        raise ValueError(f"dataset {source.name!r} needs --data.root PATH ({source.root_help})")


def _check_target_size(source: DataSource, target_size: Any) -> None:
    if target_size is not None and "target_size" in source.generator_options:
        check_target_size(target_size)


#: the (data set, options) notices :func:`_drop_unread_options` gave in this process
_DROPPED_SAID: set[tuple[str, tuple[str, ...]]] = set()


def _drop_unread_options(source: DataSource, h: dict[str, Any]) -> None:
    """Put the options of generated data that ``source`` does not read (a quickstart config
    switched to ``--data.dataset imagefolder`` keeps ``target_size``) back to their defaults,
    with one notice that names them (once per process for a data set and those options)."""
    defaults = inspect.signature(VisattnDataModule.__init__).parameters
    unread = sorted(key for key in source.unread_options if h[key] != defaults[key].default)
    if not unread:
        return
    for key in unread:
        h[key] = defaults[key].default
    said = (source.name, tuple(unread))
    if said in _DROPPED_SAID:  # a sweep builds many data modules of one setting: said once
        return
    _DROPPED_SAID.add(said)
    readers = [n for n in list_datasets() if set(unread) & get_source(n).generator_options]
    log.warning(
        "data: %s %s of the %s data; the %r data does not read %s, so %s dropped",
        "option" if len(unread) == 1 else "options",
        ", ".join(unread),
        ", ".join(readers),
        source.name,
        "it" if len(unread) == 1 else "them",
        "it is" if len(unread) == 1 else "they are",
    )


def _check_device_augment(source: DataSource, augment: str, color_jitter: float) -> None:
    if not source.in_memory:
        in_memory = [n for n in list_datasets() if get_source(n).in_memory]
        raise ValueError(f"device_augment needs in-memory data ({', '.join(in_memory)})")
    if augment not in DEVICE_PRESETS or color_jitter:
        raise ValueError(
            f"device_augment implements the presets {list(DEVICE_PRESETS)} (pad-crop, "
            f"flip, cutout); got augment={augment!r}, color_jitter={color_jitter}: set "
            "data.augment to one of them and color_jitter 0, or device_augment false"
        )
