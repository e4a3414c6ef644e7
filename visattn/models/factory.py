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
"""

from __future__ import annotations

import difflib
from os import PathLike
from typing import Any

import torch.nn as nn

from ..constants import STATS
from .checkpoint import load_checkpoint
from .features import check_global_pool
from .placement import apply_placements, normalize_placements
from .registry import ModelSpec, get_model_spec

__all__ = ["create_model", "pretrained_cfg_for"]


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
        hints = {k: difflib.get_close_matches(k, options, n=1) for k in unknown}
        said = ", ".join(
            f"'{k}'" + (f" (did you mean '{hints[k][0]}'?)" if hints[k] else "") for k in unknown
        )
        raise TypeError(
            f"create_model({spec.name!r}): unknown option {said}; valid options: "
            f"{', '.join(o for o in options if o not in ('num_classes', 'in_chans'))}"
        )
    for k, v in kwargs.items():
        if k in spec.fixed and v != spec.fixed[k]:
            raise ValueError(
                f"create_model({spec.name!r}): {k}={v!r} conflicts with the model's "
                f"{k}={spec.fixed[k]!r}; choose the model whose name has {k}={v!r} or drop '{k}'"
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
    **kwargs: Any,
) -> nn.Module:
    """Build a model by name.

    Args:
        name: a name from :func:`visattn.list_models` or ``<block>_<backbone>`` (``visattn_``
            prefix accepted).
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
    spec = get_model_spec(name)
    _check_options(spec, kwargs)
    if checkpoint_path is not None and pretrained_backbone is not None:
        raise ValueError(
            f"create_model({spec.name!r}): give checkpoint_path (a whole model) or "
            "pretrained_backbone (backbone weights), not both"
        )
    placements = normalize_placements(list(spec.attention)) + normalize_placements(attention)
    if placements and not spec.placeable:
        raise ValueError(
            f"create_model({spec.name!r}): a Residual Attention Network has no ResNet slots for "
            "'attention' placements; use a ResNet backbone (e.g. 'resnet56_cifar')"
        )
    num_classes = spec.num_classes if num_classes is None else num_classes
    if isinstance(num_classes, bool) or not isinstance(num_classes, int) or num_classes < 0:
        raise ValueError(
            f"create_model({spec.name!r}): num_classes must be an int >= 0 (0 = no classifier), "
            f"got {num_classes!r}"
        )
    check_global_pool(global_pool, num_classes)
    built = {**spec.defaults, **spec.fixed, **kwargs}
    model = spec.builder(**built, num_classes=num_classes, in_chans=in_chans)
    if global_pool != "avg":
        model.reset_classifier(num_classes, global_pool)
    model.attention_paths = apply_placements(model, placements, model_name=spec.name)
    model.model_name = spec.name
    model.pretrained_cfg = pretrained_cfg_for(
        spec, num_classes=num_classes, in_chans=in_chans, options=built
    )
    if checkpoint_path is not None:
        load_checkpoint(model, checkpoint_path)
    if pretrained_backbone is not None:
        load_checkpoint(model, pretrained_backbone, classifier="if_matching")
    return model
