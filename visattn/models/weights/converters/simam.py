"""ZjjConan/SimAM: Yang et al.'s SimAM ResNets."""

from __future__ import annotations

import re

import torch
import torch.nn as nn

from ._keys import Converter, rename


def _simam_official(state: dict[str, torch.Tensor], model: nn.Module) -> dict:
    """Yang et al.'s released SimAM ResNets (ZjjConan/SimAM): torchvision's keys, except that
    the parameter-free SimAM module wraps ``conv2`` as ``nn.Sequential(conv2, simam)``, so the
    middle conv's weight is ``layerX.Y.conv2.0.weight``. SimAM has no parameters, so a plain
    ResNet's file would fill the model too: a file whose ``conv2`` is not wrapped is refused,
    naming its keys."""
    plain = sorted(k for k in state if re.fullmatch(r"layer\d+\.\d+\.conv2\.weight", k))
    if plain:
        raise ValueError(
            f"not a SimAM file: conv2 is not wrapped with SimAM ({', '.join(plain[:3])}"
            + (f" and {len(plain) - 3} more" if len(plain) > 3 else "")
            + "; the authors' files hold layerX.Y.conv2.0.weight): a plain ResNet's weights. "
            "Nothing was loaded"
        )
    return rename(state, [(r"\.conv2\.0\.weight$", ".conv2.weight")])


CONVERTERS: dict[str, Converter] = {
    "simam_official": _simam_official,
}
