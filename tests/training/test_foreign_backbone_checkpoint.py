"""A Lightning module on a ``tv:`` backbone with pattern placements: its hyper-parameters are
YAML-safe and rebuild the same network, so a checkpoint loads back through ``load_run``."""

from __future__ import annotations

import lightning
import torch
import yaml

from visattn.training.load import load_run
from visattn.training.module import ClassificationModule


def test_a_checkpoint_of_a_torchvision_backbone_with_pattern_attention_loads_back(tmp_path):
    attention = [
        {"name": "eca", "after": ["InvertedResidual"], "position": "standard", "init": "identity"},
        {"name": "cbam", "after": "features.12"},
    ]
    module = ClassificationModule(
        model="tv:mobilenet_v3_small",
        num_classes=5,
        attention=attention,
        model_kwargs={"input_size": [3, 64, 64]},
    )
    hparams = dict(module.hparams)
    assert yaml.safe_load(yaml.safe_dump(hparams))["attention"][1]["after"] == ["features.12"]
    path = tmp_path / "run.ckpt"
    torch.save(
        {
            "state_dict": module.state_dict(),
            "hyper_parameters": hparams,
            "pytorch-lightning_version": lightning.__version__,
            "epoch": 0,
            "global_step": 0,
        },
        path,
    )
    run = load_run(path)
    assert run.net.attention_paths == module.net.attention_paths
    assert run.net.attention_paths[-1] == "features.12.2.attn_after"
    x = torch.randn(2, 3, 64, 64)
    with torch.no_grad():
        torch.testing.assert_close(run.net(x), module.net.eval()(x))
