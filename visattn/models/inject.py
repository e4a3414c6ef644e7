"""Place attention blocks into an existing torchvision or timm ResNet, in place.

``inject(model, placement)`` realises the placement positions (README, "Models and placement") on
``torchvision.models.ResNet`` and ``timm.models.ResNet`` instances with the same mechanism as
visattn's own ResNets (:mod:`visattn.models.placement`): each residual block that receives a
block is *replaced* by a slotted block that takes over the original's layers under their original
names (so parameter names do not change and pretrained weights still load), and a stage that
receives a ``stage`` block becomes a :class:`~visattn.models.resnet.ResNetStage` holding the
original blocks as ``"0"``, ``"1"``, .... Blocks that receive nothing are left as they are.

Added module paths (returned, in placement order): ``layer{i}.{j}.attn_{position}``,
``layer{i}.attn_stage`` and, for position ``conv``, the replaced conv's own path
(``layer{i}.{j}.conv2`` in a Bottleneck, ``layer{i}.{j}.conv1`` in a BasicBlock): the same paths
``create_model`` gives on visattn's ResNets. With no attention placed, an adapted block computes
exactly what the original did; with ``init: identity`` the network still does, so pretrained
weights keep their accuracy at insertion.

Supported blocks: ``torchvision.models.resnet.BasicBlock`` / ``Bottleneck`` (adopted into
visattn's :class:`~visattn.models.resnet.BasicBlock` / ``Bottleneck``, same forward) and
``timm.models.resnet.BasicBlock`` / ``Bottleneck`` (:class:`TimmBasicBlock` /
:class:`TimmBottleneck`, which keep timm's drop-block, anti-aliasing, built-in ``se`` attention
and drop-path; the ``standard`` slot follows timm's own ``se``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
import torch.nn as nn
import torchvision.models.resnet as tv
from timm.models import resnet as timm_resnet

from .placement import apply_placements
from .resnet import BasicBlock, Bottleneck, SlottedBlock
from .sites import Adapter, InjectionPlan

__all__ = ["ADAPTERS", "TimmBasicBlock", "TimmBottleneck", "inject"]

_OPTIONAL = ("downsample", "se", "drop_path")  # attributes that may be None instead of a module


def _adopt(cls: type[SlottedBlock], block: nn.Module) -> Any:
    """A ``cls`` holding ``block``'s layers (not copied), with its widths: ``conv1``'s input, the
    output of the conv slot (the middle conv), the last conv's output (``conv3`` of a bottleneck,
    ``conv2`` of a basic block)."""
    last = block.conv3 if hasattr(block, "conv3") else block.conv2
    cin, cout = block.conv1.in_channels, last.out_channels
    mid = getattr(block, cls.conv_slot).out_channels
    new = cls.__new__(cls)
    nn.Module.__init__(new)
    for name, child in block.named_children():
        new.add_module(name, child)
    for name in _OPTIONAL:
        if name not in new._modules:
            setattr(new, name, getattr(block, name, None))
    if new.drop_path is None:  # timm's "off"; the slotted forward calls a module
        new.drop_path = nn.Identity()
    new.stride = getattr(block, "stride", 1)
    new.in_channels, new.mid_channels, new.out_channels = cin, mid, cout
    new.init_slots()
    new.train(block.training)
    return new


def _torchvision_basic(block: nn.Module) -> BasicBlock:
    new = _adopt(BasicBlock, block)
    new.drop_path = nn.Identity()
    return new


def _torchvision_bottleneck(block: nn.Module) -> Bottleneck:
    new = _adopt(Bottleneck, block)
    new.drop_path = nn.Identity()
    return new


class TimmBasicBlock(SlottedBlock):
    """timm's ``BasicBlock`` with attention slots (built by adopting a timm block's layers).

    ``inner`` is after ``aa(act1(drop_block(bn1(conv1(x)))))``, ``prenorm`` between ``conv2``
    and ``bn2``; ``standard`` after timm's own
    ``se`` (if any), before drop-path; position ``conv`` replaces ``conv1`` (``bn1`` stays).
    """

    conv_slot = "conv1"
    inner_first = True

    @classmethod
    def adopt(cls, block: nn.Module) -> TimmBasicBlock:
        return _adopt(cls, block)

    def split(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return x, (x if self.downsample is None else self.downsample(x))

    def branch_start(self, x: torch.Tensor) -> torch.Tensor:
        return self.aa(self.act1(self.drop_block(self.bn1(self.conv1(x)))))

    def branch_middle(self, x: torch.Tensor) -> torch.Tensor:
        return self.conv2(x)

    def branch_end(self, x: torch.Tensor) -> torch.Tensor:
        out = self.bn2(x)
        if self.se is not None:
            out = self.se(out)
        return out

    def finish(self, x: torch.Tensor) -> torch.Tensor:
        return self.act2(x)


class TimmBottleneck(SlottedBlock):
    """timm's ``Bottleneck`` with attention slots (built by adopting a timm block's layers).

    ``prenorm`` is between ``conv2`` and ``bn2``, ``inner`` after
    ``aa(act2(drop_block(bn2(conv2(.)))))``; ``standard`` after timm's own
    ``se`` (if any), before drop-path; position ``conv`` replaces ``conv2`` (``bn2`` stays; with
    anti-aliasing timm's ``conv2`` has stride 1 and ``aa`` downsamples, so the block does too).
    """

    conv_slot = "conv2"

    @classmethod
    def adopt(cls, block: nn.Module) -> TimmBottleneck:
        return _adopt(cls, block)

    def split(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return x, (x if self.downsample is None else self.downsample(x))

    def branch_start(self, x: torch.Tensor) -> torch.Tensor:
        return self.conv2(self.act1(self.bn1(self.conv1(x))))

    def branch_middle(self, x: torch.Tensor) -> torch.Tensor:
        return self.aa(self.act2(self.drop_block(self.bn2(x))))

    def branch_end(self, x: torch.Tensor) -> torch.Tensor:
        out = self.bn3(self.conv3(x))
        if self.se is not None:
            out = self.se(out)
        return out

    def finish(self, x: torch.Tensor) -> torch.Tensor:
        return self.act3(x)


#: foreign block class -> function returning a slotted block that shares its layers
ADAPTERS: dict[type, Adapter] = {
    tv.BasicBlock: _torchvision_basic,
    tv.Bottleneck: _torchvision_bottleneck,
    timm_resnet.BasicBlock: TimmBasicBlock.adopt,
    timm_resnet.Bottleneck: TimmBottleneck.adopt,
}


def inject(
    model: nn.Module,
    placement: Any,
    *,
    dry_run: bool = False,
    input_size: Sequence[int] | None = None,
) -> list[str] | InjectionPlan:
    """Place attention into an existing CNN in place; returns the module paths added.

    Args:
        model: any ``nn.Module`` CNN for placements by pattern (``after``, ``before``,
            ``replace``); a ``torchvision.models.ResNet``, a ``timm.models.ResNet`` or a visattn
            ResNet for placements by ``stages``/``blocks``.
        placement: one placement (a mapping with the keys of
            :data:`~visattn.models.placement.PLACEMENT_KEYS`, or a
            :class:`~visattn.models.placement.Placement`) or a list of them.
        dry_run: return the :class:`~visattn.models.sites.InjectionPlan` (paths, channels,
            spatial sizes, skipped modules with reasons) and leave the model unchanged.
        input_size: ``(C, H, W)`` of the probe forward that pattern placements run (default:
            the model's timm ``pretrained_cfg``/``default_cfg`` input size, else
            ``(3, 224, 224)``); ResNet placements need no probe.

    Returns:
        The added module paths in placement order, e.g. ``["layer1.0.attn_standard", ...,
        "layer3.attn_stage"]`` or ``["features.4.block.3.attn_before", ...]``;
        ``model.get_submodule(path)`` is the block. The host's parameter names are unchanged:
        its original state_dict loads, with exactly the keys under these paths missing (except
        for ``replace``, where the replaced module's keys are gone).

    Raises:
        ValueError: a placement that is malformed or matches nothing (naming the closest module
            classes and paths), a module named by its path that cannot take a block, a block
            that cannot take its input, a missing stage, or a slot targeted twice. The model is
            left unchanged.
        KeyError: an unknown block name.
        TypeError: ``stages``/``blocks`` on a model without ResNet stages of supported blocks.
    """
    if placement is None:
        raise ValueError("inject: placement is None; pass a placement mapping or a list of them")
    out = apply_placements(
        model, placement, adapters=ADAPTERS, input_size=input_size, dry_run=dry_run
    )
    if not (out.blocks if dry_run else out):
        raise ValueError("inject: the placement list is empty; nothing to add")
    return out
