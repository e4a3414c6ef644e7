"""Attention placement: a config that says which block goes where in a ResNet.

A placement is a mapping (see ``shared/API.md``)::

    {"name": "se", "args": {"reduction": 16}, "stages": [2, 3], "blocks": "last",
     "position": "standard"}

``attention`` (the argument of ``create_model`` and ``inject``) is one placement, a list of them,
or ``None``. :func:`normalize_placements` validates and fills defaults; :func:`apply_placements`
fills the slots of a model (see :class:`visattn.models.resnet.SlottedBlock`).

Where blocks go (module paths are predictable; tests rely on them):

* a block position ``p`` of block ``j`` of stage ``i``: ``layer{i}.{j}.attn_{p}``;
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
"""

from __future__ import annotations

import difflib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import torch.nn as nn

from ..blocks import block_info, create_block
from .resnet import ResNetStage, SlottedBlock

__all__ = [
    "PLACEMENT_KEYS",
    "POSITIONS",
    "apply_placements",
    "find_stages",
    "normalize_placements",
    "plan_placements",
]

POSITIONS = ("standard", "pre", "post", "identity", "inner", "stage")
PLACEMENT_KEYS = ("name", "args", "stages", "blocks", "position")
_BLOCK_WORDS = ("all", "first", "last")

# converts a foreign residual block (torchvision, timm) into a SlottedBlock sharing its layers
Adapter = Callable[[nn.Module], SlottedBlock]


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _normalize_one(p: Any, i: int) -> dict[str, Any]:
    where = f"attention placement #{i}"
    if not isinstance(p, Mapping):
        raise ValueError(
            f"{where} must be a mapping with keys {list(PLACEMENT_KEYS)}, got {type(p).__name__}"
        )
    unknown = [k for k in p if k not in PLACEMENT_KEYS]
    if unknown:
        hints = [difflib.get_close_matches(str(k), PLACEMENT_KEYS, n=1) for k in unknown]
        said = ", ".join(
            f"{k!r}" + (f" (did you mean {h[0]!r}?)" if h else "") for k, h in zip(unknown, hints)
        )
        raise ValueError(f"{where}: unknown key {said}; valid keys: {list(PLACEMENT_KEYS)}")
    name = p.get("name")
    if not isinstance(name, str) or not name:
        raise ValueError(f"{where}: 'name' (a registered block name) is required, got {name!r}")
    where = f"attention placement #{i} ({name!r})"
    block_info(name)  # unknown names raise the registry's KeyError with close matches

    args = p.get("args")
    args = {} if args is None else args
    if not isinstance(args, Mapping) or not all(isinstance(k, str) for k in args):
        raise ValueError(f"{where}: 'args' must be a mapping of block options, got {args!r}")

    position = p.get("position", "standard")
    position = "standard" if position is None else position
    if position not in POSITIONS:
        close = difflib.get_close_matches(str(position), POSITIONS, n=1)
        hint = f" (did you mean {close[0]!r}?)" if close else ""
        raise ValueError(
            f"{where}: unknown position {position!r}{hint}; valid positions: {list(POSITIONS)}"
        )

    stages = p.get("stages")
    if stages is None or stages == "all":
        stages = "all"
    else:
        stages = [stages] if _is_int(stages) else stages
        if (
            isinstance(stages, (str, bytes))
            or not isinstance(stages, Sequence)
            or not stages
            or not all(_is_int(s) and s >= 1 for s in stages)
        ):
            raise ValueError(
                f"{where}: 'stages' must be 'all' or a non-empty list of 1-based stage indices, "
                f"got {p.get('stages')!r}"
            )
        if len(set(stages)) != len(stages):
            raise ValueError(f"{where}: 'stages' lists a stage twice: {list(stages)}")
        stages = sorted(stages)

    blocks = p.get("blocks")
    if position == "stage":
        if blocks is not None:
            raise ValueError(
                f"{where}: 'blocks' does not apply to position 'stage' (one block after each "
                "selected stage); remove 'blocks' or choose a block position"
            )
    else:
        blocks = "all" if blocks is None else blocks
        blocks = [blocks] if _is_int(blocks) else blocks
        if isinstance(blocks, str):
            if blocks not in _BLOCK_WORDS:
                raise ValueError(
                    f"{where}: 'blocks' must be one of {list(_BLOCK_WORDS)} or a list of block "
                    f"indices, got {blocks!r}"
                )
        elif not isinstance(blocks, Sequence) or not blocks or not all(_is_int(b) for b in blocks):
            raise ValueError(
                f"{where}: 'blocks' must be one of {list(_BLOCK_WORDS)} or a non-empty list of "
                f"0-based block indices, got {blocks!r}"
            )
        else:
            blocks = list(blocks)
    return {
        "name": name,
        "args": dict(args),
        "stages": stages,
        "blocks": blocks,
        "position": position,
    }


def normalize_placements(attention: Any) -> list[dict[str, Any]]:
    """Validate an attention placement (a mapping, a list of mappings, or ``None``) and fill the
    defaults of ``shared/API.md``.

    Returns a list of dicts with every key present: ``name``, ``args`` (dict), ``stages``
    (``"all"`` or a sorted list of ints), ``blocks`` (``"all"|"first"|"last"`` or a list of
    ints; ``None`` for position ``stage``) and ``position``. Idempotent.

    Raises:
        ValueError: a malformed placement (unknown key or position, bad stages/blocks, ``blocks``
            with position ``stage``).
        KeyError: an unknown block name (the registry's error, naming close matches).
    """
    if attention is None:
        return []
    if isinstance(attention, Mapping):
        attention = [attention]
    if isinstance(attention, (str, bytes)) or not isinstance(attention, Sequence):
        raise ValueError(
            "attention must be a placement mapping, a list of them, or None, got "
            f"{type(attention).__name__} {attention!r}"
        )
    return [_normalize_one(p, i) for i, p in enumerate(attention)]


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
class _Target:
    placement: int  # index in the normalized list
    name: str
    args: dict[str, Any]
    path: str  # module path of the slot
    stage: int  # 0-based
    block: int | None  # 0-based, None for the stage slot
    position: str
    channels: int


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


def _slotted(
    block: nn.Module, path: str, adapters: Mapping[type, Adapter], cache: dict[str, SlottedBlock]
) -> SlottedBlock:
    if isinstance(block, SlottedBlock):
        return block
    if path not in cache:
        adapter = adapters.get(type(block))
        if adapter is None:
            supported = ", ".join(sorted(f"{t.__module__}.{t.__qualname__}" for t in adapters))
            raise TypeError(
                f"{path} is a {type(block).__module__}.{type(block).__qualname__}, not a residual "
                f"block attention can be placed in; supported: visattn blocks"
                + (f", {supported}" if supported else "")
            )
        cache[path] = adapter(block)
    return cache[path]


def _stage_blocks(stage: nn.Module) -> list[nn.Module]:
    return list(stage) if isinstance(stage, ResNetStage) else list(stage.children())


def plan_placements(
    model: nn.Module,
    attention: Any,
    *,
    adapters: Mapping[type, Adapter] | None = None,
    model_name: str | None = None,
) -> tuple[list[_Target], dict[str, SlottedBlock]]:
    """Resolve placements against ``model`` without changing it: the slots to fill (with the
    channels each block needs) and the adapted blocks to install. Raises ``ValueError`` for a
    placement the model cannot take."""
    placements = normalize_placements(attention)
    if not placements:
        return [], {}
    adapters = adapters or {}
    label = model_name or type(model).__name__
    stages = find_stages(model)
    cache: dict[str, SlottedBlock] = {}
    targets: list[_Target] = []
    for k, p in enumerate(placements):
        where = f"attention placement #{k} ({p['name']!r})"
        wanted = range(1, len(stages) + 1) if p["stages"] == "all" else p["stages"]
        for s in wanted:
            if s > len(stages):
                raise ValueError(
                    f"{where}: stage {s} does not exist; {label} has stages 1..{len(stages)}"
                )
            stage_name, stage = stages[s - 1]
            blocks = _stage_blocks(stage)
            if p["position"] == "stage":
                # the channel count only: a stage block does not need the last block adapted
                last = _slotted(blocks[-1], f"{stage_name}.{len(blocks) - 1}", adapters, {})
                targets.append(
                    _Target(
                        k,
                        p["name"],
                        p["args"],
                        f"{stage_name}.attn_stage",
                        s - 1,
                        None,
                        "stage",
                        last.out_channels,
                    )
                )
                continue
            for j in _select_blocks(p["blocks"], len(blocks), where, stage_name):
                blk = _slotted(blocks[j], f"{stage_name}.{j}", adapters, cache)
                targets.append(
                    _Target(
                        k,
                        p["name"],
                        p["args"],
                        f"{stage_name}.{j}.attn_{p['position']}",
                        s - 1,
                        j,
                        p["position"],
                        blk.slot_channels(p["position"]),
                    )
                )
    seen: dict[str, _Target] = {}
    for t in targets:
        if t.path in seen:
            other = seen[t.path]
            raise ValueError(
                f"attention placements #{other.placement} ({other.name!r}) and #{t.placement} "
                f"({t.name!r}) both target {t.path}; a slot holds one block: change 'position', "
                "'stages' or 'blocks' of one of them"
            )
        seen[t.path] = t
        current = model.get_submodule(t.path) if _has_path(model, t.path) else None
        if current is not None and not isinstance(current, nn.Identity):
            raise ValueError(
                f"attention placement #{t.placement} ({t.name!r}): slot {t.path} already holds "
                f"a {type(current).__name__}; a slot holds one block"
            )
    return targets, cache


def _has_path(model: nn.Module, path: str) -> bool:
    try:
        model.get_submodule(path)
    except AttributeError:
        return False
    return True


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
    targets, adapted = plan_placements(model, attention, adapters=adapters, model_name=model_name)
    if not targets:
        return []
    stages = find_stages(model)
    built: list[nn.Module] = []
    for t in targets:  # build everything first: a bad option leaves the model untouched
        host = (
            stages[t.stage][1]
            if t.block is None
            else adapted.get(
                f"{stages[t.stage][0]}.{t.block}", _stage_blocks(stages[t.stage][1])[t.block]
            )
        )
        ref = _reference_param(host)
        factory = {} if ref is None else {"device": ref.device, "dtype": ref.dtype}
        try:
            blk = create_block(t.name, t.channels, **t.args, **factory)
        except (ValueError, TypeError) as e:
            raise type(e)(
                f"attention placement #{t.placement} at {t.path} ({t.channels} channels): {e}"
            ) from e
        blk.train(host.training)
        built.append(blk)
    # install adapted blocks, then the stage containers, then fill the slots
    for path, blk in adapted.items():
        stage_name, j = path.rsplit(".", 1)
        stage = getattr(model, stage_name)
        stage[int(j)] = blk
    for t in targets:
        if t.block is None:
            stage_name, stage = stages[t.stage][0], getattr(model, stages[t.stage][0])
            if not isinstance(stage, ResNetStage):
                new_stage = ResNetStage(stage.children())
                new_stage.train(stage.training)
                setattr(model, stage_name, new_stage)
    for t, blk in zip(targets, built):
        parent_path, slot = t.path.rsplit(".", 1)
        setattr(model.get_submodule(parent_path), slot, blk)
    return [t.path for t in targets]
