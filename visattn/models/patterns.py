"""Placement by module pattern (``after``, ``before``, ``replace``), for any ``nn.Module`` CNN.

A pattern is a class name (``"InvertedResidual"``, or the qualified ``"torchvision.models.
mobilenetv3.InvertedResidual"``), a module path (``"features.4"``, ``"model.4"``) or a path glob
in which ``*`` matches within one dotted segment and ``**`` any number of segments
(``"features.*"``: the direct children of ``features``; ``"features.**"``: everything below it);
class names may use ``fnmatch`` wildcards too. ``replace`` also takes the word ``se``: the
squeeze-and-excitation modules of :data:`visattn.models.families.SE_MODULES`. The root module,
visattn's attention blocks (and everything inside them) and empty ``attn_*`` slots are never
matched.

One probe forward (eval mode, no gradients, at ``input_size``; the train/eval state of every
module is restored and the probe's hooks removed, so nothing is left behind and norm statistics
do not move) tells which matched modules qualify: a module qualifies when it is called exactly
once and its output (``after``, ``replace``) or first input (``before``) is a 4-D tensor, read as
``(N, C, H, W)``; ``C`` is the block's channel count and ``(H, W)`` is reported in the plan. A
``replace`` target must also keep the shape of its input. A module that does not qualify is
skipped with the reason (listed by ``dry_run``) when a class name or glob matched it, and refused
when its exact path was given. Modules that work on channels-last tensors (``nn.Linear``, plain
``nn.LayerNorm``, ``torchvision.ops.Permute``) and the elementwise modules between them are
recognised as such and skipped.
"""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn as nn

from .._nets import eval_mode, factory_of
from .._registry import close_matches
from ..blocks import is_block
from .families import BACKBONE_FAMILIES, SE_MODULES, family_of, is_se, qualname
from .sites import (
    AFTER,
    BEFORE,
    Adapter,
    InjectionPlan,
    PlacementError,
    PlannedBlock,
    Site,
    slot_site,
    slotted,
)

__all__ = ["DEFAULT_INPUT_SIZE", "match_pattern", "plan_pattern_sites", "probe_input_size"]

DEFAULT_INPUT_SIZE = (3, 224, 224)
_GLOB = re.compile(r"[*?\[]")


def _seg_regex(seg: str) -> str:
    out = []
    for ch in seg:
        out.append("[^.]*" if ch == "*" else "[^.]" if ch == "?" else re.escape(ch))
    return "".join(out)


def _path_regex(pattern: str) -> re.Pattern[str]:
    """``*`` within a segment, ``**`` any number of segments (at least one)."""
    parts = [r"[^.]+(?:\.[^.]+)*" if seg == "**" else _seg_regex(seg) for seg in pattern.split(".")]
    return re.compile("^" + r"\.".join(parts) + "$")


def match_pattern(pattern: str, path: str, module: nn.Module) -> bool:
    """Whether ``pattern`` selects the module at ``path`` (by path glob or class name)."""
    cls = type(module)
    if _GLOB.search(pattern):
        return bool(_path_regex(pattern).match(path)) or any(
            fnmatch.fnmatchcase(n, pattern) for n in (cls.__name__, qualname(cls))
        )
    return pattern in (path, cls.__name__, qualname(cls))


def _candidates(model: nn.Module) -> list[tuple[str, nn.Module]]:
    """Modules a pattern may select: not the root, not inside a visattn block, not a slot."""
    out, inside = [], []
    for path, m in model.named_modules():
        if not path or any(path.startswith(p + ".") for p in inside):
            continue
        if is_block(m) or type(m).__name__ == "IdentityAtInit":
            inside.append(path)
            continue
        name = path.rpartition(".")[2]
        if isinstance(m, nn.Identity) and name.startswith("attn_"):
            continue
        out.append((path, m))
    return out


def _no_match(pattern: str, key: str, modules: list[tuple[str, nn.Module]]) -> str:
    classes = sorted({type(m).__name__ for _, m in modules})
    paths = [p for p, _ in modules]
    near_c = close_matches(pattern, classes, cutoff=0.5)
    near_p = close_matches(pattern, paths, cutoff=0.5)
    hint = []
    if near_c:
        hint.append("classes " + ", ".join(repr(c) for c in near_c))
    if near_p:
        hint.append("paths " + ", ".join(repr(p) for p in near_p))
    said = f"; closest: {'; '.join(hint)}" if hint else ""
    top = sorted({p.split(".")[0] for p in paths})[:8]
    return (
        f"{key} pattern {pattern!r} matches no module{said} (the model has "
        f"{len(classes)} module classes; top-level children: {', '.join(top)}). A pattern is a "
        "class name, a module path or a path glob ('*' within a segment, '**' across segments)"
    )


# ----------------------------------------------------------------------------------- probe


def probe_input_size(model: nn.Module, input_size: Sequence[int] | None) -> tuple[int, ...]:
    """``input_size`` or the model's own: timm's ``pretrained_cfg``/``default_cfg``
    ``input_size``, visattn's ``default_input_size``, else :data:`DEFAULT_INPUT_SIZE`."""
    if input_size is None:
        for attr in ("pretrained_cfg", "default_cfg"):
            cfg = getattr(model, attr, None)
            if isinstance(cfg, Mapping) and cfg.get("input_size"):
                input_size = cfg["input_size"]
                break
        else:
            input_size = getattr(model, "default_input_size", None) or DEFAULT_INPUT_SIZE
    size = tuple(input_size)
    if len(size) != 3 or not all(isinstance(s, int) and s > 0 for s in size):
        raise ValueError(f"input_size must be (C, H, W) of positive ints, got {input_size!r}")
    return size


@dataclass
class _Seen:
    calls: int = 0
    inp: Any = None  # shape of the first input (torch.Size) or a description
    out: Any = None
    channels_last_in: bool = False
    channels_last_out: bool = False


def _describe(t: Any) -> Any:
    return t.shape if isinstance(t, torch.Tensor) else type(t).__name__


def _works_on_last_dim(m: nn.Module) -> bool:
    """A module whose forward is ``nn.Linear``'s or ``nn.LayerNorm``'s (on the last dim), or
    torchvision's ``Permute``."""
    if type(m).__name__ == "Permute" and hasattr(m, "dims"):
        return list(m.dims) != [0, 1, 2, 3]
    if isinstance(m, nn.LayerNorm):  # timm's LayerNorm2d, torchvision's: channels-first
        return len(m.normalized_shape) == 1 and "2d" not in type(m).__name__.lower()
    return isinstance(m, nn.Linear) and type(m).forward is nn.Linear.forward


def probe(
    model: nn.Module, modules: Iterable[tuple[str, nn.Module]], input_size: tuple[int, ...]
) -> dict[str, _Seen]:
    """One forward of ``model`` at ``(1, *input_size)`` recording, for each of ``modules``, how
    often it ran and the shapes of its first input and output. Eval mode under ``no_grad``; the
    model's modes are restored and the hooks removed."""
    seen: dict[str, _Seen] = {}
    channels_last: set[int] = set()  # ids of channels-last tensors (kept alive in `alive`)
    alive: list[torch.Tensor] = []
    handles = []

    def pre(path: str):
        def hook(m: nn.Module, args: tuple[Any, ...]) -> None:
            s = seen.setdefault(path, _Seen())
            s.calls += 1
            x = args[0] if args else None
            s.inp = _describe(x)
            s.channels_last_in = isinstance(x, torch.Tensor) and id(x) in channels_last

        return hook

    def post(path: str):
        def hook(m: nn.Module, args: tuple[Any, ...], out: Any) -> None:
            s = seen[path]
            s.out = _describe(out)
            x = args[0] if args else None
            elementwise = (
                s.channels_last_in
                and isinstance(x, torch.Tensor)
                and isinstance(out, torch.Tensor)
                and x.shape == out.shape
                and not list(m.children())
            )
            to_nchw = type(m).__name__ == "Permute" and list(m.dims) == [0, 3, 1, 2]
            last_dim = _works_on_last_dim(m) or elementwise
            if isinstance(out, torch.Tensor) and last_dim and not to_nchw:
                channels_last.add(id(out))
                alive.append(out)
            s.channels_last_out = isinstance(out, torch.Tensor) and id(out) in channels_last

        return hook

    kw = factory_of(model)
    mods = list(modules)
    all_modules = {id(m): (p, m) for p, m in model.named_modules() if p}
    try:
        for path, m in all_modules.values():  # every module, for the channels-last marks
            handles.append(m.register_forward_pre_hook(pre(path)))
            handles.append(m.register_forward_hook(post(path)))
        with eval_mode(model), torch.no_grad():
            try:
                model(torch.zeros(1, *input_size, **kw))
            except Exception as e:
                raise ValueError(
                    f"the probe forward of {type(model).__name__} at input_size "
                    f"{tuple(input_size)} failed ({type(e).__name__}: {e}); pass the "
                    "input_size=(C, H, W) the model takes"
                ) from e
    finally:
        for h in handles:
            h.remove()
    return {p: seen[p] for p, _ in mods if p in seen}


def _reason(seen: _Seen | None, kind: str, input_size: tuple[int, ...]) -> str | None:
    """Why a module cannot take a block at ``kind`` (None: it can)."""
    if seen is None or seen.calls == 0:
        return f"not called in a forward at input size {tuple(input_size)}"
    if seen.calls > 1:
        return f"called {seen.calls} times in one forward (a shared module)"
    t = seen.inp if kind == "before" else seen.out
    side = "first input" if kind == "before" else "output"
    if not isinstance(t, torch.Size):
        return f"its {side} is a {t}, not a tensor"
    if len(t) != 4:
        return f"its {side} is a {len(t)}-D tensor {tuple(t)}, not (N, C, H, W)"
    if seen.channels_last_in if kind == "before" else seen.channels_last_out:
        return f"its {side} {tuple(t)} is channels-last (N, H, W, C)"
    if kind == "replace" and seen.inp != seen.out:
        return f"it maps {_fmt(seen.inp)} to {_fmt(seen.out)}; a replacing block keeps the shape"
    return None


def _fmt(t: Any) -> str:
    return str(tuple(t)) if isinstance(t, torch.Size) else str(t)


# ------------------------------------------------------------------------------ resolution


def _child(module: nn.Module, rel: str) -> tuple[str, nn.Module] | None:
    """The submodule at relative path ``rel`` (negative segments index the children)."""
    names = []
    for seg in rel.split("."):
        kids = list(module.named_children())
        if seg.lstrip("-").isdigit() and seg.startswith("-"):
            if not -len(kids) <= int(seg) < 0:
                return None
            seg, module = kids[int(seg)]
        else:
            found = dict(kids).get(seg)
            if found is None:
                return None
            module = found
        names.append(seg)
    return ".".join(names), module


@dataclass
class _Target:
    path: str  # of the module the hook / replacement acts on
    module: nn.Module
    kind: str  # after, before, replace
    matched: str  # the matched module's path
    explicit: bool
    refused: str | None = None  # why no block can live there, known before the probe


_CONTAINERS = (nn.Sequential, nn.ModuleList, nn.ModuleDict)


def _into_sequential(t: _Target) -> _Target:
    """A hook site on a container moved to where the block can live: a container's forward may
    run every child, so the block cannot be its child. ``after`` a stock ``nn.Sequential`` is
    after its last child and ``before`` it before its first child (the same tensors), recursively;
    other containers are refused."""
    path, m = t.path, t.module
    while t.kind != "replace" and isinstance(m, _CONTAINERS):
        kids = list(m.named_children())
        if type(m).forward is not nn.Sequential.forward or not kids:
            why = (
                "an empty container"
                if not kids
                else f"a {type(m).__name__}, a container whose forward runs its children, so it "
                "cannot hold the block; select a module inside or after it (for a visattn "
                "ResNet stage: position 'stage')"
            )
            return _Target(path, m, t.kind, t.matched, t.explicit, why)
        name, m = kids[-1] if t.kind == "after" else kids[0]
        path = f"{path}.{name}"
    return _Target(path, m, t.kind, t.matched, t.explicit)


def _family_targets(path: str, module: nn.Module, position: str) -> _Target | None:
    fam = family_of(module)
    if fam is None or fam.slots:
        return None
    choices = fam.positions.get(position)
    if not choices:
        raise PlacementError(
            f"position {position!r} is not defined for {type(module).__name__} "
            f"({fam.label}) at {path}; it has: {list(fam.positions)}"
        )
    for choice in choices:
        side, rel = choice.split(":", 1)
        found = _child(module, rel)
        if found is not None:
            return _Target(f"{path}.{found[0]}", found[1], side, path, False)
    raise PlacementError(f"{path} ({type(module).__name__}) lacks {' / '.join(choices)}")


def _known_families() -> str:
    return "; ".join(
        f"{f.label}: {', '.join(c.rsplit('.', 1)[1] for c in f.classes)}" for f in BACKBONE_FAMILIES
    )


def plan_pattern_sites(
    model: nn.Module,
    placements: Sequence[tuple[int, Any]],
    *,
    adapters: Mapping[type, Adapter],
    adapted: dict[str, nn.Module],
    input_size: Sequence[int] | None,
) -> tuple[list[Site], list[tuple[str, str]], tuple[int, ...]]:
    """The sites of the pattern placements ``(index, placement)`` in ``model`` (unchanged), the
    matched modules skipped with their reasons, and the probe's input size. ResNet blocks
    selected with a ``position`` go to their slots (``adapted`` collects the slotted blocks to
    install, keyed by path)."""
    modules = _candidates(model)
    size = probe_input_size(model, input_size)
    targets: list[tuple[int, Any, _Target]] = []
    slot_sites: list[Site] = []
    for k, p in placements:
        try:
            for q, m, kind, explicit in _matches(p, modules):
                if p.position is None:
                    targets.append((k, p, _Target(q, m, kind, q, explicit)))
                    continue
                fam = family_of(m)
                if fam is None:
                    raise PlacementError(
                        f"position {p.position!r} needs a known block family, but {q} is a "
                        f"{type(m).__name__}; drop 'position' to place the block after the "
                        f"module itself. Known families: {_known_families()}"
                    )
                if fam.slots:
                    slot_sites.append(_slot_site(k, p, q, m, adapters, adapted))
                else:
                    targets.append((k, p, _family_targets(q, m, p.position)))
        except PlacementError as e:
            raise e.naming(p.name, k) from None
    moved, taken = [], set()
    for k, p, t in targets:  # a container and its last child are one site: keep it once
        t = _into_sequential(t)
        if (k, t.path, t.kind) not in taken:
            taken.add((k, t.path, t.kind))
            moved.append((k, p, t))
    targets = moved
    sites, skipped = _probed_sites(model, targets, size)
    placed = {s.index for s in sites} | {s.index for s in slot_sites}
    sites = slot_sites + sites
    for k, p, _ in targets:
        if k not in placed:
            reasons = "; ".join(f"{q}: {r}" for q, r in skipped)
            raise PlacementError(f"matched modules but none can take a block: {reasons}", p.name, k)
    sites.sort(key=lambda s: s.index)  # placement order; module order within a placement
    return sites, skipped, size


def _matches(
    p: Any, modules: list[tuple[str, nn.Module]]
) -> list[tuple[str, nn.Module, str, bool]]:
    """``(path, module, kind, explicit)`` of every module a placement's ``after`` / ``before`` /
    ``replace`` patterns select (``explicit``: named by its exact path, not a glob or class);
    a pattern that selects nothing raises :class:`~.sites.PlacementError` with close
    matches."""
    kind = "after" if p.after else "before" if p.before else "replace"
    found = []
    for pattern in p.after or p.before or p.replace:
        if kind == "replace" and pattern == "se":
            hits = [(q, m) for q, m in modules if is_se(m)]
            if not hits:
                raise PlacementError(
                    "replace 'se' found no squeeze-and-excitation module (known: "
                    f"{', '.join(c.rsplit('.', 1)[1] for c in SE_MODULES)}); name the "
                    "module class or path to replace instead"
                )
        else:
            hits = [(q, m) for q, m in modules if match_pattern(pattern, q, m)]
            if not hits:
                raise PlacementError(_no_match(pattern, kind, modules))
        explicit = not _GLOB.search(pattern) and any(q == pattern for q, _ in hits)
        found += [(q, m, kind, explicit) for q, m in hits]
    return found


def _probed_sites(
    model: nn.Module, targets: list[tuple[int, Any, _Target]], size: tuple[int, ...]
) -> tuple[list[Site], list[tuple[str, str]]]:
    """The sites of ``targets`` that can take a block, with the channels and spatial size a
    probe pass at ``size`` finds there, and the others with the reason (an explicitly named
    module that cannot take one raises ``ValueError``)."""
    seen = probe(model, [(t.path, t.module) for _, _, t in targets], size) if targets else {}
    sites: list[Site] = []
    skipped: list[tuple[str, str]] = []
    for k, p, t in targets:
        why = t.refused or _reason(seen.get(t.path), t.kind, size)
        if why is not None:
            if t.explicit:
                raise PlacementError(
                    f"{t.matched} cannot take a block {t.kind} it: {why}", p.name, k
                )
            skipped.append((t.matched, why))
            continue
        s = seen[t.path]
        shape = s.inp if t.kind == "before" else s.out
        if t.kind == "replace":
            head, _, name = t.path.rpartition(".")
            host, path, attr = (model.get_submodule(head) if head else model), t.path, name
        else:
            attr = AFTER if t.kind == "after" else BEFORE
            host, path = t.module, f"{t.path}.{attr}"
        sites.append(
            Site(k, p, t.kind, path, t.path, host, attr, int(shape[1]), (shape[2], shape[3]))
        )
    return sites, skipped


def _slot_site(
    k: int,
    p: Any,
    path: str,
    module: nn.Module,
    adapters: Mapping[type, Adapter],
    adapted: dict[str, nn.Module],
) -> Site:
    """A slot of the ResNet block at ``path`` (adapted once, shared by all its sites)."""
    if path not in adapted:
        host = slotted(module, path, adapters)
        if host is not module:
            adapted[path] = host
    host = adapted.get(path, module)
    return slot_site(k, p, path, host)


def plan_of(sites: list[Site], skipped: list[tuple[str, str]], size: Any) -> InjectionPlan:
    return InjectionPlan(
        tuple(
            PlannedBlock(s.path, s.target, s.kind, s.placement.name, s.index, s.channels, s.spatial)
            for s in sites
        ),
        tuple(skipped),
        size,
    )
