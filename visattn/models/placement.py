"""Attention placement: a config that says which block goes where in a ResNet or any CNN.

A placement is a :class:`Placement` (a frozen dataclass) or the same mapping in Python or YAML
(README, "Models and placement")::

    {"name": "se", "args": {"reduction": 16}, "stages": [2, 3], "blocks": "last",
     "position": "standard", "init": "default"}

``attention`` (the argument of ``create_model`` and ``inject``) is one placement, a list of them,
or ``None``. :func:`normalize_placements` turns it into a list of :class:`Placement` (validating
each mapping once; a :class:`Placement` is already valid and passes through);
:func:`apply_placements` fills the slots of a model (see
:class:`visattn.models.resnet.SlottedBlock`).

A placement selects its targets in one of two ways, and one mechanism fills what either
selects (:mod:`visattn.models.sites`: every target becomes a site, all blocks are built and
checked, then installed):

* ResNet keys ``stages``/``blocks``/``position``: residual blocks of ``layer1, layer2, ...``
  (below);
* pattern keys ``after``/``before``/``replace`` (:data:`PATTERN_KEYS`, see
  :mod:`visattn.models.patterns`): modules by class name or path glob, in any ``nn.Module``;
  with ``position``, a place inside each matched block of a known family
  (:mod:`visattn.models.families`). A ResNet block selected by class fills the very slots that
  ``stages``/``blocks`` fill (:func:`visattn.models.sites.slot_site` is the one definition of
  them).

Where ResNet placements put blocks (module paths are predictable; tests rely on them):

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
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.nn as nn

from .._nets import eval_mode, factory_of
from .._registry import unknown_options
from .._values import is_int
from ..blocks import block_info, create_block, list_blocks
from ..blocks.identity import INITS
from ..constants import POSITIONS
from .patterns import plan_of, plan_pattern_sites
from .resnet import ResNetStage
from .sites import Adapter, InjectionPlan, PlacementError, Site, install, slot_site, slotted

__all__ = [
    "PATTERN_KEYS",
    "PLACEMENT_KEYS",
    "Adapter",
    "InjectionPlan",
    "Placement",
    "apply_placements",
    "find_stages",
    "normalize_placements",
    "placements_to_config",
    "plan_placements",
]

#: the keys that select targets by module pattern instead of ResNet stages and blocks
PATTERN_KEYS = ("after", "before", "replace")
PLACEMENT_KEYS = ("name", "args", "stages", "blocks", "position", "init", *PATTERN_KEYS)
_BLOCK_WORDS = ("all", "first", "last", "odd")
_CONV_ARGS = ("out_channels", "stride")  # set by position 'conv' from the conv it replaces


def _stages(value: Any) -> str | tuple[int, ...]:
    if value is None or value == "all":
        return "all"
    stages = [value] if is_int(value) else value
    if (
        isinstance(stages, (str, bytes))
        or not isinstance(stages, Sequence)
        or not stages
        or not all(is_int(s) and s >= 1 for s in stages)
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
    blocks = [value] if is_int(value) else value
    if not isinstance(blocks, Sequence) or not blocks or not all(is_int(b) for b in blocks):
        raise PlacementError(
            f"'blocks' must be one of {list(_BLOCK_WORDS)} or a non-empty list of 0-based block "
            f"indices, got {value!r}"
        )
    return tuple(blocks)


def _patterns(value: Any, key: str) -> tuple[str, ...]:
    items = [value] if isinstance(value, str) else value
    if (
        isinstance(items, (bytes, Mapping))
        or not isinstance(items, Sequence)
        or not items
        or not all(isinstance(v, str) and v for v in items)
    ):
        raise PlacementError(
            f"{key!r} must be a class name, a module path or glob, or a non-empty list of them, "
            f"got {value!r}"
        )
    if len(set(items)) != len(items):
        raise PlacementError(f"{key!r} lists a pattern twice: {list(items)}")
    return tuple(items)


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
    * ``blocks``: ``"all"`` (also for ``None``), ``"first"``, ``"last"``, ``"odd"`` (every
      second block: indices 1, 3, 5, ...; none in a stage of one block) or a tuple of 0-based
      indices (negative from the end; an int -> one block); ``None`` for position ``stage``,
      where it does not apply;
    * ``position``: one of :data:`visattn.constants.POSITIONS` (``None`` -> ``"standard"``);
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
    stages: str | int | list[int] | None = None
    blocks: str | int | list[int] | None = None
    position: str | None = None
    init: str | None = "default"
    after: str | list[str] | None = None
    before: str | list[str] | None = None
    replace: str | list[str] | None = None

    def __post_init__(self) -> None:
        name = self.name
        if not isinstance(name, str) or not name:
            raise PlacementError(f"'name' (a registered block name) is required, got {name!r}")
        try:
            self._normalise()
        except PlacementError as e:
            raise e.naming(name) from None

    def _normalise(self) -> None:
        info = block_info(self.name)  # unknown names raise the registry's KeyError
        if info.name != self.name:  # "CBAM" is recorded as the block's own name, "cbam"
            object.__setattr__(self, "name", info.name)
        args = {} if self.args is None else self.args
        if not isinstance(args, Mapping) or not all(isinstance(k, str) for k in args):
            raise PlacementError(f"'args' must be a mapping of block options, got {args!r}")
        if "init" in args:
            raise PlacementError(
                "'init' is a placement key, not a block option: move it out of 'args'"
            )
        selector = self._selector()
        position = "standard" if self.position is None and selector is None else self.position
        if position is not None and position not in POSITIONS:
            raise PlacementError(
                f"unknown position {unknown_options([position], POSITIONS)}; "
                f"valid positions: {list(POSITIONS)}"
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
        if selector is None:
            set_(self, "stages", _stages(self.stages))
            set_(self, "blocks", _blocks(self.blocks, position))
        else:
            self._check_pattern_keys(selector, position)
            set_(self, selector, _patterns(getattr(self, selector), selector))

    def _selector(self) -> str | None:
        """The pattern key in use (``after``, ``before`` or ``replace``), or None for a ResNet
        placement; two of them, or one with ``stages``/``blocks``, are an error."""
        given = [k for k in PATTERN_KEYS if getattr(self, k) is not None]
        if len(given) > 1:
            raise PlacementError(
                f"give one of {list(PATTERN_KEYS)}, not {' and '.join(repr(k) for k in given)}; "
                "use two placements for two sites"
            )
        if given and (self.stages is not None or self.blocks is not None):
            resnet = [k for k in ("stages", "blocks") if getattr(self, k) is not None]
            raise PlacementError(
                f"{given[0]!r} selects modules by pattern and {' and '.join(map(repr, resnet))} "
                "select ResNet blocks: a placement uses one or the other"
            )
        return given[0] if given else None

    def _check_pattern_keys(self, selector: str, position: str | None) -> None:
        if position is None:
            return
        if selector != "after":
            raise PlacementError(
                "'position' names a place inside the blocks that 'after' selects; with "
                f"{selector!r} the block goes "
                f"{'in place of' if selector == 'replace' else 'before'} the module itself: "
                "remove 'position'"
            )
        if position == "stage":
            raise PlacementError(
                "position 'stage' follows a ResNet stage selected by 'stages'; with 'after', "
                "name the stage itself (e.g. after: 'layer3') and drop 'position'"
            )

    @property
    def is_pattern(self) -> bool:
        """Whether the targets are selected by ``after``/``before``/``replace``."""
        return any(getattr(self, k) is not None for k in PATTERN_KEYS)

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
            said = unknown_options(unknown, PLACEMENT_KEYS)
            raise PlacementError(
                f"unknown key {said}; valid keys: {list(PLACEMENT_KEYS)}", index=index
            )
        if "name" not in config:
            raise PlacementError("'name' (a registered block name) is required", index=index)
        try:
            return cls(**config)
        except PlacementError as e:
            raise e.naming(index=index) from None

    def to_dict(self) -> dict[str, Any]:
        """The placement as a plain mapping (lists, not tuples), as in YAML: every ResNet key
        (``name``, ``args``, ``stages``, ``blocks``, ``position``, ``init``) for a ResNet
        placement; ``name``, ``args``, the pattern key, ``position`` and ``init`` for a pattern
        placement."""
        out = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        out["args"] = dict(self.args)
        if self.is_pattern:
            out = {
                k: v
                for k, v in out.items()
                if k not in ("stages", "blocks") and (k not in PATTERN_KEYS or v is not None)
            }
        else:
            out = {k: v for k, v in out.items() if k not in PATTERN_KEYS}
        for key in ("stages", "blocks", *PATTERN_KEYS):
            if isinstance(out.get(key), tuple):
                out[key] = list(out[key])
        return out


def normalize_placements(attention: Any) -> list[Placement]:
    """``attention`` (a placement, a mapping, a list of them, a block name alone as shorthand for
    ``{"name": name}``, or ``None``) as a list of :class:`Placement`. Mappings are validated
    here; :class:`Placement` objects pass through unchanged, so normalising twice costs nothing
    and gives the same list.

    Raises:
        ValueError: a malformed placement (unknown key or position, bad stages/blocks, ``blocks``
            with position ``stage``, a block that cannot replace a conv at position ``conv``).
        KeyError: an unknown block name (the registry's error, naming close matches).
    """
    if attention is None:
        return []
    if isinstance(attention, str):  # a block name alone: that block at its default placement
        attention = {"name": attention}
    if isinstance(attention, (Mapping, Placement)):
        attention = [attention]
    if isinstance(attention, bytes) or not isinstance(attention, Sequence):
        raise ValueError(
            "attention must be a block name, a placement mapping, a list of them, or None, got "
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
    return out[0] if isinstance(attention, (Mapping, Placement, str)) else out


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
            f"{type(model).__name__} has no ResNet stages (layer1, layer2, ...); 'stages' and "
            "'blocks' work on visattn, torchvision and timm ResNets. For any other CNN, name the "
            "targets with 'after', 'before' or 'replace' (a class name or a module-path glob, "
            "e.g. {'name': 'se', 'after': 'features.*'})"
        )
    return stages


def _select_blocks(spec: Any, n: int, k: int, p: Placement, stage_name: str) -> list[int]:
    if spec == "all":
        return list(range(n))
    if spec == "first":
        return [0]
    if spec == "last":
        return [n - 1]
    if spec == "odd":
        return list(range(1, n, 2))
    out = []
    for b in spec:
        if not -n <= b < n:
            raise PlacementError(
                f"block index {b} matches no block of stage {stage_name} "
                f"({n} blocks: indices 0..{n - 1} or {-n}..-1)",
                p.name,
                k,
            )
        if b % n not in out:
            out.append(b % n)
    return sorted(out)


def _stage_blocks(stage: nn.Module) -> list[nn.Module]:
    return list(stage) if isinstance(stage, ResNetStage) else list(stage.children())


def _resnet_sites(
    model: nn.Module,
    placements: Sequence[tuple[int, Placement]],
    adapters: Mapping[type, Adapter],
    adapted: dict[str, nn.Module],
    label: str,
) -> list[Site]:
    """The sites of the ``stages``/``blocks`` placements ``(index, placement)``: stage by stage,
    block by block. Foreign blocks that receive a block are adapted once (into ``adapted``)."""
    stages = find_stages(model)
    sites: list[Site] = []
    for k, p in placements:
        wanted = range(1, len(stages) + 1) if p.stages == "all" else p.stages
        for s in wanted:
            if s > len(stages):
                raise PlacementError(
                    f"stage {s} does not exist; {label} has stages 1..{len(stages)}", p.name, k
                )
            stage_name, stage = stages[s - 1]
            blocks = _stage_blocks(stage)
            if p.position == "stage":
                # the channel count only: a stage block does not need the last block adapted
                last = slotted(blocks[-1], f"{stage_name}.{len(blocks) - 1}", adapters)
                path = f"{stage_name}.attn_stage"
                sites.append(
                    Site(k, p, "stage", path, stage_name, stage, "attn_stage", last.out_channels)
                )
                continue
            for j in _select_blocks(p.blocks, len(blocks), k, p, stage_name):
                path = f"{stage_name}.{j}"
                if path not in adapted:
                    host = slotted(blocks[j], path, adapters)
                    if host is not blocks[j]:
                        adapted[path] = host
                sites.append(slot_site(k, p, path, adapted.get(path, blocks[j])))
    return sites


def _check_free(sites: list[Site]) -> None:
    """One block per site, and no site that already holds one."""
    seen: dict[str, Site] = {}
    for t in sites:
        if t.path in seen:
            other = seen[t.path]
            keys = "'position', 'stages' or 'blocks'"
            keys = "'after', 'before' or 'position'" if t.placement.is_pattern else keys
            raise ValueError(
                f"attention placements #{other.index} ({other.placement.name!r}) and #{t.index} "
                f"({t.placement.name!r}) both target {t.path}; a slot holds one block: change "
                f"{keys} of one of them"
            )
        seen[t.path] = t
        if t.kind == "replace":
            continue
        current = getattr(t.host, t.attr, None)
        free = (
            current is None
            if t.kind in ("after", "before")
            else (current is None or isinstance(current, (nn.Identity, nn.Conv2d)))
        )
        if not free:
            raise PlacementError(
                f"slot {t.path} already holds a {type(current).__name__}; a slot holds one block",
                t.placement.name,
                t.index,
            )


def plan_placements(
    model: nn.Module,
    attention: Any,
    *,
    adapters: Mapping[type, Adapter] | None = None,
    model_name: str | None = None,
    input_size: Sequence[int] | None = None,
) -> tuple[list[Site], dict[str, nn.Module], InjectionPlan]:
    """Resolve placements against ``model`` without changing it: the sites to fill (with the
    channels each block needs, in placement order), the adapted residual blocks to install
    (keyed by path) and the plan (with the modules that patterns matched but skipped).

    Raises ``ValueError`` for a placement the model cannot take, ``TypeError`` for ResNet
    placements on a model without ResNet stages."""
    placements = list(enumerate(normalize_placements(attention)))
    adapters = adapters or {}
    adapted: dict[str, nn.Module] = {}
    resnet = [(k, p) for k, p in placements if not p.is_pattern]
    pattern = [(k, p) for k, p in placements if p.is_pattern]
    label = model_name or type(model).__name__
    sites = _resnet_sites(model, resnet, adapters, adapted, label) if resnet else []
    skipped: list[tuple[str, str]] = []
    size = None
    if pattern:
        more, skipped, size = plan_pattern_sites(
            model, pattern, adapters=adapters, adapted=adapted, input_size=input_size
        )
        sites = sorted([*sites, *more], key=lambda t: t.index)  # stable: order within each
    _check_free(sites)
    return sites, adapted, plan_of(sites, skipped, size)


def _build(site: Site, model: nn.Module) -> nn.Module:
    """The block of ``site``, on the device and dtype of the module it joins, in its mode;
    blocks at hook and replace sites are run once on a tensor of the site's shape (eval mode,
    no gradients) so that one that cannot take it is refused before the model changes."""
    near = site.host if site.kind != "replace" else model.get_submodule(site.target)
    factory = factory_of(near) or factory_of(model)
    p = site.placement
    at = f"at {site.path} ({site.channels} channels)"
    try:
        blk = create_block(p.name, site.channels, init=p.init, **site.options, **p.args, **factory)
    except (ValueError, TypeError) as e:  # the block's own error, its type kept
        raise type(e)(f"attention placement #{site.index} {at}: {e}") from e
    if site.spatial is not None:
        x = torch.randn(2, site.channels, *site.spatial, **factory)
        try:
            with eval_mode(blk), torch.no_grad():
                y = blk(x)
        except Exception as e:
            raise PlacementError(
                f"{at}: cannot take the {tuple(x.shape[1:])} tensor there "
                f"({type(e).__name__}: {e})",
                p.name,
                site.index,
            ) from e
        if not isinstance(y, torch.Tensor) or y.shape != x.shape:
            got = tuple(y.shape) if isinstance(y, torch.Tensor) else type(y).__name__
            raise PlacementError(
                f"{at}: maps {tuple(x.shape)} to {got}; a block placed by pattern must keep its "
                "input's shape",
                p.name,
                site.index,
            )
    blk.train(near.training)
    return blk


def apply_placements(
    model: nn.Module,
    attention: Any,
    *,
    adapters: Mapping[type, Adapter] | None = None,
    model_name: str | None = None,
    input_size: Sequence[int] | None = None,
    dry_run: bool = False,
) -> list[str] | InjectionPlan:
    """Fill the attention sites of ``model`` in place; returns the module paths filled, in
    placement order (``dry_run``: the :class:`~visattn.models.sites.InjectionPlan`, with the
    model unchanged). Every block is built and checked before the model changes, so any error
    leaves it untouched. Foreign residual blocks are replaced by slotted equivalents via
    ``adapters`` (see :mod:`visattn.models.inject`); ``input_size`` is the probe's ``(C, H, W)``
    for pattern placements (see :mod:`visattn.models.patterns`)."""
    sites, adapted, plan = plan_placements(
        model, attention, adapters=adapters, model_name=model_name, input_size=input_size
    )
    built = [_build(t, model) for t in sites]  # everything first: a bad option changes nothing
    if dry_run:
        return plan
    install(model, sites, built, adapted)
    return [t.path for t in sites]
