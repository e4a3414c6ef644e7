"""Where attention goes inside the common CNN block families: one table, data only.

A placement that selects blocks by pattern and names a ``position``
(``{"name": "cbam", "after": ["InvertedResidual"], "position": "standard"}``) is realised by the
row of :data:`BACKBONE_FAMILIES` that lists the matched block's class (the first class of its MRO
found in the table). (The families of the attention blocks themselves, channel, spatial, hybrid
and residual, are ``visattn.blocks.FAMILIES``.) A row gives, for each position it supports,
candidate sites tried in order: the first whose module exists in the block is used. A site is
``"before:<relative path>"`` or ``"after:<relative path>"``; path segments may be negative
indices into a sequential container (``block.-1``: its last child). Rows with ``slots=True``
are residual blocks with attention slots (ResNets): their positions are the slots of
:class:`~visattn.models.resnet.SlottedBlock`, filled after adapting the block (see
:mod:`visattn.models.inject`).

``standard`` is where each family's own squeeze-and-excitation sits, which is where the SE paper
(Hu et al., CVPR 2018) and the family's authors put channel attention:

* MobileNetV2/V3 inverted residuals, EfficientNet MBConv / FusedMBConv, timm's
  ``DepthwiseSeparableConv`` and ``EdgeResidual``: after the depthwise (or fused) conv and the
  block's SE, if any, before the 1x1 projection (Sandler et al., CVPR 2018; Howard et al., ICCV
  2019; Tan and Le, ICML 2019);
* ConvNeXt blocks: on the residual branch after its layer scale, before drop-path and the
  residual add (Liu et al., CVPR 2022);
* RegNet bottlenecks (torchvision ``ResBottleneckBlock``, timm's ``regnet.Bottleneck`` and
  ByobNet ``BottleneckBlock``): after the grouped 3x3 conv and its SE, before the last 1x1
  (Radosavovic et al., CVPR 2020).

:data:`SE_MODULES` lists the squeeze-and-excitation classes that ``replace: se`` swaps.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

import torch.nn as nn

__all__ = ["BACKBONE_FAMILIES", "SE_MODULES", "Family", "family_of", "qualname"]


@dataclass(frozen=True)
class Family:
    """One block family: its label, its classes (``module.QualName``) and its positions."""

    label: str
    classes: tuple[str, ...]
    positions: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    slots: bool = False  # positions are SlottedBlock slots (ResNet blocks)


_TV, _TIMM_EFF = "torchvision.models", "timm.models._efficientnet_blocks"

#: the family rules (see the module docstring)
BACKBONE_FAMILIES: tuple[Family, ...] = (
    Family(
        "ResNet basic / bottleneck block (torchvision, timm, visattn)",
        (
            f"{_TV}.resnet.BasicBlock",
            f"{_TV}.resnet.Bottleneck",
            "timm.models.resnet.BasicBlock",
            "timm.models.resnet.Bottleneck",
            "visattn.models.resnet.SlottedBlock",
        ),
        slots=True,
    ),
    Family(
        "torchvision MobileNetV3 inverted residual",
        (f"{_TV}.mobilenetv3.InvertedResidual",),
        {"standard": ("before:block.-1",)},
    ),
    Family(
        "torchvision MobileNetV2 inverted residual",
        (f"{_TV}.mobilenetv2.InvertedResidual",),
        {"standard": ("before:conv.-2",)},  # conv = [expand], dw, project conv, project BN
    ),
    Family(
        "torchvision EfficientNet MBConv",
        (f"{_TV}.efficientnet.MBConv",),
        {"standard": ("before:block.-1",)},
    ),
    Family(
        "torchvision EfficientNetV2 FusedMBConv",
        (f"{_TV}.efficientnet.FusedMBConv",),
        {"standard": ("before:block.1", "after:block.0")},  # no projection at expand ratio 1
    ),
    Family(
        "timm inverted residual (MobileNetV2/V3, EfficientNet MBConv)",
        (f"{_TIMM_EFF}.InvertedResidual",),
        {"standard": ("before:conv_pwl",)},
    ),
    Family(
        "timm depthwise-separable conv (MobileNet, EfficientNet first stage)",
        (f"{_TIMM_EFF}.DepthwiseSeparableConv",),
        {"standard": ("before:conv_pw",)},
    ),
    Family(
        "timm edge residual (FusedMBConv)",
        (f"{_TIMM_EFF}.EdgeResidual",),
        {"standard": ("before:conv_pwl",)},
    ),
    Family(
        "torchvision ConvNeXt block",
        (f"{_TV}.convnext.CNBlock",),
        {"standard": ("before:stochastic_depth",)},
    ),
    Family(
        "timm ConvNeXt block",
        ("timm.models.convnext.ConvNeXtBlock",),
        {"standard": ("before:drop_path",)},
    ),
    Family(
        "torchvision RegNet bottleneck",
        (f"{_TV}.regnet.ResBottleneckBlock",),
        {"standard": ("before:f.c",)},
    ),
    Family(
        "timm RegNet bottleneck",
        ("timm.models.regnet.Bottleneck",),
        {"standard": ("before:conv3",)},
    ),
    Family(
        "timm ByobNet bottleneck (RegNetZ, ...)",
        ("timm.models.byobnet.BottleneckBlock",),
        {"standard": ("before:conv3_1x1",)},
    ),
)

#: squeeze-and-excitation classes that ``replace: se`` swaps (MobileNetV3, EfficientNet, RegNetY)
SE_MODULES: tuple[str, ...] = (
    "torchvision.ops.misc.SqueezeExcitation",
    f"{_TIMM_EFF}.SqueezeExcite",
    "timm.layers.squeeze_excite.SEModule",
    "timm.layers.squeeze_excite.EffectiveSEModule",
)


def qualname(cls: type) -> str:
    return f"{cls.__module__}.{cls.__qualname__}"


_BY_CLASS = {c: f for f in BACKBONE_FAMILIES for c in f.classes}


def family_of(module: nn.Module) -> Family | None:
    """The row of :data:`BACKBONE_FAMILIES` for ``module``'s class (or its nearest listed base)."""
    for cls in type(module).__mro__:
        row = _BY_CLASS.get(qualname(cls))
        if row is not None:
            return row
    return None


def is_se(module: nn.Module) -> bool:
    """Whether ``module`` is one of :data:`SE_MODULES` (or a subclass)."""
    return any(qualname(cls) in SE_MODULES for cls in type(module).__mro__)
