"""The model zoo: the named models, as tables, registered at import.

Each named model from an attention paper follows its authors' released code or weights; its
:attr:`~visattn.models.registry.ModelSpec.meta` says which (``follows``), where visattn differs
from that code (``differs``) and the parameter count the paper prints (``published_params``).
Where the official code differs from the paper or from the usual backbone, the other form is an
option (a builder option the caller may override, or :func:`eca_placements`).
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
from .resnet import Bottleneck, ResNet

__all__ = [
    "ECA_NET50_KERNELS",
    "ECA_RELEASED_KERNELS",
    "bat_placements",
    "bot50_placements",
    "eca_placements",
    "fca_placements",
    "ge_placements",
    "resnet_imagenet_sk",
]

ECA_NET50_KERNELS = (3, 5, 5, 7)
#: the Conv1d kernel per stage of the released ECA-Nets (BangguWu/ECANet README: the files'
#: ``_k3577``, ``_k3357``, ``_k3557`` suffixes), by ResNet depth
ECA_RELEASED_KERNELS = {
    18: (3, 5, 7, 7),
    34: (3, 3, 5, 7),
    50: ECA_NET50_KERNELS,
    101: (3, 3, 5, 7),
    152: (3, 3, 5, 7),
}
#: SK options of timm's skresnet18/34: rd_ratio 1/8, rd_divisor 16, the input split between paths
_SK_TIMM_ARGS = {"reduction": 8, "min_rd_channels": 16, "split_input": True}


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
    is the whole feature map, then BN and ReLU (``gather_act``), so the model is built for one
    input size (56, 28, 14, 7 at
    ``input_size=224``). E.g. ``create_model("resnet50", attention=ge_placements(64))``."""
    return tuple(
        {
            "name": "ge",
            "args": {
                "variant": "plus",
                "extent": "global",
                "feat_size": (s, s),
                "gather_act": True,
            },
            "stages": [i + 1],
        }
        for i, s in enumerate(_stage_sizes(input_size))
    )


def fca_placements(dct_sizes: tuple[int, ...] | None = (56, 28, 14, 7)) -> tuple[dict, ...]:
    """FcaNet's multi-spectral attention (top16, r = 16, bias-free FCs) at the standard position
    of every block, with the official code's fixed DCT filter size per stage (``dct_sizes[i]``
    for stage ``i + 1``, inputs of another size are average-pooled to it) and its orthonormal
    DCT; ``None``: filters for the input's own size (the paper's form), with the same DCT."""
    if dct_sizes is None:
        return ({"name": "fca"},)
    return tuple(
        {"name": "fca", "args": {"dct_size": s, "dct_norm": "ortho"}, "stages": [i + 1]}
        for i, s in enumerate(dct_sizes)
    )


@forwards_options(resnet_imagenet, drop=("width",))
def resnet_imagenet_sk(*, depth: int, **options: Any) -> ResNet:
    """:func:`resnet_imagenet` laid out for SK at position ``conv``: the norm after the conv SK
    replaces is removed, since SK's paths end in their own BN and ReLU (the ReLU that stays is
    then the identity on SK's non-negative output): a BasicBlock's ``bn1`` (timm's
    ``skresnet18`` / ``skresnet34``), a Bottleneck's ``bn2`` (the SK-ResNet-50 of Li's
    PytorchInsight). A generic placement (``create_model("resnet18", attention={"name": "sk",
    "position": "conv"})``) keeps that norm: 2 parameters per channel more."""
    model = resnet_imagenet(depth=depth, **options)
    for stage in (model.layer1, model.layer2, model.layer3, model.layer4):
        for block in stage:
            setattr(block, "bn2" if isinstance(block, Bottleneck) else "bn1", nn.Identity())
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


def bat_placements(drop_rate: float = 0.2) -> tuple[dict, ...]:
    """BAT-ResNet-50 as the authors built it (``BA-Transform/BAT-Image-Classification``,
    ``nlnet50`` with ``--nl_mod 2 2 1000``): a BAT block (``r = 2``, 4 groups, ``s = 7``,
    ``Dropout2d(drop_rate)`` on its branch) on the output of every second residual block of
    layer2 and layer3 (blocks 1, 3 and 1, 3, 5), between that block and the next."""
    return tuple(
        {
            "name": "bat",
            "position": "output",
            "stages": [stage],
            "blocks": blocks,
            "args": {"drop_rate": drop_rate},
        }
        for stage, blocks in ((2, [1, 3]), (3, [1, 3, 5]))
    )


_HE2016 = {"paper": "He et al., CVPR 2016"}
_RAN = {
    "paper": "Wang et al., CVPR 2017",
    "follows": "official prototxt: no mask-head bias, align_corners=True",
}
_SE = {"paper": "Hu et al., CVPR 2018"}
_SE16 = {"name": "se", "args": {"reduction": 16}}
#: SimAM as the authors' ImageNet runs place it: after the last 3x3 conv, before its BN
_SIMAM_OFFICIAL = {
    "name": "simam",
    "position": "prenorm",
    "args": {"e_lambda": 0.1, "variance": "unbiased"},
}
#: parameter counts the backbones' papers print (He et al., CVPR 2016, Table 6 and ECCV 2016,
#: Table 3; Wang et al. 2017, Table 4); the other Residual Attention Networks' printed counts are
#: not visattn's
_PUBLISHED = {
    "resnet20_cifar": "0.27M",
    "resnet32_cifar": "0.46M",
    "resnet44_cifar": "0.66M",
    "resnet56_cifar": "0.85M",
    "resnet110_cifar": "1.7M",
    "preresnet164_cifar": "1.7M",
    "attention56": "31.9M",
}

# backbones: (name, builder, fixed arguments, dataset, placeable, meta)
_BACKBONES: list[tuple[str, Any, dict[str, Any], str, bool, dict[str, Any]]] = [
    *[
        (f"resnet{d}_cifar", resnet_cifar, {"depth": d}, "cifar", True, _HE2016)
        for d in (20, 32, 44, 56, 110)
    ],
    (
        "preresnet164_cifar",
        preresnet_cifar,
        {"depth": 164},
        "cifar",
        True,
        {"paper": "He et al., ECCV 2016"},
    ),
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

# attention models: (name, backbone, placements, builder defaults, meta)
_PAPER_MODELS: list[tuple[str, str, tuple[dict[str, Any], ...], dict[str, Any], dict[str, Any]]] = [
    ("se_resnet20_cifar", "resnet20_cifar", (_SE16,), {}, _SE),
    ("se_resnet56_cifar", "resnet56_cifar", (_SE16,), {}, _SE),
    ("se_resnet110_cifar", "resnet110_cifar", (_SE16,), {}, _SE),
    ("se_resnet50", "resnet50", (_SE16,), {}, {**_SE, "published_params": "28.09M"}),  # Table 2
    ("se_resnet101", "resnet101", (_SE16,), {}, {**_SE, "published_params": "49.33M"}),
    (
        "cbam_resnet50",
        "resnet50",
        ({"name": "cbam", "args": {"use_bn": True}},),
        {},
        {
            "paper": "Woo et al., ECCV 2018",
            "follows": "official code and released weights: the spatial gate's 7x7 conv has no "
            "bias and is followed by BN (use_bn=True); it pools [max; mean] (weights convert)",
            "published_params": "28.09M",  # Table 2
        },
    ),
    (
        "bam_resnet50",
        "resnet50",
        ({"name": "bam", "position": "stage", "stages": [1, 2, 3]},),
        {},
        {"paper": "Park et al., BMVC 2018", "published_params": "25.92M"},  # Table 4
    ),
    (
        "bam_resnet50_official",
        "resnet50",
        (
            {
                "name": "bam",
                "position": "stage",
                "stages": [1, 2, 3],
                "args": {"combine": "product", "layout": "official"},
            },
        ),
        {},
        {
            "paper": "Park et al., BMVC 2018",
            "follows": "official code and released weights (Jongchan/attention-module): "
            "M = sigmoid(M_c * M_s), BN on the channel MLP's hidden layer, none on the "
            "branches' outputs, biases on every conv and linear",
            "differs": "from the paper's Eqs. (2)-(4), which bam_resnet50 follows",
        },
    ),
    (
        "eca_resnet50",
        "resnet50",
        eca_placements(ECA_NET50_KERNELS),
        {},
        {
            "paper": "Wang et al., CVPR 2020",
            "follows": "released ECA-Net50: kernels 3, 5, 5, 7 (the paper's formula: 5, 5, 5, 7)",
        },
    ),
    *[
        (
            f"eca_resnet{d}",
            f"resnet{d}",
            eca_placements(ECA_RELEASED_KERNELS[d]),
            {},
            {
                "paper": "Wang et al., CVPR 2020",
                "follows": f"released ECA-Net{d} (eca_resnet{d}_k"
                + "".join(map(str, ECA_RELEASED_KERNELS[d]))
                + "): ECA after the block's last BN, one kernel per stage",
            },
        )
        for d in (18, 34, 101, 152)
    ],
    (
        "gsop_resnet50",
        "resnet50",
        ({"name": "gsop", "blocks": "last"},),
        {"last_stride": 1},
        {
            "paper": "Gao et al., CVPR 2019",
            "follows": "official GSoP-Net1: layer4 stride 1 (last_stride=2: the usual layout)",
        },
    ),
    (
        # a name of its own: encoder libraries (segmentation-models-pytorch) check a model's
        # feature strides on its default build, which a caller's last_stride=2 does not reach
        "gsop_resnet50_s32",
        "resnet50",
        ({"name": "gsop", "blocks": "last"},),
        {},
        {
            "paper": "Gao et al., CVPR 2019",
            "follows": "GSoP-Net1's placements (GSoP after the last block of each stage)",
            "differs": "layer4 at stride 2 (total stride 32, the usual layout of detection and "
            "segmentation encoders); the official network keeps layer4 at stride 1",
        },
    ),
    (
        "gc_resnet50",
        "resnet50",
        ({"name": "gc", "args": {"reduction": 16}, "stages": [2, 3, 4]},),
        {},
        {
            "paper": "Cao et al., ICCVW 2019",
            "follows": "official configs: stage_with_gcb=(False, True, True, True)",
        },
    ),
    (
        "ge_resnet50",
        "resnet50",
        ge_placements(224),
        {},
        {
            "paper": "Hu et al., NeurIPS 2018",
            "follows": "official RN50-GEPP (GE-theta-plus, global extent, ReLU after the "
            "gather's BN): 224x224 inputs only",
        },
    ),
    (
        "srm_resnet50",
        "resnet50",
        ({"name": "srm", "args": {"std": "official"}},),
        {},
        {
            "paper": "Lee et al., ICCV 2019",
            "follows": "official code: after bn3, sqrt(unbiased variance + 1e-5)",
            "published_params": "25.62M",
        },
    ),
    *[
        (
            f"fca_resnet{d}",
            f"resnet{d}",
            fca_placements((56, 28, 14, 7)),
            {},
            {
                "paper": "Qin et al., ICCV 2021",
                "follows": f"official FcaNet-{d} (cfzd/FcaNet, torch.hub fca{d}): top16, r=16, "
                "DCT 56/28/14/7, orthonormal, after the block's last BN",
                **({"published_params": "28.07M"} if d == 50 else {}),
            },
        )
        for d in (34, 50, 101, 152)
    ],
    *[
        (
            f"simam_resnet{d}",
            f"resnet{d}",
            (_SIMAM_OFFICIAL,),
            {},
            {
                "paper": "Yang et al., ICML 2021",
                "follows": "official ImageNet ResNets (ZjjConan/SimAM): SimAM between conv2 and "
                "bn2 of every block (position prenorm), lambda 0.1, 1/(HW-1)",
                "published_params": params,
            },
        )
        for d, params in ((18, "11.69M"), (34, "21.80M"), (50, "25.56M"), (101, "44.55M"))
    ],
    (
        "triplet_resnet50",
        "resnet50",
        ({"name": "triplet", "args": {"zero_init_hw": True}},),
        {},
        {
            "paper": "Misra et al., WACV 2021",
            "follows": "official code: after bn3, 7x7 kernels, the hw branch's BN scale "
            "initialised to zero",
            "published_params": "25.56M",
        },
    ),
    (
        "gct_resnet50",
        "resnet50",
        ({"name": "gct", "position": "pre"}, {"name": "gct", "position": "inner"}),
        {},
        {
            "paper": "Yang et al., CVPR 2020",
            "differs": "GCT before conv1 and conv3 of every block (visattn's slots); the "
            "official code also puts one before conv2, the stem conv and the downsample convs "
            "(gct_resnet50_official)",
            "official_params": 25_624_625,
        },
    ),
    (
        "bat_resnet50",
        "resnet50",
        bat_placements(),
        {},
        {
            "paper": "Chi et al., CVPR 2020",
            "follows": "official nlnet50 --nltype bat --nl_mod 2 2 1000: BAT (r=2, 4 groups, s=7, "
            "dropout 0.2) after blocks 1 and 3 of layer2 and 1, 3 and 5 of layer3",
            "published_params": "30.2M",
        },
    ),
    (
        "botnet50",
        "resnet50",
        bot50_placements(14),
        {},
        {
            "paper": "Srinivas et al., CVPR 2021",
            "follows": "BoT50: MHSA (4 heads) replaces layer4's 3x3 convs, 2x2 average pool "
            "after the first; relative logits scaled as the authors' reference code",
            "published_params": "20.8M",
        },
    ),
    (
        "lambda_resnet50",
        "resnet50",
        ({"name": "lambda", "position": "conv", "args": {"heads": 4, "dim_k": 16, "r": 23}},),
        {"zero_init_residual": True},
        {
            "paper": "Bello, ICLR 2021",
            "follows": "LambdaResNet-50 (Table 3): lambda layers replace every 3x3 conv, "
            "|k|=16, |h|=4, |u|=1, scope 23",
            "differs": "each block's last BN starts at zero (as timm's lambda ResNets): "
            "without it the untrained network's activations overflow by layer2",
            "published_params": "15.0M",
        },
    ),
]

# networks of another layout than torchvision's: (name, backbone, placements, builder options the
# name fixes, meta); fixed, so that a tag's weights never load into the other layout
_LAYOUT_MODELS: list[tuple[str, str, tuple[dict[str, Any], ...], dict[str, Any], dict]] = [
    (
        "legacy_se_resnet50",
        "resnet50",
        (_SE16,),
        {"stride_in_1x1": True, "stem_pool_ceil": True},
        {
            **_SE,
            "follows": "the authors' Caffe SE-ResNet-50 as timm's legacy_seresnet50 ports it "
            "(Cadene's pretrainedmodels): a downsampling bottleneck strides its first 1x1 conv, "
            "the stem's max-pool has no padding and rounds up (ceil mode)",
            "differs": "no dropout before the classifier (timm's legacy SENets default to 0.2; "
            "drop_rate=0.2 gives it): the same in evaluation",
            "published_params": "28.09M",
        },
    ),
    (
        "gct_resnet50_official",
        "resnet50",
        ({"name": "gct", "before": "Conv2d", "args": {"norm": "official"}},),
        {"stride_in_1x1": True},
        {
            "paper": "Yang et al., CVPR 2020",
            "follows": "the authors' released GCT-ResNet-50 (z-x-yang/GCT, PyTorch/resnet.py, "
            "from maskrcnn-benchmark): a GCT on the input of every conv (the stem conv, conv1, "
            "conv2, conv3 and the downsample conv of every block), eps on the channel mean "
            "(norm='official'), a downsampling bottleneck strides its first 1x1 conv",
            "differs": "from gct_resnet50 (GCT before conv1 and conv3 only, torchvision's "
            "strides): GCTs are hooked on the convs (conv.attn_before), not in ResNet slots",
            "official_params": 25_624_625,
        },
    ),
]

#: the SK options of the SK-ResNet-50 in Li's PytorchInsight (``resnet_sk.py``, "SK-ResNet50*"):
#: a dense and a 32-group 3x3 path, d = C' / 16 with no lower bound
_SK_INSIGHT_ARGS = {"kernel_sizes": (3, 3), "groups": (1, 32), "min_rd_channels": 1}
# SK-ResNets: (name, depth, SK options, what they follow)
_SK_MODELS = [
    *[
        (
            f"sk_resnet{d}",
            d,
            _SK_TIMM_ARGS,
            f"timm's skresnet{d}: SK (r=8, min 16, split input) replaces each BasicBlock's first "
            "conv, whose BN is dropped",
        )
        for d in (18, 34)
    ],
    (
        "sk_resnet50",
        50,
        _SK_INSIGHT_ARGS,
        "sk_resnet50 of Li's PytorchInsight (SK-ResNet50*, implus/PytorchInsight, with released "
        "weights): SK with a dense and a 32-group 3x3 path (no dilation), r=16 without a minimum, "
        "replaces each Bottleneck's 3x3 conv, whose BN is dropped",
    ),
]


def _register_zoo() -> None:
    for name, builder, fixed, dataset, placeable, meta in _BACKBONES:
        register_model(
            ModelSpec(
                name=name,
                builder=builder,
                placeable=placeable,
                dataset=dataset,
                fixed=fixed,
                meta={
                    **meta,
                    **({"published_params": _PUBLISHED[name]} if name in _PUBLISHED else {}),
                },
                # stem + stages: CIFAR ResNets have 3 stages, the others 4
                feature_levels=4 if (dataset == "cifar" and placeable) else 5,
            )
        )
    # paper models set options a caller may override, layout models fix them; both take the
    # rest of their spec from the base model
    derived = [(n, b, p, d, {}, m) for n, b, p, d, m in _PAPER_MODELS]
    derived += [(n, b, p, {}, f, m) for n, b, p, f, m in _LAYOUT_MODELS]
    for name, base, placements, defaults, fixed, meta in derived:
        b = get_model_spec(base)
        register_model(
            ModelSpec(
                name=name,
                builder=b.builder,
                placeable=True,
                dataset=b.dataset,
                fixed={**b.fixed, **fixed},
                defaults=defaults,
                attention=placements,
                meta=meta,
                feature_levels=b.feature_levels,
            )
        )
    for name, depth, args, follows in _SK_MODELS:
        register_model(
            ModelSpec(
                name=name,
                builder=resnet_imagenet_sk,
                placeable=True,
                dataset="imagenet",
                fixed={"depth": depth},
                attention=({"name": "sk", "position": "conv", "args": dict(args)},),
                meta={"paper": "Li et al., CVPR 2019", "follows": follows},
            )
        )


_register_zoo()
