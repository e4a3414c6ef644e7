"""What a training run prints: Lightning's model summary counts FLOPs at the data's image size,
and the progress bar shows the run's version as an integer."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest
from helpers.files import read_csv
from helpers.paths import REPO
from helpers.training import tiny_fit
from lightning.pytorch.callbacks import TQDMProgressBar
from lightning.pytorch.loggers import TensorBoardLogger
from lightning.pytorch.utilities.model_summary import ModelSummary

from visattn.data import VisattnDataModule
from visattn.profile import count_macs
from visattn.training import ClassificationModule, VisattnCLI
from visattn.training.cli import (
    VisattnRichProgressBar,
    VisattnTQDMProgressBar,
    _default_progress_bar,
)


def test_summary_counts_flops_at_the_datas_image_size() -> None:
    module = ClassificationModule("resnet20_cifar", num_classes=9)
    dm = VisattnDataModule("shapes", image_size=48)
    module._trainer = SimpleNamespace(datamodule=dm)
    module.setup("fit")
    module._trainer = None
    assert tuple(module.example_input_array.shape) == (1, 3, 48, 48)
    flops = ModelSummary(module).total_flops
    # FLOPs = 2 x multiply-accumulates (torch's counter), at 48x48, not the default 32x32
    assert flops == pytest.approx(2 * count_macs(module.net, (1, 3, 48, 48)), rel=0.02)


def test_summary_example_falls_back_to_the_models_input_size() -> None:
    module = ClassificationModule("resnet20_cifar", num_classes=9)
    module.setup("fit")
    assert tuple(module.example_input_array.shape) == (1, 3, 32, 32)
    assert ModelSummary(module).total_flops > 0


@pytest.mark.parametrize("bar_cls", [VisattnRichProgressBar, VisattnTQDMProgressBar])
def test_progress_bar_shows_the_version_as_an_integer(tmp_path: Path, bar_cls) -> None:
    trainer = SimpleNamespace(
        loggers=[TensorBoardLogger(str(tmp_path), version=3)], progress_bar_metrics={"loss": 0.5}
    )
    items = bar_cls().get_metrics(trainer, None)
    assert items["v_num"] == "3" and items["loss"] == 0.5


def test_default_progress_bar_respects_the_users_choice() -> None:
    assert len(_default_progress_bar({}, [])) == 1
    assert _default_progress_bar({"enable_progress_bar": False}, []) == []
    assert _default_progress_bar({}, [TQDMProgressBar()]) == []


def test_cli_trainer_uses_the_fixed_progress_bar() -> None:
    cli = VisattnCLI(
        args=["--config", str(REPO / "configs" / "quickstart.yaml")],
        run=False,
        parser_kwargs={"exit_on_error": False},
    )
    assert isinstance(
        cli.trainer.progress_bar_callback, (VisattnRichProgressBar, VisattnTQDMProgressBar)
    )


def test_an_epoch_without_validation_has_empty_val_cells(tmp_path: Path) -> None:
    """check_val_every_n_epoch 2: epoch 0's row has no val/* values (Lightning's
    callback_metrics would carry epoch 1's forward to epoch 2 otherwise)."""
    s = tiny_fit(tmp_path, "--trainer.max_epochs=3", "--trainer.check_val_every_n_epoch=2")
    rows = read_csv(s["metrics_csv"])
    assert [r["val/acc"] != "" for r in rows] == [False, True, False]
    assert rows[2]["train/loss"] != ""
