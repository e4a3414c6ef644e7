"""Model builders: keyword-only functions that build a backbone from its hyper-parameters.
The registry (:mod:`visattn.models.registry`) names them; the zoo
(:mod:`visattn.models.zoo`) fixes their arguments per named model."""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from typing import Any, TypeVar

from .residual_attention import ResidualAttentionNet
from .resnet import BasicBlock, Bottleneck, PreActBottleneck, ResNet

__all__ = [
    "IMAGENET_LAYOUTS",
    "RAN_LAYOUTS",
    "RAN_MODULES",
    "attention_net",
    "forwards_options",
    "preresnet_cifar",
    "resnet_cifar",
    "resnet_imagenet",
]

_B = TypeVar("_B")


def _widen(channels: tuple[int, ...], width: float) -> tuple[int, ...]:
    """Channels scaled by ``width`` (rounded, at least 1): the equal-budget baselines of
    ``visattn.ablate`` widen a ResNet until it matches a variant's parameters or MACs."""
    if isinstance(width, bool) or not isinstance(width, int | float) or not width > 0:
        raise ValueError(f"width must be a positive number (1.0: the paper's), got {width!r}")
    return tuple(max(1, round(c * width)) for c in channels)


def forwards_options(
    target: Callable[..., Any], *, drop: tuple[str, ...] = ()
) -> Callable[[Callable[..., _B]], Callable[..., _B]]:
    """Decorator for a builder ``f(*, own options, **options)`` that passes ``options`` on to
    ``target``: ``f``'s signature (read by :meth:`ModelSpec.options`, ``create_model``'s
    unknown-option errors and ``help``) becomes its own keyword options followed by
    ``target``'s keyword options (minus those ``f`` declares and those in ``drop``), with
    ``target``'s defaults, and a call with an option it does not list is a ``TypeError``.
    ``target``'s defaults stay the one home of the shared options."""

    def wrap(f: Callable[..., _B]) -> Callable[..., _B]:
        sig = inspect.signature(f)
        own = [p for p in sig.parameters.values() if p.kind is inspect.Parameter.KEYWORD_ONLY]
        taken = {p.name for p in own} | set(drop)
        passed = [
            p
            for p in inspect.signature(target).parameters.values()
            if p.kind is inspect.Parameter.KEYWORD_ONLY and p.name not in taken
        ]
        signature = sig.replace(parameters=own + passed)

        @functools.wraps(f)
        def builder(**options: Any) -> _B:
            signature.bind(**options)  # an option it does not list is a TypeError, as usual
            return f(**options)

        builder.__signature__ = signature  # type: ignore[attr-defined]
        return builder

    return wrap


# CIFAR residual units: layers per unit (depth = 3 stages x layers x n + 2), what the error
# calls the network, example depths
_CIFAR_UNITS: dict[type, tuple[int, str, str]] = {
    BasicBlock: (2, "CIFAR ResNet", "20, 32, 44, 56, 110, ..."),
    PreActBottleneck: (3, "pre-activation ResNet", "164, 1001, ..."),
}


def _cifar_resnet(
    block: type,
    /,
    *,
    depth: int,
    shortcut: str,
    num_classes: int = 10,
    in_chans: int = 3,
    drop_rate: float = 0.0,
    drop_path_rate: float = 0.0,
    zero_init_residual: bool = False,
    width: float = 1.0,
) -> ResNet:
    """Three stages of ``n`` ``block`` units on 16/32/64 planes (times ``width``) after a
    3x3 stem, ``n`` from ``depth`` (He et al., CVPR 2016, Sec. 4.2)."""
    layers, what, examples = _CIFAR_UNITS[block]
    per_n = 3 * layers
    if not isinstance(depth, int) or depth < per_n + 2 or (depth - 2) % per_n:
        raise ValueError(f"{what} depth must be {per_n}n + 2 ({examples}), got {depth}")
    n = (depth - 2) // per_n
    return ResNet(
        block,
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


@forwards_options(_cifar_resnet)
def resnet_cifar(*, depth: int, shortcut: str = "A", **options: Any) -> ResNet:
    """CIFAR ResNet of He et al. (CVPR 2016, Sec. 4.2): depth ``6n + 2``, BasicBlocks,
    16/32/64 channels (times ``width``), shortcut ``"A"`` (zero padding, the paper's) or
    ``"B"`` (projection)."""
    return _cifar_resnet(BasicBlock, depth=depth, shortcut=shortcut, **options)


@forwards_options(_cifar_resnet)
def preresnet_cifar(*, depth: int, shortcut: str = "B", **options: Any) -> ResNet:
    """Pre-activation bottleneck ResNet for CIFAR (He et al., ECCV 2016): depth ``9n + 2``,
    64/128/256 output channels (times ``width``), 1x1 projection shortcuts where the shape
    changes."""
    return _cifar_resnet(PreActBottleneck, depth=depth, shortcut=shortcut, **options)


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
    output_stride: int = 32,
    width: float = 1.0,
    stride_in_1x1: bool = False,
    stem_pool_ceil: bool = False,
) -> ResNet:
    """ImageNet ResNet-18/34/50/101/152 with torchvision's parameter names and counts;
    ``last_stride=1`` keeps layer4 at layer3's resolution (14x14 at 224x224 input);
    ``output_stride`` 16 or 8 dilates the later stages instead, as timm's ResNets do;
    ``stride_in_1x1`` (depth 50+) and ``stem_pool_ceil`` give the Caffe layout of the original
    ResNets and SENets (see :class:`~visattn.models.resnet.ResNet`)."""
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
        output_stride=output_stride,
        stride_in_1x1=stride_in_1x1,
        stem_pool_ceil=stem_pool_ceil,
    )


RAN_MODULES = {56: (1, 1, 1), 92: (1, 2, 3)}
#: the Residual Attention Network's layout per data set (Table 2 for ImageNet)
RAN_LAYOUTS: dict[str, dict[str, Any]] = {
    "imagenet": {
        "widths": (256, 512, 1024, 2048),
        "mask_depths": (3, 2, 1),
        "final_units": 3,
        "stem": "imagenet",
        "stem_channels": 64,
    },
    "cifar": {
        "widths": (64, 128, 256, 256),
        "mask_depths": (2, 1, 1),
        "final_units": 2,
        "stem": "cifar",
        "stem_channels": 16,
    },
}


@forwards_options(ResidualAttentionNet, drop=("attention_modules", *RAN_LAYOUTS["cifar"]))
def attention_net(*, depth: int, dataset: str, **options: Any) -> ResidualAttentionNet:
    """Residual Attention Network Attention-56/92 (Wang et al., CVPR 2017) for ``dataset``
    ``"imagenet"`` (Table 2) or ``"cifar"`` (see :mod:`visattn.models.residual_attention`);
    ``options`` are :class:`ResidualAttentionNet`'s (``learning``, ``mask``, ``p``, ``t``,
    ``r``, ``mask_bias``, ``align_corners``, ``num_classes``, ``in_chans``, ``drop_rate``).
    Its defaults ``mask_bias=False`` and ``align_corners=True`` follow the authors' Caffe
    prototxt (31,810,728 parameters for Attention-56); ``True``/``False`` give visattn's earlier
    mask head."""
    if depth not in RAN_MODULES:
        raise ValueError(f"Residual Attention Network depth must be 56 or 92, got {depth}")
    if dataset not in RAN_LAYOUTS:
        raise ValueError(f"dataset must be 'imagenet' or 'cifar', got {dataset!r}")
    return ResidualAttentionNet(
        attention_modules=RAN_MODULES[depth], **RAN_LAYOUTS[dataset], **options
    )
