"""Evaluating released weights on an ImageFolder: the tag's own eval transform (resize by
``crop_pct`` with its interpolation, centre crop, its mean/std) and the ImageNet class map
(WordNet-id folders -> the 1,000-class indices), on tiny generated data."""

from __future__ import annotations

import json
import math
from pathlib import Path

import cv2
import numpy as np
import pytest
import timm
import torch

pytest.importorskip("lightning")
from helpers.training import TINY_TRAINER
from timm.data import ImageNetInfo

from visattn.data.datamodule import VisattnDataModule
from visattn.models.pretrained import get_pretrained
from visattn.training.cli import cli_main

WNIDS = ImageNetInfo().label_names()
CLASSES = {WNIDS[7]: 2, WNIDS[409]: 3}  # folder -> images per split (sorted: index 7 first)


def _imagefolder(root: Path) -> Path:
    rng = np.random.default_rng(0)
    for split in ("train", "val"):
        for wnid, n in CLASSES.items():
            (root / split / wnid).mkdir(parents=True)
            for i in range(n):
                image = rng.integers(0, 256, (40, 40, 3), dtype=np.uint8)
                cv2.imwrite(str(root / split / wnid / f"{i}.png"), image)
    return root


def test_the_tags_eval_transform_resizes_crops_and_normalises_as_its_config(tmp_path: Path):
    root = _imagefolder(tmp_path / "data")
    cfg = get_pretrained("se_resnet50.a3_in1k").pretrained_cfg()  # 160 px, crop 0.95, bicubic
    dm = VisattnDataModule(
        "imagefolder", root=str(root), image_size=32, eval_transform=cfg, verify_images="off"
    )
    dm.setup()
    x, _ = dm.val_dataset[0]
    size = cfg["input_size"][-1]
    assert x.shape == (3, size, size)
    path = dm.val_dataset.samples[0][0]
    rgb = cv2.cvtColor(cv2.imread(path), cv2.COLOR_BGR2RGB)
    scale = math.floor(size / cfg["crop_pct"])
    big = cv2.resize(rgb, (scale, scale), interpolation=cv2.INTER_CUBIC).astype(np.float32)
    top = (scale - size) // 2
    crop = big[top : top + size, top : top + size] / 255.0
    want = (crop - np.array(cfg["mean"])) / np.array(cfg["std"])
    torch.testing.assert_close(x, torch.from_numpy(want.transpose(2, 0, 1)).float())
    assert dm.train_dataset[0][0].shape == (3, 32, 32)  # training keeps the data's size


def test_imagenet_class_map_labels_by_wordnet_id(tmp_path: Path):
    root = _imagefolder(tmp_path / "data")
    dm = VisattnDataModule("imagefolder", root=str(root), class_map="imagenet", image_size=32)
    dm.setup()
    assert dm.num_classes == 1000
    assert sorted(set(dm.val_dataset.targets.tolist())) == [7, 409]
    assert [y for _, y in dm.val_dataset.samples] == dm.val_dataset.targets.tolist()
    for split in ("train", "val"):
        (root / split / "cats").mkdir()
        cv2.imwrite(str(root / split / "cats" / "0.png"), np.zeros((40, 40, 3), np.uint8))
    with pytest.raises(ValueError, match=r"not ImageNet-1k WordNet ids: 'cats'"):
        VisattnDataModule("imagefolder", root=str(root), class_map="imagenet")


def test_validate_a_tag_on_a_wordnet_subset_uses_its_transform_and_the_class_map(
    tmp_path: Path,
):
    """A released-weights file whose classifier always answers ImageNet class 409: with the
    class map its val accuracy is the share of the images of folder WNIDS[409]; a folder-order
    labelling would score 0."""
    root = _imagefolder(tmp_path / "data")
    net = timm.create_model("skresnet18")
    with torch.no_grad():
        net.fc.weight.zero_()
        net.fc.bias.zero_()
        net.fc.bias[409] = 1.0
    path = tmp_path / "skresnet18.pth"
    torch.save(net.state_dict(), path)
    kwargs = {"pretrained": True, "pretrained_cfg_overlay": {"file": str(path)}}
    cli = cli_main(
        [
            "validate",
            "--model.model=sk_resnet18.ra_in1k",
            f"--model.model_kwargs={json.dumps(kwargs)}",
            "--data.dataset=imagefolder",
            f"--data.root={root}",
            "--data.class_map=imagenet",
            "--data.eval_transform=model",
            "--data.batch_size=8",
            "--data.num_workers=0",
            "--data.verify_images=off",
            f"--trainer.default_root_dir={tmp_path}",
            *TINY_TRAINER,
        ]
    )
    tag = get_pretrained("sk_resnet18.ra_in1k")
    assert cli.datamodule.eval_cfg["size"] == tag.input_size[-1]
    assert cli.datamodule.eval_cfg["interpolation"] == tag.interpolation
    x, _ = cli.datamodule.val_dataset[0]
    assert x.shape == tag.input_size
    acc = float(cli.trainer.callback_metrics["val/acc"])
    assert acc == pytest.approx(CLASSES[WNIDS[409]] / sum(CLASSES.values()))
