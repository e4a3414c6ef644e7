"""The shipped config that fine-tunes an attention network from released weights
(``configs/finetune/imagenette_se_resnet50_ra2.yaml``) runs offline: timm's SE-ResNet-50 with
random weights stands in for the released file, the ImageFolder is generated, and one step
trains with the backbone frozen, so the loaded backbone weights are still the file's."""

from __future__ import annotations

import json
from pathlib import Path

import cv2
import numpy as np
import pytest
import timm
import torch

pytest.importorskip("lightning")
from helpers.training import TINY_TRAINER
from helpers.weights import randomize

from visattn.models.pretrained import get_pretrained
from visattn.training.cli import cli_main

REPO = Path(__file__).resolve().parents[2]
CONFIG = REPO / "configs/finetune/imagenette_se_resnet50_ra2.yaml"


def _imagefolder(root: Path, classes: int = 3) -> Path:
    rng = np.random.default_rng(1)
    for split, n in (("train", 2), ("val", 1)):
        for c in range(classes):
            (root / split / f"class{c}").mkdir(parents=True)
            for i in range(n):
                image = rng.integers(0, 256, (40, 40, 3), dtype=np.uint8)
                cv2.imwrite(str(root / split / f"class{c}" / f"{i}.png"), image)
    return root


def test_finetune_config_starts_from_the_tags_weights(tmp_path: Path) -> None:
    released = randomize(timm.create_model("seresnet50"), 3, norms_only=True)
    path = tmp_path / "seresnet50.ra2_in1k.pth"
    torch.save(released.state_dict(), path)
    kwargs = {"pretrained": True, "pretrained_cfg_overlay": {"file": str(path)}}
    cli = cli_main(
        [
            "fit",
            f"--config={CONFIG}",
            f"--model.model_kwargs={json.dumps(kwargs)}",
            f"--data.root={_imagefolder(tmp_path / 'data')}",
            "--data.image_size=64",
            "--data.batch_size=6",
            "--data.num_workers=0",
            "--data.verify_images=off",
            "--trainer.max_steps=1",
            "--trainer.num_sanity_val_steps=0",
            f"--trainer.default_root_dir={tmp_path / 'run'}",
            *TINY_TRAINER,
        ]
    )
    net = cli.model.net
    assert cli.trainer.global_step == 1 and net.fc.out_features == 3
    assert cli.datamodule.eval_cfg["size"] == get_pretrained("se_resnet50.ra2_in1k").input_size[-1]
    ref = released.state_dict()
    for key in ("conv1.weight", "layer3.2.conv2.weight", "layer4.2.bn3.running_var"):
        torch.testing.assert_close(net.state_dict()[key], ref[key], rtol=0, atol=0)
