"""cfzd/FcaNet: Qin et al.'s FcaNets."""

from __future__ import annotations

import torch
import torch.nn as nn

from ._keys import Converter, rename


def _fca_official(state: dict[str, torch.Tensor], model: nn.Module) -> dict:
    """Qin et al.'s released FcaNets (cfzd/FcaNet, torch.hub ``fca34``..``fca152``):
    ``layerX.Y.att`` with ``fc.0``/``fc.2`` (bias-free ``nn.Linear``) is visattn's
    ``attn_standard.fc1``/``fc2``. Their fixed DCT filters are a buffer in the file
    (``att.dct_layer.weight``, ``(C, S, S)``) that visattn computes instead: each is compared
    with the filters the model's block computes at that size (frequencies, channel split,
    orthonormal scaling) and consumed; a filter that differs is named (a model built with
    other ``freq_sel``/``dct_size``/``dct_norm`` than the file's top16 at 56/28/14/7)."""
    out = rename(
        state,
        [(r"\.att\.fc\.0\.", ".attn_standard.fc1."), (r"\.att\.fc\.2\.", ".attn_standard.fc2.")],
    )
    modules = dict(model.named_modules())
    differ = []
    for key in [k for k in out if k.endswith(".att.dct_layer.weight")]:
        filt = out.pop(key)
        block = modules.get(key[: -len(".att.dct_layer.weight")] + ".attn_standard")
        if not hasattr(block, "dct_filters") or filt.dim() != 3:
            out[key] = filt  # nothing to compare with: left for the completeness check to name
            continue
        ours = block.dct_filters(filt.shape[1], filt.shape[2], torch.float64)
        if ours.shape != filt.shape or not torch.allclose(ours, filt.double(), atol=1e-6):
            differ.append(key)
    if differ:
        raise ValueError(
            f"the file's DCT filters differ from the model's at {', '.join(differ[:4])}"
            + (f" (and {len(differ) - 4} more)" if len(differ) > 4 else "")
            + ": build the model with the file's frequencies (fca_resnet*: top16, DCT sizes "
            "56/28/14/7, orthonormal). Nothing was loaded"
        )
    return out


CONVERTERS: dict[str, Converter] = {
    "fca_official": _fca_official,
}
