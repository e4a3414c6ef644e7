"""BangguWu/ECANet: Wang et al.'s ECA-Nets."""

from __future__ import annotations

import torch
import torch.nn as nn

from ._keys import Converter, rename


def _eca_official(state: dict[str, torch.Tensor], model: nn.Module) -> dict:
    """Wang et al.'s released ECA-Nets (BangguWu/ECANet): ``layerX.Y.eca.conv.weight``, a
    ``Conv1d(1, 1, k)`` whose ``k`` per stage must equal the model's (ECA-Net50: 3, 5, 5, 7)."""
    return rename(state, [(r"\.eca\.conv\.", ".attn_standard.conv.")])


CONVERTERS: dict[str, Converter] = {
    "eca_official": _eca_official,
}
