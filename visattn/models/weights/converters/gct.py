"""z-x-yang/GCT: Yang et al.'s PyTorch GCT-ResNet-50."""

from __future__ import annotations

import torch
import torch.nn as nn

from ....blocks.gct import GatedChannelTransformation
from ._keys import Converter, rename, strides_first_1x1


def _gct_official(state: dict[str, torch.Tensor], model: nn.Module) -> dict:
    """Yang et al.'s released GCT-ResNet-50 (z-x-yang/GCT, ``PyTorch/resnet.py``, saved by their
    ``main.py`` under ``state_dict`` with DDP's ``module.``): every conv is wrapped as
    ``nn.Sequential(GCT, conv)`` (``convN.0``/``convN.1``; ``downsample.0`` GCT, ``.1`` conv,
    ``.2`` BN) and the stem sits under ``stem``. visattn's ``gct_resnet50_official`` hooks each
    GCT on its conv (``<conv>.attn_before``). The network strides a downsampling bottleneck's
    first 1x1 conv and its GCTs add eps to the channel mean: a model built otherwise has the
    same keys but another function, so it is refused."""
    name = getattr(model, "model_name", type(model).__name__)
    if not strides_first_1x1(model):
        raise ValueError(
            f"the authors' GCT-ResNet-50 strides the first 1x1 conv of a downsampling "
            f"bottleneck; {name} strides its 3x3 (the same keys, another function): build "
            "gct_resnet50_official (or resnet options stride_in_1x1=True)"
        )
    gcts = [(p, m) for p, m in model.named_modules() if isinstance(m, GatedChannelTransformation)]
    paper = [p for p, m in gcts if not m.official]
    if paper and any(k.endswith(".0.alpha") for k in state):  # the file holds the authors' GCTs
        raise ValueError(
            f"the authors' GCTs add eps to the channel mean; {name}'s at {', '.join(paper[:3])}"
            + (f" (and {len(paper) - 3} more)" if len(paper) > 3 else "")
            + " use the paper's form: build gct_resnet50_official (gct option norm='official')"
        )
    return rename(
        state,
        [
            (r"^stem\.", ""),
            (r"(^|\.)(conv\d)\.0\.(alpha|gamma|beta)$", r"\1\2.attn_before.\3"),
            (r"\.downsample\.0\.(alpha|gamma|beta)$", r".downsample.0.attn_before.\1"),
            (r"(^|\.)(conv\d)\.1\.weight$", r"\1\2.weight"),
            (r"\.downsample\.1\.weight$", ".downsample.0.weight"),
            (r"\.downsample\.2\.", ".downsample.1."),
        ],
    )


CONVERTERS: dict[str, Converter] = {
    "gct_official": _gct_official,
}
