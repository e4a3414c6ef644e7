"""The shipped fine-tuning configs (``configs/finetune/``) run end to end on tiny settings and start
from the checkpoint's weights: right after loading, with the new blocks inserted as the identity,
the network validates exactly as the source run did."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from helpers.paths import REPO
from helpers.training import TINY_DATA, TINY_TRAINER

from visattn.files import read_metrics_csv
from visattn.training import run
from visattn.training.cli import cli_main

FINETUNE = REPO / "configs/finetune"

# tiny data and a CPU trainer; everything else comes from the configs
TINY = [
    *TINY_DATA,
    *TINY_TRAINER,
    "--trainer.max_epochs=1",
    "--trainer.devices=1",
    "--trainer.num_sanity_val_steps=0",
]


def _validate(args: list[str]) -> dict[str, float]:
    metrics = cli_main(["validate", *args]).trainer.callback_metrics
    return {"acc": float(metrics["val/acc"]), "loss": float(metrics["val/loss"])}


def _source_val(summary: dict) -> dict[str, float]:
    last = read_metrics_csv(summary["metrics_csv"])[-1]
    return {"acc": float(last["val/acc"]), "loss": float(last["val/loss"])}


def test_shapes_finetune_starts_from_the_quickstart_checkpoint(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Quickstart (tiny) -> its last.ckpt at the path the finetune config names -> the network
    with BAM inserted as the identity validates exactly as the source run's last epoch (and, so
    that the check can fail, not with BAM's default initialisation) -> one fine-tuning epoch."""
    monkeypatch.chdir(tmp_path)  # the configs' relative run folders and checkpoint path
    src = run(["fit", f"--config={REPO / 'configs/quickstart.yaml'}", *TINY])
    assert Path(src["last_ckpt"]).resolve() == (
        tmp_path / "runs/quickstart/lightning_logs/version_0/checkpoints/last.ckpt"
    )
    before = _source_val(src)

    config = f"--config={FINETUNE / 'shapes_quickstart_bam.yaml'}"
    at_insertion = _validate([config, *TINY])
    assert at_insertion["acc"] == before["acc"]
    assert at_insertion["loss"] == pytest.approx(before["loss"], rel=1e-6)

    default = [
        {"name": "cbam", "position": "standard"},
        {"name": "bam", "position": "stage", "stages": [1, 2], "init": "default"},
    ]
    changed = _validate([config, *TINY, f"--model.attention={json.dumps(default)}"])
    assert changed["loss"] != pytest.approx(before["loss"], rel=1e-3)

    ft = run(["fit", config, *TINY])
    assert ft["epochs"] == 1
    ft_root = tmp_path / "runs/finetune/shapes_quickstart_bam"
    assert Path(ft["log_dir"]).resolve().is_relative_to(ft_root)


def test_cifar10_finetune_config_runs_from_a_plain_resnet20(tmp_path: Path) -> None:
    """The CIFAR-10 recipe (SE as the identity, backbone frozen for an epoch, lr_mult) with its
    data swapped for the embedded shapes: it loads a plain ResNet-20 checkpoint, validates as
    the source did, and trains."""
    shapes = ["--data.dataset=shapes", "--data.augment=flip", *TINY]
    src = run(
        [
            "fit",
            f"--config={REPO / 'configs/cifar10/resnet20.yaml'}",
            *shapes,
            f"--trainer.default_root_dir={tmp_path / 'src'}",
        ]
    )
    args = [
        f"--config={FINETUNE / 'cifar10_resnet20_se.yaml'}",
        *shapes,
        f"--model.model_kwargs={json.dumps({'checkpoint_path': src['last_ckpt']})}",
        "--trainer.max_epochs=2",
        f"--trainer.default_root_dir={tmp_path / 'ft'}",
    ]
    before = _source_val(src)
    at_insertion = _validate(args)
    assert at_insertion["acc"] == before["acc"]
    assert at_insertion["loss"] == pytest.approx(before["loss"], rel=1e-6)
    assert run(["fit", *args])["epochs"] == 2


def test_finetune_configs_name_identity_insertion_and_a_checkpoint() -> None:
    """Every shipped finetune config loads a checkpoint and inserts at least one block with
    ``init: identity`` (a config without them would silently fine-tune a damaged network)."""
    import yaml

    files = sorted(FINETUNE.glob("*.yaml"))
    assert files
    for f in files:
        model = yaml.safe_load(f.read_text())["model"]
        if "." in model.get("model", ""):  # a pretrained tag: released weights, no new blocks
            assert model["model_kwargs"]["pretrained"], f.name
            continue
        assert model["model_kwargs"]["checkpoint_path"], f.name
        placements = model["attention"]
        placements = placements if isinstance(placements, list) else [placements]
        assert any(p.get("init") == "identity" for p in placements), f.name
