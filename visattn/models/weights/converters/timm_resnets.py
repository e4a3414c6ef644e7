"""timm's ResNet family (``seresnet*``, ``skresnet*``) and its legacy SENets (Hu et al.'s Caffe
models as ported by Cadene and timm)."""

from __future__ import annotations

import torch
import torch.nn as nn

from ._keys import Converter, rename, strides_first_1x1


def _timm(state: dict[str, torch.Tensor], model: nn.Module) -> dict:
    """timm's ResNet family (``seresnet*``, ``skresnet*``, ``resnet*``): the attention module
    ``layerX.Y.se`` is visattn's slot ``attn_standard``; timm's SelectiveKernel conv keeps its
    paths as ``ConvNormAct`` (``paths.i.conv``/``.bn``) and its attention under ``attn``, where
    visattn's SK conv holds ``paths.i.0``/``.1`` and the attention layers directly; timm's
    SK BasicBlock's second conv is a ``ConvNormAct`` (``conv2.conv``/``conv2.bn``)."""
    return rename(
        state,
        [
            (r"\.se\.", ".attn_standard."),
            (r"(\.conv\d)\.paths\.(\d+)\.conv\.", r"\1.paths.\2.0."),
            (r"(\.conv\d)\.paths\.(\d+)\.bn\.", r"\1.paths.\2.1."),
            (r"(\.conv\d)\.attn\.", r"\1."),
            (r"\.conv2\.conv\.", ".conv2."),
            (r"\.conv2\.bn\.", ".bn2."),
        ],
    )


def _timm_legacy_senet(state: dict[str, torch.Tensor], model: nn.Module) -> dict:
    """timm's ``legacy_seresnet*`` (its port of Hu et al.'s Caffe SENets, from Cadene's
    ``pretrainedmodels``): the stem under ``layer0`` (``conv1``, ``bn1``), the SE module
    ``layerX.Y.se_module`` (1x1 convs ``fc1``/``fc2`` with bias, visattn's ``attn_standard``)
    and the classifier ``last_linear``. The network itself differs from torchvision's (stride on
    the first 1x1 conv, a ceil-mode stem pool): load it into ``legacy_se_resnet50``; a model of
    torchvision's layout has the same keys but computes another function, so it is refused."""
    caffe = getattr(getattr(model, "maxpool", None), "ceil_mode", False)
    if not (caffe and strides_first_1x1(model)):
        raise ValueError(
            f"timm's legacy SENet weights need the Caffe layout (stride on the first 1x1 conv, "
            f"a ceil-mode stem pool); {getattr(model, 'model_name', type(model).__name__)} has "
            "torchvision's, which has the same keys but computes another function: build "
            "legacy_se_resnet50 (or resnet options stride_in_1x1=True, stem_pool_ceil=True)"
        )
    return rename(
        state,
        [
            (r"^layer0\.(conv1|bn1)\.", r"\1."),
            (r"\.se_module\.", ".attn_standard."),
            (r"^last_linear\.", "fc."),
        ],
    )


CONVERTERS: dict[str, Converter] = {
    "timm": _timm,
    "timm_legacy_senet": _timm_legacy_senet,
}
