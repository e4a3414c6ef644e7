"""Backbones, placement and the model factory (filled in by the models issue)."""

from __future__ import annotations

from typing import Any

import torch.nn as nn

__all__ = ["create_model", "inject", "list_models"]


def list_models(pattern: str | None = None) -> list[str]:
    return []


def create_model(name: str, **kwargs: Any) -> nn.Module:
    raise NotImplementedError("models are not built yet")


def inject(model: nn.Module, placement: Any) -> list[str]:
    raise NotImplementedError("inject is not built yet")
