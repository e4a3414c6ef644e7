"""Optimizer options that would train silently wrong are refused when the module is built."""

from __future__ import annotations

import math

import pytest

pytest.importorskip("lightning")

from visattn.training.module import ClassificationModule


@pytest.mark.parametrize("weight_decay", [-1.0, -1e-8, math.nan])
def test_negative_or_nan_weight_decay_is_refused_naming_the_option(weight_decay: float) -> None:
    with pytest.raises(ValueError, match=r"weight_decay must be >= 0 \(model\.weight_decay\)"):
        ClassificationModule(model="resnet20_cifar", num_classes=4, weight_decay=weight_decay)


def test_zero_weight_decay_is_allowed() -> None:
    module = ClassificationModule(model="resnet20_cifar", num_classes=4, weight_decay=0.0)
    assert module.hparams.weight_decay == 0.0


@pytest.mark.parametrize("lr", [0.0, -0.1, math.nan])
def test_a_learning_rate_that_trains_nothing_is_refused(lr: float) -> None:
    with pytest.raises(ValueError, match=r"lr must be > 0 \(model\.lr\)"):
        ClassificationModule(model="resnet20_cifar", num_classes=4, lr=lr)


def test_a_warm_up_as_long_as_the_run_is_warned_about(tmp_path) -> None:
    from helpers.training import tiny_fit

    with pytest.warns(UserWarning, match=r"warmup_epochs 2\.0 is not shorter than the run"):
        tiny_fit(
            tmp_path,
            "--trainer.max_epochs=2",
            "--model.schedule=cosine",
            "--model.warmup_epochs=2",
        )
