"""The model zoo: the named models, as tables, registered at import.

Each named model from an attention paper follows its authors' released code or weights; where
that differs from the paper or from the usual backbone, the table says so and the other form is
an option (a builder option the caller may override, or :func:`eca_placements`).
"""

from __future__ import annotations

from typing import Any

import torch.nn as nn

from .builders import (
    IMAGENET_LAYOUTS,
    attention_net,
    forwards_options,
    preresnet_cifar,
    resnet_cifar,
    resnet_imagenet,
)
from .registry import ModelSpec, get_model_spec, register_model
from .resnet import ResNet

__all__ = [
    "ECA_NET50_KERNELS",
    "GCT_OFFICIAL_EXTRA_PARAMS",
    "SK_TIMM_ARGS",
    "bot50_placements",
    "eca_placements",
    "fca_placements",
    "ge_placements",
    "resnet_imagenet_sk",
]

ECA_NET50_KERNELS = (3, 5, 5, 7)
#: SK options of timm's skresnet18/34: rd_ratio 1/8, rd_divisor 16, the input split between paths
SK_TIMM_ARGS = {"reduction": 8, "min_rd_channels": 16, "split_input": True}
#: total stride of layer1..layer4 in an ImageNet ResNet (56, 28, 14, 7 at 224x224)
_STAGE_STRIDES = (4, 8, 16, 32)


def eca_placements(kernel_sizes: tuple[int, ...] | None = ECA_NET50_KERNELS) -> tuple[dict, ...]:
    """ECA at the standard position of every block, with one kernel size per stage
    (``kernel_sizes[i]`` for stage ``i + 1``); ``None`` uses the adaptive formula (Wang et al.,
    CVPR 2020, Eq. 12), which gives 5, 5, 5, 7 on ResNet-50's 256..2048 channels. The default
    3, 5, 5, 7 is the released ECA-Net50 checkpoint's. E.g.
    ``create_model("resnet50", attention=eca_placements(None))``."""
    if kernel_sizes is None:
        return ({"name": "eca"},)
    return tuple(
        {"name": "eca", "args": {"kernel_size": k}, "stages": [i + 1]}
        for i, k in enumerate(kernel_sizes)
    )


def _stage_sizes(input_size: int) -> tuple[int, ...]:
    """Feature-map side of layer1..layer4 of an ImageNet ResNet for a square ``input_size``."""
    if isinstance(input_size, bool) or not isinstance(input_size, int) or input_size < 32:
        raise ValueError(f"input_size must be an int >= 32, got {input_size!r}")
    sizes = []
    for _ in range(2):  # stem: 7x7 conv stride 2 (pad 3), 3x3 max pool stride 2 (pad 1)
        input_size = (input_size - 1) // 2 + 1
    sizes.append(input_size)
    for _ in range(3):  # a 3x3 conv with stride 2 and padding 1 at the start of layer2..4
        input_size = (input_size - 1) // 2 + 1
        sizes.append(input_size)
    return tuple(sizes)


def ge_placements(input_size: int = 224) -> tuple[dict, ...]:
    """GE-theta-plus with global extent at the standard position of every block (Hu et al.,
    NeurIPS 2018; the official ``RN50-GEPP.prototxt``): per stage a depthwise conv whose kernel
    is the whole feature map, so the model is built for one input size (56, 28, 14, 7 at
    ``input_size=224``). E.g. ``create_model("resnet50", attention=ge_placements(64))``."""
    return tuple(
        {
            "name": "ge",
            "args": {"variant": "plus", "extent": "global", "feat_size": (s, s)},
            "stages": [i + 1],
        }
        for i, s in enumerate(_stage_sizes(input_size))
    )


def fca_placements(dct_sizes: tuple[int, ...] | None = (56, 28, 14, 7)) -> tuple[dict, ...]:
    """FcaNet's multi-spectral attention (top16, r = 16, bias-free FCs) at the standard position
    of every block, with the official code's fixed DCT filter size per stage (``dct_sizes[i]``
    for stage ``i + 1``, inputs of another size are average-pooled to it) and its orthonormal
    DCT; ``None``: the paper's form, filters for the input's own size and Eq. (1)'s basis."""
    if dct_sizes is None:
        return ({"name": "fca"},)
    return tuple(
        {"name": "fca", "args": {"dct_size": s, "dct_norm": "ortho"}, "stages": [i + 1]}
        for i, s in enumerate(dct_sizes)
    )


#: what GCT before *every* conv (the official GCT-ResNet-50) adds to ``gct_resnet50``, which
#: has the two slots visattn offers (``pre``: before conv1; ``inner``: before conv3): a GCT
#: before each conv2 (``3 x width`` per block), before the stem conv (``3 x 3``) and before the
#: four downsample convs (``3 x (64 + 256 + 512 + 1024)``)
GCT_OFFICIAL_EXTRA_PARAMS = 3 * (3 * 64 + 4 * 128 + 6 * 256 + 3 * 512) + 3 * 3 + 3 * 1856


@forwards_options(resnet_imagenet, drop=("width",))
def resnet_imagenet_sk(*, depth: int, **options: Any) -> ResNet:
    """:func:`resnet_imagenet` laid out for SK at position ``conv`` as timm's ``skresnet18`` /
    ``skresnet34``: the norm after each BasicBlock's first conv (``bn1``) is removed, since SK's
    paths end in their own BN and ReLU (the ReLU that stays is then the identity on SK's
    non-negative output). A generic placement (``create_model("resnet18", attention={"name":
    "sk", "position": "conv"})``) keeps ``bn1``: 2 parameters per channel more."""
    if depth not in (18, 34):
        raise ValueError(f"SK-ResNet depth must be 18 or 34 (BasicBlock layouts), got {depth}")
    model = resnet_imagenet(depth=depth, **options)
    for stage in (model.layer1, model.layer2, model.layer3, model.layer4):
        for block in stage:
            block.bn1 = nn.Identity()
    return model


def bot50_placements(feat_size: int = 14) -> tuple[dict, ...]:
    """BoT50 (Srinivas et al., CVPR 2021): MHSA with 4 heads replaces the 3x3 conv of the three
    layer4 blocks, the first strided by a 2x2 average pool after the attention. The relative
    position tables are made for ``feat_size`` (layer4's input side, 14 at 224x224) and half of
    it in the later blocks; other input sizes run with clipped relative positions."""
    later = (feat_size + 1) // 2
    return (
        {
            "name": "mhsa",
            "position": "conv",
            "stages": [4],
            "blocks": [0],
            "args": {"heads": 4, "feat_size": feat_size},
        },
        {
            "name": "mhsa",
            "position": "conv",
            "stages": [4],
            "blocks": [1, 2],
            "args": {"heads": 4, "feat_size": later},
        },
    )


_HE2016 = "He et al., CVPR 2016"
_RAN = "Wang et al., CVPR 2017; official prototxt: no mask-head bias, align_corners=True"
_SE16 = {"name": "se", "args": {"reduction": 16}}

# backbones: (name, builder, fixed arguments, dataset, placeable, paper)
_BACKBONES: list[tuple[str, Any, dict[str, Any], str, bool, str]] = [
    *[
        (f"resnet{d}_cifar", resnet_cifar, {"depth": d}, "cifar", True, _HE2016)
        for d in (20, 32, 44, 56, 110)
    ],
    ("preresnet164_cifar", preresnet_cifar, {"depth": 164}, "cifar", True, "He et al., ECCV 2016"),
    *[
        (f"resnet{d}", resnet_imagenet, {"depth": d}, "imagenet", True, _HE2016)
        for d in sorted(IMAGENET_LAYOUTS)
    ],
    *[
        (f"attention{d}{suffix}", attention_net, {"depth": d, "dataset": ds}, ds, False, _RAN)
        for ds, suffix in (("imagenet", ""), ("cifar", "_cifar"))
        for d in (56, 92)
    ],
]

# attention models: (name, backbone, placements, builder defaults, paper and provenance)
_PAPER_MODELS: list[tuple[str, str, tuple[dict[str, Any], ...], dict[str, Any], str]] = [
    ("se_resnet20_cifar", "resnet20_cifar", (_SE16,), {}, "Hu et al., CVPR 2018"),
    ("se_resnet56_cifar", "resnet56_cifar", (_SE16,), {}, "Hu et al., CVPR 2018"),
    ("se_resnet110_cifar", "resnet110_cifar", (_SE16,), {}, "Hu et al., CVPR 2018"),
    ("se_resnet50", "resnet50", (_SE16,), {}, "Hu et al., CVPR 2018"),
    ("se_resnet101", "resnet101", (_SE16,), {}, "Hu et al., CVPR 2018"),
    (
        "cbam_resnet50",
        "resnet50",
        ({"name": "cbam", "args": {"use_bn": True}},),
        {},
        "Woo et al., ECCV 2018; official code and released weights: the spatial gate's 7x7 conv "
        "has no bias and is followed by BN (use_bn=True); pools [max; mean] (weights convert)",
    ),
    (
        "bam_resnet50",
        "resnet50",
        ({"name": "bam", "position": "stage", "stages": [1, 2, 3]},),
        {},
        "Park et al., BMVC 2018",
    ),
    (
        "eca_resnet50",
        "resnet50",
        eca_placements(ECA_NET50_KERNELS),
        {},
        "Wang et al., CVPR 2020; released ECA-Net50 kernels 3, 5, 5, 7 (formula: 5, 5, 5, 7)",
    ),
    (
        "gsop_resnet50",
        "resnet50",
        ({"name": "gsop", "blocks": "last"},),
        {"last_stride": 1},
        "Gao et al., CVPR 2019; official GSoP-Net1: layer4 stride 1 (last_stride=2: usual layout)",
    ),
    (
        "gc_resnet50",
        "resnet50",
        ({"name": "gc", "args": {"reduction": 16}, "stages": [2, 3, 4]},),
        {},
        "Cao et al., ICCVW 2019; official configs: stage_with_gcb=(False, True, True, True)",
    ),
    (
        "ge_resnet50",
        "resnet50",
        ge_placements(224),
        {},
        "Hu et al., NeurIPS 2018; official RN50-GEPP (GE-theta-plus, global extent): 224x224 "
        "inputs only; differs: no ReLU between the gather's BN and the MLP",
    ),
    (
        "srm_resnet50",
        "resnet50",
        ({"name": "srm", "args": {"std": "unbiased"}},),
        {},
        "Lee et al., ICCV 2019; official code: after bn3, torch.std (unbiased)",
    ),
    (
        "fca_resnet50",
        "resnet50",
        fca_placements((56, 28, 14, 7)),
        {},
        "Qin et al., ICCV 2021; official FcaNet-50: top16, r=16, DCT 56/28/14/7, orthonormal",
    ),
    (
        "simam_resnet50",
        "resnet50",
        (
            {
                "name": "simam",
                "position": "inner",
                "args": {"e_lambda": 0.1, "variance": "unbiased"},
            },
        ),
        {},
        "Yang et al., ICML 2021; official ImageNet runs: lambda 0.1, 1/(HW-1); differs: after "
        "relu(bn2(conv2)), the official module sits between conv2 and bn2",
    ),
    (
        "triplet_resnet50",
        "resnet50",
        ({"name": "triplet"},),
        {},
        "Misra et al., WACV 2021; official code: after bn3, 7x7 kernels",
    ),
    (
        "gct_resnet50",
        "resnet50",
        ({"name": "gct", "position": "pre"}, {"name": "gct", "position": "inner"}),
        {},
        "Yang et al., CVPR 2020; differs: GCT before conv1 and conv3 of every block, the "
        "official code also before conv2, the stem conv and the downsample convs",
    ),
    (
        "botnet50",
        "resnet50",
        bot50_placements(14),
        {},
        "Srinivas et al., CVPR 2021; BoT50: MHSA (4 heads) replaces layer4's 3x3 convs, 2x2 "
        "average pool after the first; relative logits scaled as the authors' reference code",
    ),
    (
        "lambda_resnet50",
        "resnet50",
        ({"name": "lambda", "position": "conv", "args": {"heads": 4, "dim_k": 16, "r": 23}},),
        {"zero_init_residual": True},
        "Bello, ICLR 2021; LambdaResNet-50 (Table 3): lambda layers replace every 3x3 conv, "
        "|k|=16, |h|=4, |u|=1, scope 23; each block's last BN starts at zero (as timm's lambda "
        "ResNets): without it the untrained network's activations overflow by layer2",
    ),
]

# timm's SK-ResNets: (name, depth)
_SK_MODELS = [("sk_resnet18", 18), ("sk_resnet34", 34)]
_SK_PAPER = (
    "Li et al., CVPR 2019; timm's skresnet{d}: SK (r=8, min 16, split input) replaces each "
    "BasicBlock's first conv, whose BN is dropped"
)


def _register_zoo() -> None:
    for name, builder, fixed, dataset, placeable, paper in _BACKBONES:
        register_model(
            ModelSpec(
                name=name,
                builder=builder,
                placeable=placeable,
                dataset=dataset,
                fixed=fixed,
                paper=paper,
                # stem + stages: CIFAR ResNets have 3 stages, the others 4
                feature_levels=4 if (dataset == "cifar" and placeable) else 5,
            )
        )
    for name, base, placements, defaults, paper in _PAPER_MODELS:
        b = get_model_spec(base)
        register_model(
            ModelSpec(
                name=name,
                builder=b.builder,
                placeable=True,
                dataset=b.dataset,
                fixed=b.fixed,
                defaults=defaults,
                attention=placements,
                paper=paper,
                feature_levels=b.feature_levels,
            )
        )
    for name, depth in _SK_MODELS:
        register_model(
            ModelSpec(
                name=name,
                builder=resnet_imagenet_sk,
                placeable=True,
                dataset="imagenet",
                fixed={"depth": depth},
                attention=({"name": "sk", "position": "conv", "args": dict(SK_TIMM_ARGS)},),
                paper=_SK_PAPER.format(d=depth),
            )
        )


_register_zoo()
