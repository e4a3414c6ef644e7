"""Outputs of an Ultralytics YOLO detection model to compare before and after a change."""

from __future__ import annotations

import torch


def head_outputs(model: torch.nn.Module, x: torch.Tensor) -> list[torch.Tensor]:
    """The train-mode head's raw outputs (boxes, scores, per-level maps), then the eval output;
    ``model`` is left in eval mode."""
    model.train()
    raw = model(x)
    model.eval()
    with torch.no_grad():
        y = model(x)[0]
    return [raw["boxes"], raw["scores"], *raw["feats"], y]
