"""The model registry: :class:`ModelSpec`, :func:`register_model`, :func:`get_model_spec` and
:func:`list_models`.

A registered model is a keyword-only builder plus the keyword arguments its name fixes (e.g.
``resnet20_cifar``: ``depth=20``), the builder options its authors set differently from the
backbone's default (overridable, e.g. ``gsop_resnet50``: ``last_stride=1``) and, for models
from attention papers, the placements its name fixes (e.g. ``se_resnet50``: SE with ``r=16`` at
the standard position of every block).

Names: every registered model, plus ``<block>_<backbone>`` for any registered block and
placeable backbone (the block at the standard position of every residual block), composed on
demand, e.g. ``cbam_resnet18``. Registered names win over compositions (``bam_resnet50``
places BAM after stages 1-3).

Listing policy: :func:`list_models` lists the registered models and one composition per
registered block, ``<block>_resnet56_cifar``; exactly these are registered in timm as
``visattn_<name>`` (:mod:`visattn.models.timm_bridge`), so ``visattn.list_models()`` and
``timm.list_models("visattn_*")`` agree. Every other composition is built on demand by
:func:`visattn.create_model`, and in timm by passing ``attention=`` to a listed backbone
(``timm.create_model("visattn_resnet18", attention={"name": "cbam"})``).
"""

from __future__ import annotations

import difflib
import fnmatch
import inspect
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import torch.nn as nn

from ..blocks import block_info, list_blocks
from .placement import normalize_placements

__all__ = [
    "LISTED_COMPOSITION_BACKBONE",
    "ModelSpec",
    "UnknownModelError",
    "get_model_spec",
    "list_models",
    "register_model",
]

#: the backbone every block is listed on (``<block>_resnet56_cifar``)
LISTED_COMPOSITION_BACKBONE = "resnet56_cifar"
DATASETS = ("imagenet", "cifar")


class UnknownModelError(KeyError):
    """Raised for a model name that is neither registered nor ``<block>_<backbone>``."""

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else ""


@dataclass(frozen=True, kw_only=True)
class ModelSpec:
    """A registered model: ``builder(**defaults, **fixed, **user options)`` plus placements.

    Attributes:
        name: the registered name (timm's is ``visattn_<name>``).
        builder: keyword-only function that builds the network.
        placeable: whether attention placements apply (ResNets with slots: True; Residual
            Attention Networks: False).
        dataset: ``"imagenet"`` or ``"cifar"``: default input size, classes, normalisation.
        fixed: builder arguments the name fixes; a contradicting user value is an error.
        defaults: builder options the name sets, which a caller may override.
        attention: placements the name fixes (composed before the caller's).
        paper: short citation, and where the model departs from it, the provenance.
        feature_levels: entries of the model's ``feature_info`` (stem + stages): timm's
            ``features_only=True`` returns all of them unless ``out_indices`` says otherwise.
    """

    name: str
    builder: Callable[..., nn.Module]
    placeable: bool
    dataset: str = "imagenet"
    fixed: Mapping[str, Any] = field(default_factory=dict)
    defaults: Mapping[str, Any] = field(default_factory=dict)
    attention: tuple[Mapping[str, Any], ...] = ()
    paper: str = ""
    feature_levels: int = 5

    def __post_init__(self) -> None:
        if self.dataset not in DATASETS:
            raise ValueError(
                f"ModelSpec {self.name!r}: dataset must be one of {list(DATASETS)}, "
                f"got {self.dataset!r}"
            )
        if self.attention and not self.placeable:
            raise ValueError(f"ModelSpec {self.name!r}: placements need placeable=True")

    @property
    def num_classes(self) -> int:
        """Classes of the paper's configuration (10 for CIFAR models, 1000 for ImageNet)."""
        return 10 if self.dataset == "cifar" else 1000

    @property
    def input_size(self) -> tuple[int, int, int]:
        return (3, 32, 32) if self.dataset == "cifar" else (3, 224, 224)

    def options(self) -> list[str]:
        """Keyword options a caller may pass (the builder's, minus those the name fixes)."""
        params = inspect.signature(self.builder).parameters
        return [k for k in params if k not in self.fixed]

    def compose(self, block: str) -> ModelSpec:
        """This backbone with ``block`` at the standard position of every residual block."""
        return ModelSpec(
            name=f"{block}_{self.name}",
            builder=self.builder,
            placeable=True,
            dataset=self.dataset,
            fixed=self.fixed,
            defaults=self.defaults,
            attention=({"name": block},),
            paper=f"{block_info(block).paper} on {self.name}",
            feature_levels=self.feature_levels,
        )


_MODELS: dict[str, ModelSpec] = {}


def register_model(spec: ModelSpec) -> ModelSpec:
    """Add ``spec`` to the registry (and to timm as ``visattn_<name>``); a taken name raises."""
    if not isinstance(spec, ModelSpec):
        raise TypeError(f"register_model expects a ModelSpec, got {type(spec).__name__}")
    if spec.name in _MODELS:
        raise ValueError(f"model {spec.name!r} is already registered")
    normalize_placements(list(spec.attention))  # fail at registration, not at first use
    _MODELS[spec.name] = spec
    from .timm_bridge import register_timm_model  # the bridge imports the registry

    register_timm_model(spec.name)
    return spec


def backbones() -> dict[str, ModelSpec]:
    """Registered placeable models without fixed placements: what ``<block>_`` composes with."""
    return {n: s for n, s in _MODELS.items() if s.placeable and not s.attention}


def _compose(name: str) -> ModelSpec | None:
    bases = backbones()
    for block in list_blocks():
        rest = name[len(block) + 1 :]
        if name.startswith(block + "_") and rest in bases:
            return bases[rest].compose(block)
    return None


def get_model_spec(name: str) -> ModelSpec:
    """The :class:`ModelSpec` of a registered or composed name; unknown names raise
    :class:`UnknownModelError` (a ``KeyError``) naming the closest ones."""
    if not isinstance(name, str):
        raise TypeError(f"model name must be a str, got {type(name).__name__}")
    if name.startswith("visattn_"):  # accept timm's name for the same model
        name = name[len("visattn_") :]
    spec = _MODELS.get(name) or _compose(name)
    if spec is None:
        close = difflib.get_close_matches(name, list_models(), n=3, cutoff=0.6)
        hint = f"; did you mean {', '.join(repr(c) for c in close)}?" if close else ""
        raise UnknownModelError(
            f"unknown model {name!r}{hint} (see visattn.list_models(); '<block>_<backbone>' "
            f"composes a registered block with one of {', '.join(sorted(backbones()))})"
        )
    return spec


def _listed() -> set[str]:
    names = set(_MODELS)
    if LISTED_COMPOSITION_BACKBONE in _MODELS:
        names |= {f"{b}_{LISTED_COMPOSITION_BACKBONE}" for b in list_blocks()}
    return names


def list_models(pattern: str | None = None) -> list[str]:
    """Sorted model names (``fnmatch`` ``pattern``): the registered models and
    ``<block>_resnet56_cifar`` for every registered block. Other ``<block>_<backbone>``
    compositions are accepted by :func:`visattn.create_model` without being listed.

    The same names are registered in timm as ``visattn_<name>``; a block registered after
    import is added to timm the next time this function runs."""
    names = _listed()
    from .timm_bridge import register_timm_models

    register_timm_models(names)
    return sorted(n for n in names if pattern is None or fnmatch.fnmatchcase(n, pattern))
