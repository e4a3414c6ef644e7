"""``create_model``: composes a registered (or ``<block>_<backbone>``) model from its builder,
the placements its name fixes, the caller's placements, timm's data config and weights.

Conflicts:

* a keyword argument that contradicts one the name fixes raises ``ValueError``
  (``create_model("resnet20_cifar", depth=56)``); repeating the same value is allowed;
* ``attention=`` on a model whose name already places attention *composes*: the name's
  placements come first, then the given ones; targeting a slot twice raises ``ValueError``
  (e.g. ``se_resnet50`` + CBAM at the standard position), other combinations work
  (``se_resnet50`` + BAM after stages);
* ``attention=`` on a Residual Attention Network raises ``ValueError`` (no ResNet slots);
* ``checkpoint_path=`` and ``pretrained_backbone=`` together raise ``ValueError``.

Names ``tv:<torchvision name>`` and ``timm:<timm name>`` build that library's model (random
weights; ``pretrained_backbone=`` loads a local state_dict file) and place ``attention`` with
:func:`visattn.inject`, so any placement by pattern works (``{"name": "se", "after":
["InvertedResidual"], "position": "standard"}``); keyword options go to the library's
constructor, except ``input_size=(C, H, W)``, the probe size of pattern placements.
"""

from __future__ import annotations

import inspect
from collections.abc import Sequence
from dataclasses import dataclass
from os import PathLike
from typing import Any

import timm
import torch.nn as nn
import torchvision

from .._registry import did_you_mean, unknown_options
from ..constants import IMAGENET_MEAN, IMAGENET_STD, STATS
from .checkpoint import load_checkpoint
from .features import check_global_pool
from .inject import inject
from .placement import Placement, apply_placements, normalize_placements
from .pretrained import get_pretrained, list_pretrained
from .registry import ModelSpec, UnknownModelError, get_model_spec

__all__ = ["FOREIGN_PREFIXES", "create_model", "pretrained_cfg_for"]

#: name prefixes of models built by another library (then injected): torchvision and timm
FOREIGN_PREFIXES = ("tv:", "timm:")


def _final_reduction(spec: ModelSpec, options: dict[str, Any]) -> int:
    """Total stride of the last feature map (from the builders' layouts)."""
    if spec.dataset == "cifar":
        return 4  # 32x32 -> 8x8: three stages with strides 1, 2, 2
    last_stride = options.get("last_stride", spec.defaults.get("last_stride", 2))
    return min(32 // 2 if last_stride == 1 else 32, options.get("output_stride", 32))


def pretrained_cfg_for(
    spec: ModelSpec,
    *,
    num_classes: int | None = None,
    in_chans: int = 3,
    options: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """timm's data / pretrained config of ``spec`` built with ``num_classes``, ``in_chans`` and
    builder ``options``: ``input_size``, ``pool_size`` (final map at that input), ``crop_pct``,
    ``mean``/``std`` of the model's dataset (CIFAR-100 statistics for 100-class CIFAR models,
    CIFAR-10's for other CIFAR models, ImageNet's otherwise), ``first_conv`` and ``classifier``
    (module paths), ``custom_load`` (so timm's ``pretrained=True`` with a local ``file`` loads
    through :func:`visattn.models.load_checkpoint`)."""
    options = options or {}
    num_classes = spec.num_classes if num_classes is None else num_classes
    cifar = spec.dataset == "cifar"
    stats = ("cifar100" if num_classes == 100 else "cifar10") if cifar else "imagenet"
    mean, std = STATS[stats]
    size = spec.input_size[1]
    pool = size // _final_reduction(spec, options)
    return {
        "architecture": f"visattn_{spec.name}",
        "url": "",
        "custom_load": True,
        "num_classes": num_classes,
        "input_size": (in_chans, size, size),
        "pool_size": (pool, pool),
        "crop_pct": 1.0 if cifar else 0.875,
        "interpolation": "bilinear",
        "mean": mean,
        "std": std,
        "first_conv": "conv1" if spec.placeable else "stem.0",
        "classifier": "fc",
        "license": "",
        "paper_ids": spec.paper,
    }


def _check_options(spec: ModelSpec, kwargs: dict[str, Any]) -> None:
    """Builder options must exist (``TypeError`` with close matches) and agree with those the
    name fixes (``ValueError``)."""
    options = spec.options()
    unknown = [k for k in kwargs if k not in options and k not in spec.fixed]
    if unknown:
        own = [p for p in inspect.signature(create_model).parameters if p not in ("name", "kwargs")]
        said = unknown_options(unknown, dict.fromkeys([*own, *options]))
        builder = [o for o in options if o not in own]
        raise TypeError(
            f"create_model({spec.name!r}): unknown option {said}; the model's options: "
            f"{', '.join(builder) or 'none'}; create_model's own: {', '.join(own)}"
        )
    for k, v in kwargs.items():
        if k in spec.fixed and v != spec.fixed[k]:
            raise ValueError(
                f"create_model({spec.name!r}): {k}={v!r} conflicts with the model's "
                f"{k}={spec.fixed[k]!r}; choose the model whose name has {k}={v!r} or drop '{k}'"
            )


def _create_tagged(
    name: str, pretrained: bool, overlay: dict[str, Any] | None, request: _Request
) -> nn.Module | None:
    """``<model>.<tag>`` (:func:`visattn.list_pretrained`): the model built through timm with
    the tag's pretrained config (eval transform, where the file is), its released weights
    loaded if ``pretrained``; ``None`` for a name without a tag. ``pretrained=True`` on a name
    without a tag raises ``ValueError`` naming the model's tags."""
    if "." not in name or ":" in name:  # ``tv:``/``timm:`` names are not visattn's tags
        if pretrained:
            base = name.removeprefix("visattn_")
            tags = [t.name for t in list_pretrained(f"{base}.*")]
            raise ValueError(
                f"create_model({name!r}, pretrained=True): give a pretrained tag, "
                + (f"one of {', '.join(tags)}" if tags else "see visattn.list_pretrained()")
                + "; for other weights use checkpoint_path= or pretrained_backbone="
            )
        return None
    tag = get_pretrained(name)
    options = request.as_options()
    return timm.create_model(
        f"visattn_{tag.name}", pretrained=pretrained, pretrained_cfg_overlay=overlay, **options
    )


def create_model(
    name: str,
    *,
    num_classes: int | None = None,
    in_chans: int = 3,
    global_pool: str = "avg",
    attention: Any = None,
    checkpoint_path: str | PathLike[str] | None = None,
    pretrained_backbone: str | PathLike[str] | None = None,
    pretrained: bool = False,
    pretrained_cfg_overlay: dict[str, Any] | None = None,
    **kwargs: Any,
) -> nn.Module:
    """Build a model by name.

    Args:
        name: a name from :func:`visattn.list_models` or ``<block>_<backbone>`` (``visattn_``
            prefix accepted), a pretrained tag ``<model>.<tag>`` from
            :func:`visattn.list_pretrained` (``se_resnet50.ra2_in1k``): the model then carries
            the tag's ``pretrained_cfg`` (eval transform, where its file is), as in timm; or
            ``tv:<torchvision model>`` / ``timm:<timm model>`` (see the module docstring).
        num_classes: classifier outputs (default: the model's dataset, 10 for CIFAR models,
            1000 for ImageNet models; ``0`` gives no classifier, pooled features out).
        in_chans: input channels.
        global_pool: timm's global pooling before the classifier: ``avg``, ``max``,
            ``avgmax``, ``catavgmax`` (average and max concatenated), or ``""`` with
            ``num_classes=0`` for the unpooled ``(N, num_features, H', W')`` map.
        attention: placement(s) to add (see the README's placement table); composed after
            those the name fixes.
        checkpoint_path: a state_dict file to load (visattn, torchvision, timm, Lightning
            ``.ckpt``), strictly outside the attention slots; attention weights it lacks are
            reported in ``model.checkpoint_report``.
        pretrained_backbone: a torchvision or timm ResNet state_dict file: every backbone key
            must be present with its shape (missing, unexpected and mis-shaped keys raise
            ``ValueError`` naming them); attention keys are new and reported; the classifier
            is loaded only if its shape matches ``num_classes`` (else it keeps its
            initialisation and is reported).
        pretrained: with a tag, load its released weights (timm's hub, or
            ``pretrained_cfg_overlay=dict(file=PATH)``, or the hub cache), strictly through the
            tag's converter; with another ``num_classes`` the classifier keeps its
            initialisation.
        pretrained_cfg_overlay: with a tag, entries that override its pretrained config.
        **kwargs: builder options (e.g. ``shortcut="B"``, ``drop_rate``, ``learning="nal"``).

    Returns:
        an ``nn.Module`` with ``num_classes``, ``num_features``, ``default_input_size``
        ``(C, H, W)``, ``attention_paths`` (module paths of the placed blocks),
        ``pretrained_cfg`` (timm's data config), timm's ``forward_features`` /
        ``forward_head`` / ``reset_classifier``.

    Raises:
        UnknownModelError: (a ``KeyError``) unknown name, with close matches.
        TypeError: an unknown option.
        ValueError: an option conflicting with the name, or a bad placement.
    """
    if isinstance(in_chans, bool) or not isinstance(in_chans, int) or in_chans < 1:
        raise ValueError(
            f"create_model({name!r}): in_chans must be an int >= 1 (the input's channels), "
            f"got {in_chans!r}"
        )
    request = _Request(
        name, num_classes, in_chans, global_pool, attention, checkpoint_path,
        pretrained_backbone, kwargs,
    )  # fmt: skip
    if isinstance(name, str) and name.startswith(FOREIGN_PREFIXES):
        if pretrained or pretrained_cfg_overlay is not None:
            raise ValueError(
                f"create_model({name!r}): pretrained tags are for visattn's named models; a "
                "tv:/timm: network is built with random weights: give its weights file as "
                "pretrained_backbone="
            )
        return _create_foreign(request)
    tagged = _create_tagged(name, pretrained, pretrained_cfg_overlay, request)
    if tagged is not None:
        return tagged
    return _create_named(get_model_spec(name), request)


@dataclass(frozen=True)
class _Request:
    """What :func:`create_model` was asked for, as its two builders take it."""

    name: str
    num_classes: int | None
    in_chans: int
    global_pool: str
    attention: Any
    checkpoint_path: str | PathLike[str] | None
    pretrained_backbone: str | PathLike[str] | None
    options: dict[str, Any]  # the builder's own options (**kwargs)

    def as_options(self) -> dict[str, Any]:
        """Every option as ``create_model`` keywords, those left at None dropped."""
        given = dict(
            num_classes=self.num_classes,
            in_chans=self.in_chans,
            global_pool=self.global_pool,
            attention=self.attention,
            checkpoint_path=self.checkpoint_path,
            pretrained_backbone=self.pretrained_backbone,
            **self.options,
        )
        return {k: v for k, v in given.items() if v is not None}

    def check_weight_files(self) -> None:
        if self.checkpoint_path is not None and self.pretrained_backbone is not None:
            raise ValueError(
                f"create_model({self.name!r}): give checkpoint_path (a whole model) or "
                "pretrained_backbone (backbone weights), not both"
            )

    def finish(
        self,
        model: nn.Module,
        name: str,
        paths: list[str],
        cfg: dict[str, Any],
        placements: Sequence[Placement] = (),
    ) -> nn.Module:
        """The attributes every created model has (its name, the module paths of its attention
        blocks and, as plain mappings, the placements that put them there), then the weight
        files loaded: a whole model's state_dict (strict outside the attention slots), or
        backbone weights (the classifier only where its shape matches)."""
        model.attention_paths = paths
        model.attention_placements = [p.to_dict() for p in placements]
        model.model_name = name
        model.pretrained_cfg = cfg
        if self.checkpoint_path is not None:
            load_checkpoint(model, self.checkpoint_path)
        if self.pretrained_backbone is not None:
            load_checkpoint(model, self.pretrained_backbone, classifier="if_matching")
        return model


def _create_named(spec: ModelSpec, request: _Request) -> nn.Module:
    """A registered model with its placements and ``attention`` (see :func:`create_model`)."""
    kwargs = request.options
    _check_options(spec, kwargs)
    request.check_weight_files()
    num_classes, in_chans, global_pool = request.num_classes, request.in_chans, request.global_pool
    placements = normalize_placements(list(spec.attention)) + normalize_placements(
        request.attention
    )
    if placements and not spec.placeable:
        raise ValueError(
            f"create_model({spec.name!r}): a Residual Attention Network has no ResNet slots for "
            "'attention' placements; use a ResNet backbone (e.g. 'resnet56_cifar')"
        )
    num_classes = _checked_num_classes(
        spec.name, spec.num_classes if num_classes is None else num_classes
    )
    check_global_pool(global_pool, num_classes)
    built = {**spec.defaults, **spec.fixed, **kwargs}
    model = spec.builder(**built, num_classes=num_classes, in_chans=in_chans)
    if global_pool != "avg":
        model.reset_classifier(num_classes, global_pool)
    paths = apply_placements(model, placements, model_name=spec.name)
    cfg = pretrained_cfg_for(spec, num_classes=num_classes, in_chans=in_chans, options=built)
    return request.finish(model, spec.name, paths, cfg, placements)


def _checked_num_classes(name: str, num_classes: Any) -> int:
    if isinstance(num_classes, bool) or not isinstance(num_classes, int) or num_classes < 0:
        raise ValueError(
            f"create_model({name!r}): num_classes must be an int >= 0 (0 = no classifier), "
            f"got {num_classes!r}"
        )
    return num_classes


def _last_linear(model: nn.Module) -> str:
    names = [p for p, m in model.named_modules() if isinstance(m, nn.Linear)]
    return names[-1] if names else "fc"


def _unknown(library: str, arch: str, known: list[str], name: str) -> UnknownModelError:
    hint = did_you_mean(f"{library}:{arch}", [f"{library}:{c}" for c in known])
    return UnknownModelError(f"unknown model {name!r}{hint}")


def _build_foreign(
    name: str, num_classes: int, in_chans: int, global_pool: str, kwargs: dict[str, Any]
) -> tuple[nn.Module, dict[str, Any]]:
    """The torchvision / timm model and its data config (``input_size``, ``mean``, ``std``,
    ``classifier``)."""
    library, _, arch = name.partition(":")
    if library == "timm":
        if arch not in timm.list_models():
            raise _unknown("timm", arch, timm.list_models(), name)
        model = timm.create_model(
            arch,
            pretrained=False,
            num_classes=num_classes,
            in_chans=in_chans,
            global_pool=global_pool,
            **kwargs,
        )
        return model, dict(model.pretrained_cfg)
    known = torchvision.models.list_models(module=torchvision.models)
    if arch not in known:
        raise _unknown("tv", arch, known, name)
    if in_chans != 3 or global_pool != "avg" or num_classes == 0:
        raise ValueError(
            f"create_model({name!r}): torchvision models take in_chans=3, global_pool='avg' and "
            "num_classes >= 1; use a 'timm:' model for other settings"
        )
    model = torchvision.models.get_model(arch, weights=None, num_classes=num_classes, **kwargs)
    cfg = {
        "architecture": name,
        "input_size": (3, 224, 224),
        "mean": IMAGENET_MEAN,
        "std": IMAGENET_STD,
        "num_classes": num_classes,
        "classifier": _last_linear(model),
    }
    return model, cfg


def _create_foreign(request: _Request) -> nn.Module:
    """A ``tv:``/``timm:`` model with ``attention`` injected (see :func:`create_model`)."""
    name = request.name
    request.check_weight_files()
    num_classes = request.num_classes
    num_classes = _checked_num_classes(name, 1000 if num_classes is None else num_classes)
    kwargs = dict(request.options)
    input_size = kwargs.pop("input_size", None)
    model, cfg = _build_foreign(name, num_classes, request.in_chans, request.global_pool, kwargs)
    placements = normalize_placements(request.attention)
    paths = inject(model, placements, input_size=input_size) if placements else []
    model.num_classes = num_classes
    model.default_input_size = tuple(cfg["input_size"])
    return request.finish(model, name, paths, cfg, placements)
