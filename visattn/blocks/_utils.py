"""Small helpers shared by the blocks: layer lookup by name or class, option checks, and the
channels and stride of conv-replacing blocks."""

from __future__ import annotations

import math
from typing import Any

import torch
import torch.nn as nn

_ACTIVATIONS: dict[str, type[nn.Module]] = {
    "relu": nn.ReLU,
    "relu6": nn.ReLU6,
    "silu": nn.SiLU,
    "swish": nn.SiLU,
    "gelu": nn.GELU,
    "hard_swish": nn.Hardswish,
    "leaky_relu": nn.LeakyReLU,
    "sigmoid": nn.Sigmoid,
    "hard_sigmoid": nn.Hardsigmoid,
    "tanh": nn.Tanh,
    "identity": nn.Identity,
}


def get_layer(layer: str | type[nn.Module] | Any, option: str) -> type[nn.Module]:
    """Resolve an activation/gate option given as a class, a callable or a name."""
    if isinstance(layer, str):
        try:
            return _ACTIVATIONS[layer.lower()]
        except KeyError:
            raise ValueError(
                f"option '{option}': unknown layer {layer!r}; choose from {sorted(_ACTIVATIONS)} "
                "or pass an nn.Module class"
            ) from None
    if callable(layer):
        return layer
    raise ValueError(f"option '{option}' must be a layer name or class, got {layer!r}")


def check_choice(option: str, value: Any, choices: tuple[Any, ...] | list[Any]) -> None:
    if value not in choices:
        raise ValueError(f"option '{option}' must be one of {list(choices)}, got {value!r}")


def check_positive_int(option: str, value: Any, *, odd: bool = False) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"option '{option}' must be a positive int, got {value!r}")
    if odd and value % 2 == 0:
        raise ValueError(f"option '{option}' must be odd, got {value}")


def init_conv_io(
    block: nn.Module,
    channels: int,
    out_channels: int | None,
    stride: int,
    *,
    heads: int | None = None,
) -> int:
    """Check and store a conv-replacing block's ``in_channels``, ``out_channels`` (``None``:
    ``channels``) and ``stride`` as attributes of ``block``; with ``heads``, also check that the
    heads divide ``out_channels``. Returns ``out_channels``. Errors name the option."""
    out = channels if out_channels is None else out_channels
    check_positive_int("out_channels", out)
    check_positive_int("stride", stride)
    if heads is not None:
        check_positive_int("heads", heads)
        if out % heads:
            raise ValueError(f"option 'heads'={heads} must divide out_channels={out}")
    block.in_channels, block.out_channels, block.stride = channels, out, stride
    return out


def reduced_channels(
    channels: int, reduction: float, *, min_channels: int = 0, option: str = "reduction"
) -> int:
    """``channels // reduction`` (raised to ``min_channels``); a result of 0 is refused."""
    if isinstance(reduction, bool) or not isinstance(reduction, (int, float)) or reduction <= 0:
        raise ValueError(f"option '{option}' must be a positive number, got {reduction!r}")
    rd = int(channels // reduction)
    rd = max(rd, min_channels)
    if rd < 1:
        raise ValueError(
            f"option '{option}'={reduction} leaves {rd} channels for {channels} input channels"
        )
    return rd


def eca_kernel_size(channels: int, gamma: float = 2.0, b: float = 1.0) -> int:
    """ECA-Net Eq. (12): k = |log2(C)/gamma + b/gamma|_odd (nearest odd number, at least 1)."""
    t = int(abs(math.log2(channels) / gamma + b / gamma))
    return t if t % 2 else t + 1


def same_memory_format(y: torch.Tensor, like: torch.Tensor) -> torch.Tensor:
    """``y`` in the memory format of ``like``: channels-last if ``like`` is (and not also
    contiguous), else ``y`` unchanged. For blocks whose grouped reshapes copy a channels-last input
    into NCHW order, so that their output keeps the format they received."""
    cl = like.dim() == 4 and like.is_contiguous(memory_format=torch.channels_last)
    if cl and not like.is_contiguous():
        return y.contiguous(memory_format=torch.channels_last)
    return y.contiguous() if like.is_contiguous() else y
