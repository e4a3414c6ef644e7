"""Fixtures of the ablation tests."""

from __future__ import annotations

from typing import Any

import pytest
from helpers.ablate import FakeTrainer

import visattn.ablate.job as job_mod


@pytest.fixture
def fake(monkeypatch: pytest.MonkeyPatch) -> FakeTrainer:
    """A :class:`~helpers.ablate.FakeTrainer` to pass as the runner's ``train_fn``; a run's
    evaluation (latency, throughput) gives fixed figures."""

    def fake_evaluate(summary: dict, sweep: Any, built: Any = None) -> dict:
        return {
            "model": "resnet20_cifar",
            "attention": "null",
            "latency_ms": 1.5,
            "batch_latency_ms": 10.0,
            "throughput": 3200.0,
            "throughput_batch": 32,
            "profile_device": "cpu",
        }

    monkeypatch.setattr(job_mod, "evaluate_run", fake_evaluate)
    return FakeTrainer()
