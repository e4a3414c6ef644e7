"""The Lightning page's script (docs/guides/lightning.md) runs as written, and the class count
is taken from the data module or refused when it disagrees."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

pytest.importorskip("lightning")

import lightning.pytorch as pl

from visattn.data import VisattnDataModule
from visattn.training import ClassificationModule

PAGE = Path(__file__).resolve().parents[2] / "docs" / "guides" / "lightning.md"


def _script() -> str:
    (code,) = re.findall(r"```python\n(.*?)```", PAGE.read_text(), re.S)
    return code


def test_the_pages_script_runs_as_written(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    scope: dict = {}
    exec(compile(_script(), str(PAGE), "exec"), scope)  # the page's own code
    model = scope["model"]
    assert model.hparams.num_classes == 9 and model.net.fc.out_features == 9
    assert 0.0 <= float(scope["trainer"].callback_metrics["test/acc"]) <= 1.0
    assert list((tmp_path / "runs/own_trainer").rglob("metrics.csv"))
    assert list((tmp_path / "runs/own_trainer").rglob("*.ckpt"))


def _tiny_data() -> VisattnDataModule:
    return VisattnDataModule("shapes", num_train=32, num_val=16, num_test=16, batch_size=16,
                             image_size=16, num_workers=0)  # fmt: skip


def _trainer() -> pl.Trainer:
    return pl.Trainer(max_epochs=1, accelerator="cpu", logger=False, enable_checkpointing=False,
                      enable_progress_bar=False, enable_model_summary=False)  # fmt: skip


def test_a_class_count_that_disagrees_with_the_data_is_refused_with_both_numbers() -> None:
    model = ClassificationModule("resnet20_cifar", num_classes=10)
    with pytest.raises(ValueError, match=r"num_classes=10\) but the data module has 9 classes"):
        _trainer().fit(model, datamodule=_tiny_data())


def test_without_a_class_count_the_datas_is_taken_and_recorded() -> None:
    model = ClassificationModule("resnet20_cifar")
    trainer = _trainer()
    trainer.fit(model, datamodule=_tiny_data())
    assert model.net.fc.out_features == 9 and model.hparams.num_classes == 9
    assert model.val_acc.num_classes == 9
