"""``visattn.training.config.RunConfig.build``: a run's module and data module from its options,
without a Trainer, a seed or a file written."""

from __future__ import annotations

from pathlib import Path

import torch

from visattn.training import config as run_config

ROOT = Path(__file__).resolve().parents[2]


def test_build_gives_the_runs_module_and_data_and_does_not_seed(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    args = [
        "fit",
        "--config",
        str(ROOT / "configs" / "quickstart.yaml"),
        "--model.attention={name: eca}",
        "--seed_everything=7",
        f"--trainer.default_root_dir={tmp_path / 'run'}",
    ]
    module, datamodule, config = run_config.RunConfig.parse(args).build()
    again, _, _ = run_config.RunConfig.parse(args).build()
    # the global RNG is not seeded (seed_everything=7 would give both builds the same weights)
    first = next(module.net.parameters())
    assert not torch.equal(first, next(again.net.parameters()))
    assert list(tmp_path.iterdir()) == []  # no folder, no config.yaml
    assert type(module).__name__ == "ClassificationModule"
    assert type(datamodule).__name__ == "VisattnDataModule"
    assert config.seed_everything == 7
    assert module.hparams["attention"]["name"] == "eca"
    # the data's class count is linked into the model, as the command line does
    assert module.hparams["num_classes"] == datamodule.num_classes


def test_build_takes_resolved_args_without_parsing_again(monkeypatch):
    resolved = run_config.RunConfig.parse(
        ["fit", "--config", str(ROOT / "configs" / "quickstart.yaml")]
    )
    monkeypatch.setattr(run_config, "parse", None)  # a second parse would fail
    module, _, _ = resolved.build()
    assert module.hparams["model"] == resolved.config.model.model
