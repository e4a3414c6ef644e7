"""visattn's own layout: a visattn model's ``state_dict``, or a Lightning checkpoint of one
(``net.``)."""

from __future__ import annotations

import torch
import torch.nn as nn

from ._keys import Converter


def _visattn(state: dict[str, torch.Tensor], model: nn.Module) -> dict:
    """visattn's own layout (a visattn state_dict or Lightning checkpoint's ``net.``)."""
    if any(k.startswith("net.") for k in state):
        state = {k[4:]: v for k, v in state.items() if k.startswith("net.")}
    return state


CONVERTERS: dict[str, Converter] = {
    "visattn": _visattn,
}
