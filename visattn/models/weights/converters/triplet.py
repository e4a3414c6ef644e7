"""landskape-ai/triplet-attention: Misra et al.'s triplet-attention ResNets."""

from __future__ import annotations

import torch
import torch.nn as nn

from ._keys import Converter, rename


def _triplet_official(state: dict[str, torch.Tensor], model: nn.Module) -> dict:
    """Misra et al.'s released triplet-attention ResNets (landskape-ai/triplet-attention):
    ``layerX.Y.triplet_attention.{ChannelGateH, ChannelGateW, SpatialGate}.spatial.{conv, bn}``
    are visattn's branches ``cw`` (the (C, W) plane), ``hc`` (the (H, C) plane) and ``hw``;
    both pool ``[max; mean]`` and lay the planes out the same way."""
    return rename(
        state,
        [
            (r"\.triplet_attention\.ChannelGateH\.spatial\.", ".attn_standard.cw."),
            (r"\.triplet_attention\.ChannelGateW\.spatial\.", ".attn_standard.hc."),
            (r"\.triplet_attention\.SpatialGate\.spatial\.", ".attn_standard.hw."),
        ],
    )


CONVERTERS: dict[str, Converter] = {
    "triplet_official": _triplet_official,
}
