"""Small facts about a network that several modules need: the device (and dtype) its weights live
on, a scope that runs it in eval mode and then restores the mode of each of its modules, and its
last stage (the usual Grad-CAM layer)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import torch
import torch.nn as nn

__all__ = ["device_of", "eval_mode", "factory_of", "last_stage"]


def _reference(net: nn.Module) -> torch.Tensor | None:
    """``net``'s first parameter, else its first buffer (a network of buffers only), else None."""
    ref = next(net.parameters(), None)
    return next(net.buffers(), None) if ref is None else ref


def device_of(net: nn.Module) -> torch.device:
    """The device of ``net``'s first parameter or buffer (the CPU for a network without)."""
    ref = _reference(net)
    return ref.device if ref is not None else torch.device("cpu")


def factory_of(net: nn.Module) -> dict[str, Any]:
    """``{"device", "dtype"}`` of ``net``'s first parameter or buffer, for tensors and modules
    made to join it (``torch.randn(..., **factory_of(net))``); ``{}`` for a network without. A
    non-float reference (an integer buffer) gives its device and float32."""
    ref = _reference(net)
    if ref is None:
        return {}
    return {"device": ref.device, "dtype": ref.dtype if ref.is_floating_point() else torch.float32}


@contextmanager
def eval_mode(net: nn.Module) -> Iterator[nn.Module]:
    """``net`` in eval mode inside the ``with`` block; when it exits, also on an error, every
    module has the mode it had before (a network in training with frozen, eval-mode norms keeps
    them frozen: ``net.train()`` alone would switch them back to training)."""
    modes = [(m, m.training) for m in net.modules()]
    net.eval()
    try:
        yield net
    finally:
        for m, mode in modes:
            m.training = mode


#: torchvision trunks whose last child is the last stage (MobileNet, EfficientNet, ConvNeXt, VGG,
#: DenseNet: ``features``; RegNet: ``trunk_output``)
_SEQUENTIAL_TRUNKS = ("features", "trunk_output")


def last_stage(net: nn.Module) -> tuple[str, nn.Module]:
    """``(module path, module)`` of the network's last stage, the usual Grad-CAM layer: the last
    of ``net.stage_names`` (visattn ResNets), ``net.stages[-1]`` (Residual Attention Networks) or
    ``layer4``/``layer3`` (torchvision and timm ResNets), the module of the last entry of timm's
    ``feature_info`` (other timm models), or the last child of torchvision's ``features`` /
    ``trunk_output`` trunks (MobileNet, EfficientNet, ConvNeXt, VGG, DenseNet, RegNet).

    Raises:
        ValueError: no stage found.
    """
    names = getattr(net, "stage_names", None)
    if names:
        return names[-1], getattr(net, names[-1])
    stages = getattr(net, "stages", None)
    if isinstance(stages, nn.Sequential) and len(stages):
        return f"stages.{len(stages) - 1}", stages[-1]
    for name in ("layer4", "layer3"):
        if isinstance(getattr(net, name, None), nn.Module):
            return name, getattr(net, name)
    info = getattr(net, "feature_info", None)  # timm models: their last feature module
    if isinstance(info, list) and info and isinstance(info[-1], dict) and "module" in info[-1]:
        path = info[-1]["module"]
        return path, net.get_submodule(path)
    for name in _SEQUENTIAL_TRUNKS:  # torchvision's other families
        trunk = getattr(net, name, None)
        if isinstance(trunk, nn.Sequential) and len(trunk):
            child, module = list(trunk.named_children())[-1]
            return f"{name}.{child}", module
    raise ValueError(
        f"{type(net).__name__} has no recognisable last stage (stage_names, stages, layer4, "
        f"timm's feature_info, {', '.join(_SEQUENTIAL_TRUNKS)}); pass the Grad-CAM layer "
        "explicitly"
    )
