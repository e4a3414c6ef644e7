"""What the converters share: the converter type, regex renaming of keys, linear weights as 1x1
convs, and the test for the original ResNet's stride placement."""

from __future__ import annotations

import re
from collections.abc import Callable

import torch
import torch.nn as nn

__all__ = ["Converter", "as_conv1x1", "rename", "strides_first_1x1"]

#: ``fn(state_dict, model) -> state_dict``: a released layout mapped into ``model``'s keys
Converter = Callable[[dict[str, torch.Tensor], nn.Module], dict[str, torch.Tensor]]


def rename(state: dict[str, torch.Tensor], rules: list[tuple[str, str]]) -> dict:
    """Apply regex ``(pattern, replacement)`` rules in order to every key."""
    out = {}
    for k, v in state.items():
        for pat, rep in rules:
            k = re.sub(pat, rep, k)
        out[k] = v
    return out


def as_conv1x1(state: dict[str, torch.Tensor], model: nn.Module) -> dict:
    """2-D ``nn.Linear`` weights where the model holds a 1x1 conv: add the two unit dims."""
    own = model.state_dict()
    return {
        k: v[:, :, None, None] if k in own and v.dim() == 2 and own[k].dim() == 4 else v
        for k, v in state.items()
    }


def strides_first_1x1(model: nn.Module) -> bool:
    """Whether the model's first downsampling bottleneck (``layer2.0``) strides its first 1x1
    conv (the original MSRA ResNet, ``stride_in_1x1=True``) rather than its 3x3."""
    first = getattr(getattr(model, "layer2", None), "0", None)
    return getattr(getattr(first, "conv1", None), "stride", (1, 1)) == (2, 2)
