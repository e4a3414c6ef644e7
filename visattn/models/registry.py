"""The model registry: :class:`ModelSpec`, :func:`register_model`, :func:`get_model_spec` and
:func:`list_models`.

A registered model is a keyword-only builder plus the keyword arguments its name fixes (e.g.
``resnet20_cifar``: ``depth=20``), the builder options its authors set differently from the
backbone's default (overridable, e.g. ``gsop_resnet50``: ``last_stride=1``) and, for models
from attention papers, the placements its name fixes (e.g. ``se_resnet50``: SE with ``r=16`` at
the standard position of every block).

Names: every registered model, plus ``<block>_<backbone>`` for any registered block and
placeable backbone (the block at the standard position of every residual block, or in place of
its 3x3 conv for a block that replaces a conv), composed on
demand, e.g. ``cbam_resnet18``. Registered names win over compositions (``bam_resnet50``
places BAM after stages 1-3).

Listing policy: :func:`list_models` lists the registered models and one composition per
registered block, ``<block>_resnet56_cifar``. Every other composition is built on demand by
:func:`visattn.create_model`, and in timm by passing ``attention=`` to a listed backbone
(``timm.create_model("visattn_resnet18", attention={"name": "cbam"})``).

The registry knows nothing of timm: other layers follow the listed names through
:func:`subscribe` (a listener told of the names that enter and leave the list; it follows the
block registry too, since each new block lists a model). :mod:`visattn.models.timm_bridge`
subscribes once when :mod:`visattn` is imported and registers every listed name in timm as
``visattn_<name>``, so ``visattn.list_models()`` and ``timm.list_models("visattn_*")`` agree
from then on. :func:`registered_model` registers a model for the duration of a ``with`` block.
"""

from __future__ import annotations

import contextlib
import inspect
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from fnmatch import fnmatchcase
from typing import Any

import torch.nn as nn

from .._registry import Listener, Registry, Subscribers, UnknownNameError
from ..blocks import block_info, list_blocks
from ..blocks import registry as _blocks
from .placement import normalize_placements

__all__ = [
    "LISTED_COMPOSITION_BACKBONE",
    "META_KEYS",
    "ModelSpec",
    "UnknownModelError",
    "get_model_spec",
    "list_models",
    "register_model",
    "registered_model",
    "registered_models",
    "subscribe",
    "unregister_model",
]

#: the backbone every block is listed on (``<block>_resnet56_cifar``)
LISTED_COMPOSITION_BACKBONE = "resnet56_cifar"
DATASETS = ("imagenet", "cifar")
#: what :attr:`ModelSpec.meta` may hold, and the type of each value
META_KEYS: dict[str, type] = {
    "paper": str,  # short citation of the paper the model comes from
    "follows": str,  # the official code, config or checkpoint the model follows
    "differs": str,  # where it differs from that official code, and why
    "published_params": str,  # the parameter count as the paper prints it, e.g. "28.09M"
    "official_params": int,  # the official model's exact count, where it differs from ours
}


class UnknownModelError(UnknownNameError):
    """Raised for a model name that is neither registered nor ``<block>_<backbone>``."""


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
        meta: the model's provenance, in the style of torchvision's ``Weights.meta`` (keys in
            :data:`META_KEYS`): ``paper`` (short citation), ``follows`` (the official code or
            config it follows), ``differs`` (where it departs from that code),
            ``published_params`` (the count the paper prints) and ``official_params`` (the
            official model's exact count where ours differs).
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
    meta: Mapping[str, Any] = field(default_factory=dict)
    feature_levels: int = 5

    def __post_init__(self) -> None:
        if not isinstance(self.meta, Mapping):
            raise TypeError(f"ModelSpec {self.name!r}: meta must be a mapping, got {self.meta!r}")
        object.__setattr__(self, "meta", dict(self.meta))  # its own copy of the table's dict
        if self.dataset not in DATASETS:
            raise ValueError(
                f"ModelSpec {self.name!r}: dataset must be one of {list(DATASETS)}, "
                f"got {self.dataset!r}"
            )
        if self.attention and not self.placeable:
            raise ValueError(f"ModelSpec {self.name!r}: placements need placeable=True")
        for key, value in self.meta.items():
            if key not in META_KEYS:
                raise ValueError(
                    f"ModelSpec {self.name!r}: unknown meta key {key!r}; valid: {list(META_KEYS)}"
                )
            if isinstance(value, bool) or not isinstance(value, META_KEYS[key]):
                raise TypeError(
                    f"ModelSpec {self.name!r}: meta[{key!r}] must be {META_KEYS[key].__name__}, "
                    f"got {value!r}"
                )

    @property
    def paper(self) -> str:
        """Short citation (``meta["paper"]``; ``""`` if none)."""
        return self.meta.get("paper", "")

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
        """This backbone with ``block`` where the block's registration says
        (:func:`~visattn.blocks.register_block`'s ``composed_at``): by default at the standard
        position of every residual block, or, for a block that stands in for a convolution
        (lambda, MHSA, halo, CoT, ACmix), in place of each residual branch's 3x3 conv and before
        its BN (position ``conv``), where its paper puts it. With the registration's
        ``composed_zero_init`` (and a builder that takes ``zero_init_residual``), each residual
        branch's last norm starts at zero; a caller may pass ``zero_init_residual=False``."""
        info = block_info(block)
        defaults = dict(self.defaults)
        if info.composed_zero_init and "zero_init_residual" in self.options():
            defaults["zero_init_residual"] = True
        return ModelSpec(
            name=f"{block}_{self.name}",
            builder=self.builder,
            placeable=True,
            dataset=self.dataset,
            fixed=self.fixed,
            defaults=defaults,
            attention=({"name": block, **info.composed_at},),
            meta={"paper": f"{info.paper} on {self.name}"},
            feature_levels=self.feature_levels,
        )


_MODELS: Registry[ModelSpec] = Registry(
    "model",
    error=UnknownModelError,
    hint=lambda _: (
        "see visattn.list_models(); '<block>_<backbone>' composes a registered block with one "
        f"of {', '.join(sorted(backbones()))}"
    ),
)
_SUBSCRIBERS = Subscribers()
_LISTED: set[str] = set()  # what the subscribers were last told is listed


def _tell_subscribers(*_: Any) -> None:
    """Tell the subscribers how the listed names changed since they were last told."""
    global _LISTED
    now = _listed()
    added, removed = sorted(now - _LISTED), sorted(_LISTED - now)
    _LISTED = now
    _SUBSCRIBERS.notify(added, removed)


def register_model(spec: ModelSpec) -> ModelSpec:
    """Add ``spec`` to the registry; a taken name raises ``ValueError``."""
    if not isinstance(spec, ModelSpec):
        raise TypeError(f"register_model expects a ModelSpec, got {type(spec).__name__}")
    if spec.name in _MODELS:
        raise ValueError(f"model {spec.name!r} is already registered")
    normalize_placements(list(spec.attention))  # fail at registration, not at first use
    _MODELS.add(spec.name, spec)
    _tell_subscribers()
    return spec


def unregister_model(name: str) -> ModelSpec:
    """Remove the registered model ``name``; returns its spec. A name that is not registered
    (compositions are not) raises :class:`UnknownModelError`."""
    if name not in _MODELS:
        raise UnknownModelError(f"model {name!r} is not registered")
    spec = _MODELS.remove(name)
    _tell_subscribers()
    return spec


@contextlib.contextmanager
def registered_model(spec: ModelSpec) -> Iterator[ModelSpec]:
    """Register ``spec`` for the duration of a ``with`` block, then unregister it (e.g. for a
    test's own model)."""
    register_model(spec)
    try:
        yield spec
    finally:
        unregister_model(spec.name)


def registered_models() -> list[str]:
    """Sorted names of the registered models (without the ``<block>_<backbone>``
    compositions that :func:`list_models` adds)."""
    return sorted(_MODELS)


def subscribe(listener: Listener) -> Callable[[], None]:
    """Call ``listener(added, removed)`` with the names that enter and leave
    :func:`list_models` from now on (first with every listed name as added), whether a model
    or a block was registered or removed; returns the function that unsubscribes it."""
    return _SUBSCRIBERS.subscribe(listener, _LISTED)


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
        raise _MODELS.unknown(name, choices=list_models())
    return spec


def _listed() -> set[str]:
    names = set(_MODELS)
    if LISTED_COMPOSITION_BACKBONE in _MODELS:
        names |= {f"{b}_{LISTED_COMPOSITION_BACKBONE}" for b in list_blocks()}
    return names


def list_models(pattern: str | None = None) -> list[str]:
    """Sorted model names (``fnmatch`` ``pattern``): the registered models and
    ``<block>_resnet56_cifar`` for every registered block. Other ``<block>_<backbone>``
    compositions are accepted by :func:`visattn.create_model` without being listed."""
    return sorted(n for n in _listed() if pattern is None or fnmatchcase(n, pattern))


_blocks.subscribe(_tell_subscribers)  # a block registered or removed changes the list
