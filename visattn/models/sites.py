"""Sites: the places a placement puts attention blocks, and how a block is installed there.

One mechanism serves every backbone. A placement is resolved (by
:mod:`visattn.models.placement` for ResNet stages and blocks, by :mod:`visattn.models.patterns`
for ``after``/``before``/``replace`` patterns) into a list of :class:`Site`; every block is then
built and checked, and only when all of them are ready is the model changed (:func:`install`).
The kinds of site:

* ``slot``: an ``attn_<position>`` slot (an ``nn.Identity`` called by the forward) of a residual
  block with slots (:class:`~visattn.models.resnet.SlottedBlock`); a torchvision or timm block is
  first replaced by a slotted block that takes over its layers under their own names. Position
  ``conv`` is a slot too: the attribute of the middle conv, which the block replaces.
* ``stage``: the ``attn_stage`` slot of a :class:`~visattn.models.resnet.ResNetStage` (a plain
  ``nn.Sequential`` stage is turned into one, with the same child names).
* ``after`` / ``before``: any module. The block becomes a child of that module (``attn_after``
  or ``attn_before``) and a forward hook (``before``: a forward pre-hook) on the module applies
  it to the module's output (``before``: its first input). A container's forward may run every
  child, so a site on a stock ``nn.Sequential`` moves to its last child (``before``: its first
  child), which sees the same tensor; other containers are refused
  (:mod:`visattn.models.patterns`).
* ``replace``: the module at that path is swapped for the block (``replace: se``).

Why hooks, not wrappers, for ``after``/``before``: a hook leaves the host's module objects where
they are, so parameter names do not change (the original state_dict loads, only the block's keys
are new) and attributes that frameworks route by stay on the same object (ultralytics reads
``i``, ``f``, ``type`` and ``np`` from each layer of ``model.model``; a wrapper would hide them).
The block is a registered child, so ``state_dict``, ``.to()``, ``train()``/``eval()``,
``capture_attention`` and parameter groups see it. The hooks are two module-level functions that
read the block from the module they are called on (no closures, no references elsewhere), so a
model pickles (``torch.save`` of the whole module), deep-copies and traces (ONNX export,
``torch.jit.trace``, ``torch.fx``) with them. They are typed for TorchScript, which compiles a
module's forward hooks together with its forward (``torch.jit.script`` of the model runs the
blocks): the hooked module's forward takes one tensor and returns one, as every torchvision and
timm CNN block does.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.nn as nn

from ..constants import HOOK_SLOTS
from .resnet import ResNetStage, SlottedBlock

__all__ = [
    "AFTER",
    "BEFORE",
    "Adapter",
    "InjectionPlan",
    "PlannedBlock",
    "Site",
    "install",
    "run_after",
    "run_before",
    "slot_site",
    "slotted",
]

#: child names of the block placed after / before a module (its forward hooks call them)
AFTER, BEFORE = HOOK_SLOTS

# converts a foreign residual block (torchvision, timm) into a SlottedBlock sharing its layers
Adapter = Callable[[nn.Module], SlottedBlock]


def run_after(module: nn.Module, args: tuple[torch.Tensor], output: torch.Tensor) -> torch.Tensor:
    """Forward hook of an ``after`` site: ``module``'s output through ``module.attn_after``."""
    return module.attn_after(output)


def run_before(module: nn.Module, args: tuple[torch.Tensor]) -> tuple[torch.Tensor]:
    """Forward pre-hook of a ``before`` site: ``module``'s first input through
    ``module.attn_before`` (other inputs unchanged)."""
    return (module.attn_before(args[0]),) + args[1:]  # noqa: RUF005 (TorchScript: no *args)


@dataclass
class Site:
    """One place a placement fills.

    ``path`` is where the block will be (``model.get_submodule(path)`` after install);
    ``target`` the module the site belongs to (the residual block, stage, hooked or replaced
    module); ``host`` the module that receives the block as attribute ``attr`` (for ``replace``,
    the replaced module's parent).
    """

    index: int  # of the placement in the normalised list
    placement: Any  # a Placement
    kind: str  # slot, stage, after, before, replace
    path: str
    target: str
    host: nn.Module
    attr: str
    channels: int
    spatial: tuple[int, int] | None = None
    options: dict[str, Any] = field(default_factory=dict)  # out_channels/stride for 'conv'


@dataclass(frozen=True)
class PlannedBlock:
    """One block of an :class:`InjectionPlan`: the block ``name`` of placement ``placement``
    goes to ``path`` (``kind`` of site, at module ``target``) and sees ``channels`` channels at
    ``spatial`` ``(H, W)`` for the probe's input size (``None`` where not probed: ResNet slots)."""

    path: str
    target: str
    kind: str
    name: str
    placement: int
    channels: int
    spatial: tuple[int, int] | None


@dataclass(frozen=True)
class InjectionPlan:
    """What ``inject(..., dry_run=True)`` would do: the blocks (in the order they would be added)
    and the modules a pattern matched but that cannot take a block, each with the reason.
    ``input_size`` is the probe's ``(C, H, W)`` (``None`` when no probe ran)."""

    blocks: tuple[PlannedBlock, ...]
    skipped: tuple[tuple[str, str], ...] = ()
    input_size: tuple[int, ...] | None = None

    @property
    def paths(self) -> list[str]:
        """The module paths ``inject`` would return."""
        return [b.path for b in self.blocks]

    def __len__(self) -> int:
        return len(self.blocks)

    def __str__(self) -> str:
        size = "" if self.input_size is None else f" at input {tuple(self.input_size)}"
        lines = [f"{len(self.blocks)} block(s){size}:"]
        for b in self.blocks:
            hw = "" if b.spatial is None else f" x {b.spatial[0]}x{b.spatial[1]}"
            lines.append(f"  #{b.placement} {b.name:<10} {b.path}  ({b.channels} ch{hw})")
        if self.skipped:
            lines.append(f"skipped {len(self.skipped)} matched module(s):")
            lines += [f"  {path}: {reason}" for path, reason in self.skipped]
        return "\n".join(lines)


def slotted(block: nn.Module, path: str, adapters: Mapping[type, Adapter]) -> SlottedBlock:
    """``block`` as a :class:`SlottedBlock`: itself, or a new one adopting its layers."""
    if isinstance(block, SlottedBlock):
        return block
    adapter = adapters.get(type(block))
    if adapter is None:
        supported = ", ".join(sorted(f"{t.__module__}.{t.__qualname__}" for t in adapters))
        raise TypeError(
            f"{path} is a {type(block).__module__}.{type(block).__qualname__}, not a residual "
            f"block attention can be placed in; supported: visattn blocks"
            + (f", {supported}" if supported else "")
        )
    return adapter(block)


def _parent(model: nn.Module, path: str) -> tuple[nn.Module, str]:
    head, _, name = path.rpartition(".")
    return (model.get_submodule(head) if head else model), name


def install(
    model: nn.Module,
    sites: list[Site],
    blocks: list[nn.Module],
    adapted: Mapping[str, SlottedBlock],
) -> None:
    """Put ``blocks`` (one per site, built and checked) into ``model``. Adapted residual blocks
    replace their originals first (keyed by path), then plain stages that receive a ``stage``
    block become :class:`ResNetStage` (same child names, so parameter names do not change)."""
    for path, new in adapted.items():
        parent, name = _parent(model, path)
        setattr(parent, name, new)
    for site in sites:
        if site.kind == "stage" and not isinstance(site.host, ResNetStage):
            old = site.host
            new_stage = ResNetStage(old.children())
            new_stage.train(old.training)
            parent, name = _parent(model, site.target)
            setattr(parent, name, new_stage)
            for other in sites:  # every site on this stage now fills the new container
                if other.host is old:
                    other.host = new_stage
    for site, blk in zip(sites, blocks):
        if site.kind in ("after", "before"):
            site.host.add_module(site.attr, blk)
            if site.kind == "after":
                site.host.register_forward_hook(run_after)
            else:
                site.host.register_forward_pre_hook(run_before)
        else:
            setattr(site.host, site.attr, blk)


class PlacementError(ValueError):
    """A placement that is malformed or cannot apply to the model; the message names the
    placement (index and block) and what is wrong with it."""

    def __init__(self, detail: str, name: str | None = None, index: int | None = None) -> None:
        self.detail, self.name, self.index = detail, name, index
        where = "attention placement" + ("" if index is None else f" #{index}")
        where += "" if name is None else f" ({name!r})"
        super().__init__(f"{where}: {detail}")

    def naming(self, name: str | None = None, index: int | None = None) -> PlacementError:
        """This error with the placement's block name and index filled in where it had none
        (raised deep down, it is named by the caller that knows which placement it was)."""
        return PlacementError(
            self.detail,
            self.name if self.name is not None else name,
            self.index if self.index is not None else index,
        )


def _conv_slot(host: SlottedBlock, path: str) -> tuple[str, int, dict[str, Any]]:
    """The attribute, input channels and ``out_channels``/``stride`` of the conv that position
    ``conv`` replaces in ``host``."""
    attr = host.conv_slot
    conv = getattr(host, attr)
    if not isinstance(conv, nn.Conv2d):
        raise PlacementError(
            f"slot {path}.{attr} already holds a {type(conv).__name__}; a slot holds one block"
        )
    if conv.stride[0] != conv.stride[1]:
        raise PlacementError(f"{path}.{attr} has a non-square stride {conv.stride}")
    if conv.dilation != (1, 1):  # a dilated stage (output_stride < 32)
        raise PlacementError(
            f"{path}.{attr} is dilated {conv.dilation} (output_stride below 32); a block "
            "at position 'conv' would replace it undilated, changing what the network sees; "
            "build with output_stride=32 or place the block at another position"
        )
    return attr, conv.in_channels, {"out_channels": conv.out_channels, "stride": conv.stride[0]}


def slot_site(index: int, placement: Any, path: str, host: SlottedBlock) -> Site:
    """The site of ``placement``'s position (a
    :class:`~visattn.models.placement.Placement`) in the slotted residual block ``host`` (at
    ``path``): an ``attn_<position>`` slot, or the middle conv for position ``conv``. The one
    definition of a ResNet block's positions, whether ``stages``/``blocks`` or a pattern
    selected the block."""
    if placement.position == "conv":
        try:
            attr, channels, options = _conv_slot(host, path)
        except PlacementError as e:
            raise e.naming(placement.name, index) from None
    else:
        attr, options = f"attn_{placement.position}", {}
        channels = host.slot_channels(placement.position)
    path_ = f"{path}.{attr}"
    return Site(index, placement, "slot", path_, path, host, attr, channels, None, options)
