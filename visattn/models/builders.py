"""Model builders: keyword-only functions that build a backbone from its hyper-parameters.
The registry (:mod:`visattn.models.registry`) names them; the zoo
(:mod:`visattn.models.zoo`) fixes their arguments per named model."""

from __future__ import annotations

from .residual_attention import ResidualAttentionNet
from .resnet import BasicBlock, Bottleneck, PreActBottleneck, ResNet

__all__ = [
    "IMAGENET_LAYOUTS",
    "RAN_MODULES",
    "attention_net",
    "preresnet_cifar",
    "resnet_cifar",
    "resnet_imagenet",
]


def _widen(channels: tuple[int, ...], width: float) -> tuple[int, ...]:
    """Channels scaled by ``width`` (rounded, at least 1): the equal-budget baselines of
    ``visattn.ablate`` widen a ResNet until it matches a variant's parameters or MACs."""
    if isinstance(width, bool) or not isinstance(width, int | float) or not width > 0:
        raise ValueError(f"width must be a positive number (1.0: the paper's), got {width!r}")
    return tuple(max(1, round(c * width)) for c in channels)


def resnet_cifar(
    *,
    depth: int,
    shortcut: str = "A",
    num_classes: int = 10,
    in_chans: int = 3,
    drop_rate: float = 0.0,
    drop_path_rate: float = 0.0,
    zero_init_residual: bool = False,
    width: float = 1.0,
) -> ResNet:
    """CIFAR ResNet of He et al. (CVPR 2016, Sec. 4.2): depth ``6n + 2``, BasicBlocks,
    16/32/64 channels (times ``width``), shortcut ``"A"`` (zero padding, the paper's) or
    ``"B"`` (projection)."""
    if not isinstance(depth, int) or depth < 8 or (depth - 2) % 6:
        raise ValueError(
            f"CIFAR ResNet depth must be 6n + 2 (20, 32, 44, 56, 110, ...), got {depth}"
        )
    n = (depth - 2) // 6
    return ResNet(
        BasicBlock,
        (n, n, n),
        planes=_widen((16, 32, 64), width),
        stem="cifar",
        stem_channels=_widen((16,), width)[0],
        shortcut=shortcut,
        num_classes=num_classes,
        in_chans=in_chans,
        drop_rate=drop_rate,
        drop_path_rate=drop_path_rate,
        zero_init_residual=zero_init_residual,
    )


def preresnet_cifar(
    *,
    depth: int,
    shortcut: str = "B",
    num_classes: int = 10,
    in_chans: int = 3,
    drop_rate: float = 0.0,
    drop_path_rate: float = 0.0,
    zero_init_residual: bool = False,
    width: float = 1.0,
) -> ResNet:
    """Pre-activation bottleneck ResNet for CIFAR (He et al., ECCV 2016): depth ``9n + 2``,
    64/128/256 output channels (times ``width``), 1x1 projection shortcuts where the shape
    changes."""
    if not isinstance(depth, int) or depth < 11 or (depth - 2) % 9:
        raise ValueError(
            f"pre-activation ResNet depth must be 9n + 2 (164, 1001, ...), got {depth}"
        )
    n = (depth - 2) // 9
    return ResNet(
        PreActBottleneck,
        (n, n, n),
        planes=_widen((16, 32, 64), width),
        stem="cifar",
        stem_channels=_widen((16,), width)[0],
        shortcut=shortcut,
        num_classes=num_classes,
        in_chans=in_chans,
        drop_rate=drop_rate,
        drop_path_rate=drop_path_rate,
        zero_init_residual=zero_init_residual,
    )


IMAGENET_LAYOUTS: dict[int, tuple[type, tuple[int, ...]]] = {
    18: (BasicBlock, (2, 2, 2, 2)),
    34: (BasicBlock, (3, 4, 6, 3)),
    50: (Bottleneck, (3, 4, 6, 3)),
    101: (Bottleneck, (3, 4, 23, 3)),
    152: (Bottleneck, (3, 8, 36, 3)),
}


def resnet_imagenet(
    *,
    depth: int,
    num_classes: int = 1000,
    in_chans: int = 3,
    drop_rate: float = 0.0,
    drop_path_rate: float = 0.0,
    zero_init_residual: bool = False,
    last_stride: int = 2,
    width: float = 1.0,
) -> ResNet:
    """ImageNet ResNet-18/34/50/101/152 with torchvision's parameter names and counts;
    ``last_stride=1`` keeps layer4 at layer3's resolution (14x14 at 224x224 input)."""
    if depth not in IMAGENET_LAYOUTS:
        raise ValueError(
            f"ImageNet ResNet depth must be one of {sorted(IMAGENET_LAYOUTS)}, got {depth}"
        )
    block, layers = IMAGENET_LAYOUTS[depth]
    return ResNet(
        block,
        layers,
        planes=_widen((64, 128, 256, 512), width),
        stem="imagenet",
        stem_channels=_widen((64,), width)[0],
        shortcut="B",
        num_classes=num_classes,
        in_chans=in_chans,
        drop_rate=drop_rate,
        drop_path_rate=drop_path_rate,
        zero_init_residual=zero_init_residual,
        strides=(1, 2, 2, last_stride),
    )


RAN_MODULES = {56: (1, 1, 1), 92: (1, 2, 3)}


def attention_net(
    *,
    depth: int,
    dataset: str,
    learning: str = "arl",
    mask: str = "mixed",
    p: int = 1,
    t: int = 2,
    r: int = 1,
    mask_bias: bool = False,
    align_corners: bool = True,
    num_classes: int = 1000,
    in_chans: int = 3,
    drop_rate: float = 0.0,
) -> ResidualAttentionNet:
    """Residual Attention Network Attention-56/92 (Wang et al., CVPR 2017) for ``dataset``
    ``"imagenet"`` (Table 2) or ``"cifar"`` (see :mod:`visattn.models.residual_attention`).
    ``mask_bias=False`` and ``align_corners=True`` follow the authors' Caffe prototxt (31,810,728
    parameters for Attention-56); ``True``/``False`` give visattn's earlier mask head."""
    if depth not in RAN_MODULES:
        raise ValueError(f"Residual Attention Network depth must be 56 or 92, got {depth}")
    common = dict(
        learning=learning,
        mask=mask,
        p=p,
        t=t,
        r=r,
        mask_bias=mask_bias,
        align_corners=align_corners,
        num_classes=num_classes,
        in_chans=in_chans,
        drop_rate=drop_rate,
        attention_modules=RAN_MODULES[depth],
    )
    if dataset == "imagenet":
        return ResidualAttentionNet(
            widths=(256, 512, 1024, 2048),
            mask_depths=(3, 2, 1),
            final_units=3,
            stem="imagenet",
            stem_channels=64,
            **common,
        )
    if dataset == "cifar":
        return ResidualAttentionNet(
            widths=(64, 128, 256, 256),
            mask_depths=(2, 1, 1),
            final_units=2,
            stem="cifar",
            stem_channels=16,
            **common,
        )
    raise ValueError(f"dataset must be 'imagenet' or 'cifar', got {dataset!r}")
