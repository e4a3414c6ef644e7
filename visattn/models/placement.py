"""Attention placement: a config that says which block goes where in a ResNet.

A placement is a :class:`Placement` (a frozen dataclass) or the same mapping in Python or YAML
(README, "Models and placement")::

    {"name": "se", "args": {"reduction": 16}, "stages": [2, 3], "blocks": "last",
     "position": "standard", "init": "default"}

``attention`` (the argument of ``create_model`` and ``inject``) is one placement, a list of them,
or ``None``. :func:`normalize_placements` turns it into a list of :class:`Placement` (validating
each mapping once; a :class:`Placement` is already valid and passes through);
:func:`apply_placements` fills the slots of a model (see
:class:`visattn.models.resnet.SlottedBlock`).

Where blocks go (module paths are predictable; tests rely on them):

* a block position ``p`` of block ``j`` of stage ``i``: ``layer{i}.{j}.attn_{p}``;
* position ``conv`` of block ``j`` of stage ``i``: the block *replaces* the residual branch's
  middle conv, ``layer{i}.{j}.conv2`` in a Bottleneck (its 3x3) and ``layer{i}.{j}.conv1`` in a
  BasicBlock (its first 3x3), with that conv's input and output channels and stride; the norm
  after it stays. Only blocks registered with ``replaces_conv=True`` can go there;
* position ``stage`` of stage ``i``: ``layer{i}.attn_stage``.

Rules:

* ``stages`` are 1-based; a stage the model lacks is an error.
* ``blocks`` indices are 0-based within each selected stage, negative from the end; an index out
  of range for any selected stage is an error (nothing is placed partially or silently).
* Two placements that target the same slot, or a slot already holding a block, are an error:
  one slot holds one block, so module paths never shift. Placements are applied in list order,
  and the returned paths follow that order (stage by stage, block by block).
* The whole placement is validated and every block is built before the model is changed, so a
  failing placement leaves the model untouched.
* ``init: identity`` builds each block so that it computes exactly its input when inserted
  (``create_block(..., init="identity")``): a trained network keeps its function. It does not
  apply to position ``conv``, where the block replaces a trained conv.
"""

from __future__ import annotations

import dataclasses
import difflib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch.nn as nn

from ..blocks import block_info, create_block, list_blocks
from ..blocks.identity import INITS
from .resnet import ResNetStage, SlottedBlock

__all__ = [
    "PLACEMENT_KEYS",
    "POSITIONS",
    "Placement",
    "apply_placements",
    "find_stages",
    "normalize_placements",
    "placements_to_config",
    "plan_placements",
]

POSITIONS = ("standard", "pre", "post", "identity", "inner", "stage", "conv", "output")
PLACEMENT_KEYS = ("name", "args", "stages", "blocks", "position", "init")
_BLOCK_WORDS = ("all", "first", "last")
_CONV_ARGS = ("out_channels", "stride")  # set by position 'conv' from the conv it replaces

# converts a foreign residual block (torchvision, timm) into a SlottedBlock sharing its layers
Adapter = Callable[[nn.Module], SlottedBlock]


class PlacementError(ValueError):
    """A malformed placement; the message names the placement (index and block) and the key."""

    def __init__(self, detail: str, name: str | None = None, index: int | None = None) -> None:
        self.detail, self.name, self.index = detail, name, index
        where = "attention placement" + ("" if index is None else f" #{index}")
        where += "" if name is None else f" ({name!r})"
        super().__init__(f"{where}: {detail}")


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _stages(value: Any) -> str | tuple[int, ...]:
    if value is None or value == "all":
        return "all"
    stages = [value] if _is_int(value) else value
    if (
        isinstance(stages, (str, bytes))
        or not isinstance(stages, Sequence)
        or not stages
        or not all(_is_int(s) and s >= 1 for s in stages)
    ):
        raise PlacementError(
            f"'stages' must be 'all' or a non-empty list of 1-based stage indices, got {value!r}"
        )
    if len(set(stages)) != len(stages):
        raise PlacementError(f"'stages' lists a stage twice: {list(stages)}")
    return tuple(sorted(stages))


def _blocks(value: Any, position: str) -> str | tuple[int, ...] | None:
    if position == "stage":
        if value is not None:
            raise PlacementError(
                "'blocks' does not apply to position 'stage' (one block after each selected "
                "stage); remove 'blocks' or choose a block position"
            )
        return None
    value = "all" if value is None else value
    if isinstance(value, str):
        if value not in _BLOCK_WORDS:
            raise PlacementError(
                f"'blocks' must be one of {list(_BLOCK_WORDS)} or a list of block indices, "
                f"got {value!r}"
            )
        return value
    blocks = [value] if _is_int(value) else value
    if not isinstance(blocks, Sequence) or not blocks or not all(_is_int(b) for b in blocks):
        raise PlacementError(
            f"'blocks' must be one of {list(_BLOCK_WORDS)} or a non-empty list of 0-based block "
            f"indices, got {value!r}"
        )
    return tuple(blocks)


def _conv_blocks() -> list[str]:
    return [n for n in list_blocks() if block_info(n).replaces_conv]


@dataclass(frozen=True)
class Placement:
    """Where one attention block goes: block ``name`` with options ``args`` at ``position`` of
    the selected ``blocks`` of the selected ``stages``, initialised as ``init`` says.

    Built directly (``Placement("se", stages=[2, 3])``) or from a mapping
    (:meth:`from_config`); either way the fields are validated and normalised once:

    * ``args``: a dict of block options (``None`` -> ``{}``);
    * ``stages``: ``"all"`` or a sorted tuple of 1-based stage indices (an int -> one stage);
    * ``blocks``: ``"all"`` (also for ``None``), ``"first"``, ``"last"`` or a tuple of 0-based
      indices (negative from the end; an int -> one block); ``None`` for position ``stage``,
      where it does not apply;
    * ``position``: one of :data:`POSITIONS` (``None`` -> ``"standard"``);
    * ``init``: ``"default"`` (the paper's initialisation) or ``"identity"`` (the block computes
      exactly its input when inserted).

    :meth:`to_dict` gives the plain mapping back (lists, not tuples), so
    ``Placement.from_config(p.to_dict()) == p``.

    Raises:
        ValueError: a malformed field, naming it (:class:`PlacementError`).
        KeyError: an unknown block name (the registry's error, naming close matches).
    """

    # the annotations say what is accepted (so LightningCLI can type a placement); the fields
    # hold the normalised form described above
    name: str
    args: dict[str, Any] | None = field(default_factory=dict)
    stages: str | int | list[int] | None = "all"
    blocks: str | int | list[int] | None = None
    position: str | None = "standard"
    init: str | None = "default"

    def __post_init__(self) -> None:
        name = self.name
        if not isinstance(name, str) or not name:
            raise PlacementError(f"'name' (a registered block name) is required, got {name!r}")
        try:
            self._normalise()
        except PlacementError as e:
            raise PlacementError(e.detail, name) from None

    def _normalise(self) -> None:
        info = block_info(self.name)  # unknown names raise the registry's KeyError
        args = {} if self.args is None else self.args
        if not isinstance(args, Mapping) or not all(isinstance(k, str) for k in args):
            raise PlacementError(f"'args' must be a mapping of block options, got {args!r}")
        if "init" in args:
            raise PlacementError(
                "'init' is a placement key, not a block option: move it out of 'args'"
            )
        position = "standard" if self.position is None else self.position
        if position not in POSITIONS:
            close = difflib.get_close_matches(str(position), POSITIONS, n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            raise PlacementError(
                f"unknown position {position!r}{hint}; valid positions: {list(POSITIONS)}"
            )
        init = "default" if self.init is None else self.init
        if init not in INITS:
            raise PlacementError(f"'init' must be one of {list(INITS)}, got {init!r}")
        if position == "conv":
            if not info.replaces_conv:
                can = ", ".join(repr(n) for n in _conv_blocks()) or "none is registered"
                raise PlacementError(
                    f"block {self.name!r} cannot replace a conv (position 'conv'); blocks that "
                    f"can: {can}. Choose another position for {self.name!r}"
                )
            fixed = [k for k in _CONV_ARGS if k in args]
            if fixed:
                raise PlacementError(
                    f"position 'conv' takes {', '.join(repr(k) for k in fixed)} from the conv it "
                    "replaces; remove it from 'args'"
                )
            if init == "identity":
                raise PlacementError(
                    "init 'identity' does not apply to position 'conv': the block replaces a "
                    "conv, so there is no input to pass through; use init 'default'"
                )
        set_ = object.__setattr__  # frozen: normalise in place, once, at construction
        set_(self, "args", dict(args))
        set_(self, "position", position)
        set_(self, "init", init)
        set_(self, "stages", _stages(self.stages))
        set_(self, "blocks", _blocks(self.blocks, position))

    @classmethod
    def from_config(
        cls, config: Placement | Mapping[str, Any], index: int | None = None
    ) -> Placement:
        """A :class:`Placement` from a mapping with the keys :data:`PLACEMENT_KEYS` (a
        :class:`Placement` is returned as it is). ``index`` numbers the placement in messages."""
        if isinstance(config, Placement):
            return config
        if not isinstance(config, Mapping):
            raise PlacementError(
                f"must be a mapping with keys {list(PLACEMENT_KEYS)}, got {type(config).__name__}",
                index=index,
            )
        unknown = [k for k in config if k not in PLACEMENT_KEYS]
        if unknown:
            hints = [difflib.get_close_matches(str(k), PLACEMENT_KEYS, n=1) for k in unknown]
            said = ", ".join(
                f"{k!r}" + (f" (did you mean {h[0]!r}?)" if h else "")
                for k, h in zip(unknown, hints)
            )
            raise PlacementError(
                f"unknown key {said}; valid keys: {list(PLACEMENT_KEYS)}", index=index
            )
        if "name" not in config:
            raise PlacementError("'name' (a registered block name) is required", index=index)
        try:
            return cls(**config)
        except PlacementError as e:
            raise PlacementError(e.detail, e.name, index) from None

    def to_dict(self) -> dict[str, Any]:
        """The placement as a plain mapping (every key; lists, not tuples), as in YAML."""
        out = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        out["args"] = dict(self.args)
        for key in ("stages", "blocks"):
            if isinstance(out[key], tuple):
                out[key] = list(out[key])
        return out


def normalize_placements(attention: Any) -> list[Placement]:
    """``attention`` (a placement, a mapping, a list of them, or ``None``) as a list of
    :class:`Placement`. Mappings are validated here; :class:`Placement` objects pass through
    unchanged, so normalising twice costs nothing and gives the same list.

    Raises:
        ValueError: a malformed placement (unknown key or position, bad stages/blocks, ``blocks``
            with position ``stage``, a block that cannot replace a conv at position ``conv``).
        KeyError: an unknown block name (the registry's error, naming close matches).
    """
    if attention is None:
        return []
    if isinstance(attention, (Mapping, Placement)):
        attention = [attention]
    if isinstance(attention, (str, bytes)) or not isinstance(attention, Sequence):
        raise ValueError(
            "attention must be a placement mapping, a list of them, or None, got "
            f"{type(attention).__name__} {attention!r}"
        )
    return [Placement.from_config(p, i) for i, p in enumerate(attention)]


def placements_to_config(attention: Any) -> dict[str, Any] | list[dict[str, Any]] | None:
    """``attention`` validated and written back as plain mappings (every key, as
    :meth:`Placement.to_dict`), keeping its shape: ``None``, one mapping, or a list. This is the
    form to store in configs and hyperparameters (YAML- and JSON-safe)."""
    if attention is None:
        return None
    out = [p.to_dict() for p in normalize_placements(attention)]
    return out[0] if isinstance(attention, (Mapping, Placement)) else out


def find_stages(model: nn.Module) -> list[tuple[str, nn.Module]]:
    """The stages ``layer1, layer2, ...`` of a ResNet-like model, as ``(name, module)``."""
    names = getattr(model, "stage_names", None)
    if names is None:
        names = []
        while isinstance(getattr(model, f"layer{len(names) + 1}", None), nn.Module):
            names.append(f"layer{len(names) + 1}")
    stages = [(n, getattr(model, n)) for n in names]
    if not stages:
        raise TypeError(
            f"{type(model).__name__} has no ResNet stages (layer1, layer2, ...); attention "
            "placement works on visattn, torchvision and timm ResNets"
        )
    return stages


@dataclass
class _Slot:
    """One slot a placement fills: the module that receives the block (``host``, an adapted
    block or the stage container) and the attribute (``attr``) it goes into."""

    index: int  # of the placement in the normalised list
    placement: Placement
    stage: int  # 0-based
    stage_name: str
    block: int | None  # 0-based within the stage; None for the stage slot
    attr: str  # attn_<position>, the conv's attribute name, or attn_stage
    host: nn.Module | None  # the SlottedBlock to fill; None for a stage slot (set at install)
    channels: int
    options: dict[str, Any] = field(default_factory=dict)  # out_channels and stride for 'conv'

    @property
    def path(self) -> str:
        parts = [self.stage_name] + ([] if self.block is None else [str(self.block)])
        return ".".join([*parts, self.attr])

    @property
    def key(self) -> tuple[int, int | None, str]:
        return (self.stage, self.block, self.attr)


def _select_blocks(spec: Any, n: int, where: str, stage_name: str) -> list[int]:
    if spec == "all":
        return list(range(n))
    if spec == "first":
        return [0]
    if spec == "last":
        return [n - 1]
    out = []
    for b in spec:
        if not -n <= b < n:
            raise ValueError(
                f"{where}: block index {b} matches no block of stage {stage_name} "
                f"({n} blocks: indices 0..{n - 1} or {-n}..-1)"
            )
        if b % n not in out:
            out.append(b % n)
    return sorted(out)


def _slotted(block: nn.Module, path: str, adapters: Mapping[type, Adapter]) -> SlottedBlock:
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


def _stage_blocks(stage: nn.Module) -> list[nn.Module]:
    return list(stage) if isinstance(stage, ResNetStage) else list(stage.children())


def _conv_slot(host: SlottedBlock, where: str, path: str) -> tuple[str, int, dict[str, Any]]:
    """The attribute, input channels and ``out_channels``/``stride`` of the conv that position
    ``conv`` replaces in ``host``."""
    attr = host.conv_slot
    conv = getattr(host, attr)
    if not isinstance(conv, nn.Conv2d):
        raise ValueError(
            f"{where}: slot {path}.{attr} already holds a {type(conv).__name__}; a slot holds one "
            "block"
        )
    if conv.stride[0] != conv.stride[1]:
        raise ValueError(f"{where}: {path}.{attr} has a non-square stride {conv.stride}")
    return attr, conv.in_channels, {"out_channels": conv.out_channels, "stride": conv.stride[0]}


def plan_placements(
    model: nn.Module,
    attention: Any,
    *,
    adapters: Mapping[type, Adapter] | None = None,
    model_name: str | None = None,
) -> tuple[list[_Slot], dict[tuple[int, int], SlottedBlock]]:
    """Resolve placements against ``model`` without changing it: the slots to fill (with the
    channels each block needs) and the adapted blocks to install, keyed by ``(stage, block)``
    (0-based). Raises ``ValueError`` for a placement the model cannot take."""
    placements = normalize_placements(attention)
    if not placements:
        return [], {}
    adapters = adapters or {}
    label = model_name or type(model).__name__
    stages = find_stages(model)
    adapted: dict[tuple[int, int], SlottedBlock] = {}
    slots: list[_Slot] = []
    for k, p in enumerate(placements):
        where = f"attention placement #{k} ({p.name!r})"
        wanted = range(1, len(stages) + 1) if p.stages == "all" else p.stages
        for s in wanted:
            if s > len(stages):
                raise ValueError(
                    f"{where}: stage {s} does not exist; {label} has stages 1..{len(stages)}"
                )
            stage_name, stage = stages[s - 1]
            blocks = _stage_blocks(stage)
            if p.position == "stage":
                # the channel count only: a stage block does not need the last block adapted
                last = _slotted(blocks[-1], f"{stage_name}.{len(blocks) - 1}", adapters)
                slots.append(
                    _Slot(k, p, s - 1, stage_name, None, "attn_stage", None, last.out_channels)
                )
                continue
            for j in _select_blocks(p.blocks, len(blocks), where, stage_name):
                if (s - 1, j) not in adapted:
                    adapted[(s - 1, j)] = _slotted(blocks[j], f"{stage_name}.{j}", adapters)
                host = adapted[(s - 1, j)]
                if p.position == "conv":
                    attr, channels, options = _conv_slot(host, where, f"{stage_name}.{j}")
                else:
                    attr, options = f"attn_{p.position}", {}
                    channels = host.slot_channels(p.position)
                slots.append(_Slot(k, p, s - 1, stage_name, j, attr, host, channels, options))
    seen: dict[tuple[int, int | None, str], _Slot] = {}
    for t in slots:
        if t.key in seen:
            other = seen[t.key]
            raise ValueError(
                f"attention placements #{other.index} ({other.placement.name!r}) and #{t.index} "
                f"({t.placement.name!r}) both target {t.path}; a slot holds one block: change "
                "'position', 'stages' or 'blocks' of one of them"
            )
        seen[t.key] = t
        owner = stages[t.stage][1] if t.host is None else t.host
        current = getattr(owner, t.attr, None)
        if current is not None and not isinstance(current, (nn.Identity, nn.Conv2d)):
            raise ValueError(
                f"attention placement #{t.index} ({t.placement.name!r}): slot {t.path} already "
                f"holds a {type(current).__name__}; a slot holds one block"
            )
    return slots, adapted


def _reference_param(module: nn.Module) -> Any:
    return next(iter(module.parameters()), None)


def apply_placements(
    model: nn.Module,
    attention: Any,
    *,
    adapters: Mapping[type, Adapter] | None = None,
    model_name: str | None = None,
) -> list[str]:
    """Fill the attention slots of ``model`` in place; returns the module paths filled, in
    placement order. Foreign residual blocks are first replaced by slotted equivalents via
    ``adapters`` (see :mod:`visattn.models.inject`); stages that receive a ``stage`` block are
    turned into :class:`ResNetStage` (same child names, so parameter names do not change)."""
    slots, adapted = plan_placements(model, attention, adapters=adapters, model_name=model_name)
    if not slots:
        return []
    stages = find_stages(model)
    built: list[nn.Module] = []
    for t in slots:  # build everything first: a bad option leaves the model untouched
        near = stages[t.stage][1] if t.host is None else t.host
        ref = _reference_param(near)
        factory = {} if ref is None else {"device": ref.device, "dtype": ref.dtype}
        p = t.placement
        try:
            blk = create_block(p.name, t.channels, init=p.init, **t.options, **p.args, **factory)
        except (ValueError, TypeError) as e:
            raise type(e)(
                f"attention placement #{t.index} at {t.path} ({t.channels} channels): {e}"
            ) from e
        blk.train(near.training)
        built.append(blk)
    # install the adapted blocks, then the stage containers, then fill the slots
    for (s, j), blk in adapted.items():
        stages[s][1][j] = blk
    for t in slots:
        if t.block is None:
            stage_name, stage = stages[t.stage]
            if not isinstance(stage, ResNetStage):
                new_stage = ResNetStage(stage.children())
                new_stage.train(stage.training)
                setattr(model, stage_name, new_stage)
                stages[t.stage] = (stage_name, new_stage)
    for t, blk in zip(slots, built):
        setattr(stages[t.stage][1] if t.host is None else t.host, t.attr, blk)
    return [t.path for t in slots]
