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
