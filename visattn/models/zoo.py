"""The model zoo: the named models, as tables, registered at import.

Each named model from an attention paper follows its authors' released code or weights; where
that differs from the paper or from the usual backbone, the table says so and the other form is
an option (a builder option the caller may override, or :func:`eca_placements`).
"""

from __future__ import annotations

from typing import Any

from .builders import (
    IMAGENET_LAYOUTS,
    attention_net,
    preresnet_cifar,
    resnet_cifar,
    resnet_imagenet,
)
from .registry import ModelSpec, get_model_spec, register_model

__all__ = ["ECA_NET50_KERNELS", "eca_placements"]

ECA_NET50_KERNELS = (3, 5, 5, 7)


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
        (
            f"attention{d}",
            attention_net,
            {"depth": d, "dataset": "imagenet"},
            "imagenet",
            False,
            _RAN,
        )
        for d in (56, 92)
    ],
    *[
        (
            f"attention{d}_cifar",
            attention_net,
            {"depth": d, "dataset": "cifar"},
            "cifar",
            False,
            _RAN,
        )
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
    ("cbam_resnet50", "resnet50", ({"name": "cbam"},), {}, "Woo et al., ECCV 2018"),
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
]


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


_register_zoo()
