"""The model registry and factory: ``create_model``, ``list_models``, composition
``<block>_<backbone>`` and timm registration.

A registered model is a keyword-only builder plus the keyword arguments its name fixes (e.g.
``resnet20_cifar``: ``depth=20``) and, for models from attention papers, the placements its name
fixes (e.g. ``se_resnet50``: SE with ``r=16`` at the standard position of every block).

Conflicts:

* a keyword argument that contradicts one the name fixes raises ``ValueError``
  (``create_model("resnet20_cifar", depth=56)``); repeating the same value is allowed;
* ``attention=`` on a model whose name already places attention *composes*: the name's
  placements come first, then the given ones; targeting a slot twice raises ``ValueError``
  (e.g. ``se_resnet50`` + CBAM at the standard position), other combinations work
  (``se_resnet50`` + BAM after stages);
* ``attention=`` on a Residual Attention Network raises ``ValueError`` (no ResNet slots).

Names: every model in :func:`list_models`, plus ``<block>_<backbone>`` for any registered block
and ResNet backbone (the block at the standard position of every residual block), e.g.
``cbam_resnet18``. Registered names win over compositions (``bam_resnet50`` places BAM after
stages 1-3). Each is also a timm model ``visattn_<name>``.
"""

from __future__ import annotations

import difflib
import fnmatch
import inspect
import sys
import types
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from os import PathLike
from typing import Any

import torch.nn as nn

from ..blocks import block_info, list_blocks
from .checkpoint import load_checkpoint
from .placement import apply_placements, normalize_placements
from .residual_attention import ResidualAttentionNet
from .resnet import BasicBlock, Bottleneck, PreActBottleneck, ResNet

__all__ = [
    "ModelSpec",
    "UnknownModelError",
    "create_model",
    "get_model_spec",
    "list_models",
    "register_model",
    "register_timm_models",
]

IMAGENET_MEAN, IMAGENET_STD = (0.485, 0.456, 0.406), (0.229, 0.224, 0.225)
CIFAR_MEAN, CIFAR_STD = (0.4914, 0.4822, 0.4465), (0.2470, 0.2435, 0.2616)


class UnknownModelError(KeyError):
    """Raised for a model name that is neither registered nor ``<block>_<backbone>``."""

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else ""


# ----------------------------------------------------------------------------- builders


def _widen(channels: tuple[int, ...], width: float) -> tuple[int, ...]:
    """Channels scaled by ``width`` (rounded, at least 1): the equal-budget baselines of
    ``visattn.ablate`` widen a ResNet until it has as many parameters as a variant."""
    if isinstance(width, bool) or not isinstance(width, int | float) or not width > 0:
        raise ValueError(f"width must be a positive number (1.0: the paper's), got {width!r}")
    return tuple(max(1, round(c * width)) for c in channels)


def resnet_cifar(
    *,
    depth: int,
    shortcut: str = "A",
    num_classes: int = 10,
    in_chans: int = 3,
    drop_rate: float = 0.0,
    drop_path_rate: float = 0.0,
    zero_init_residual: bool = False,
    width: float = 1.0,
) -> ResNet:
    """CIFAR ResNet of He et al. (CVPR 2016, Sec. 4.2): depth ``6n + 2``, BasicBlocks,
    16/32/64 channels (times ``width``), shortcut ``"A"`` (zero padding, the paper's) or ``"B"``
    (projection)."""
    if not isinstance(depth, int) or depth < 8 or (depth - 2) % 6:
        raise ValueError(
            f"CIFAR ResNet depth must be 6n + 2 (20, 32, 44, 56, 110, ...), got {depth}"
        )
    n = (depth - 2) // 6
    return ResNet(
        BasicBlock,
        (n, n, n),
        planes=_widen((16, 32, 64), width),
        stem="cifar",
        stem_channels=_widen((16,), width)[0],
        shortcut=shortcut,
        num_classes=num_classes,
        in_chans=in_chans,
        drop_rate=drop_rate,
        drop_path_rate=drop_path_rate,
        zero_init_residual=zero_init_residual,
    )


def preresnet_cifar(
    *,
    depth: int,
    shortcut: str = "B",
    num_classes: int = 10,
    in_chans: int = 3,
    drop_rate: float = 0.0,
    drop_path_rate: float = 0.0,
    zero_init_residual: bool = False,
    width: float = 1.0,
) -> ResNet:
    """Pre-activation bottleneck ResNet for CIFAR (He et al., ECCV 2016): depth ``9n + 2``,
    64/128/256 output channels (times ``width``), 1x1 projection shortcuts where the shape
    changes."""
    if not isinstance(depth, int) or depth < 11 or (depth - 2) % 9:
        raise ValueError(
            f"pre-activation ResNet depth must be 9n + 2 (164, 1001, ...), got {depth}"
        )
    n = (depth - 2) // 9
    return ResNet(
        PreActBottleneck,
        (n, n, n),
        planes=_widen((16, 32, 64), width),
        stem="cifar",
        stem_channels=_widen((16,), width)[0],
        shortcut=shortcut,
        num_classes=num_classes,
        in_chans=in_chans,
        drop_rate=drop_rate,
        drop_path_rate=drop_path_rate,
        zero_init_residual=zero_init_residual,
    )


_IMAGENET_LAYOUTS: dict[int, tuple[type, tuple[int, ...]]] = {
    18: (BasicBlock, (2, 2, 2, 2)),
    34: (BasicBlock, (3, 4, 6, 3)),
    50: (Bottleneck, (3, 4, 6, 3)),
    101: (Bottleneck, (3, 4, 23, 3)),
    152: (Bottleneck, (3, 8, 36, 3)),
}


def resnet_imagenet(
    *,
    depth: int,
    num_classes: int = 1000,
    in_chans: int = 3,
    drop_rate: float = 0.0,
    drop_path_rate: float = 0.0,
    zero_init_residual: bool = False,
    width: float = 1.0,
) -> ResNet:
    """ImageNet ResNet-18/34/50/101/152 with torchvision's parameter names and counts (channels
    times ``width``)."""
    if depth not in _IMAGENET_LAYOUTS:
        raise ValueError(
            f"ImageNet ResNet depth must be one of {sorted(_IMAGENET_LAYOUTS)}, got {depth}"
        )
    block, layers = _IMAGENET_LAYOUTS[depth]
    return ResNet(
        block,
        layers,
        planes=_widen((64, 128, 256, 512), width),
        stem="imagenet",
        stem_channels=_widen((64,), width)[0],
        shortcut="B",
        num_classes=num_classes,
        in_chans=in_chans,
        drop_rate=drop_rate,
        drop_path_rate=drop_path_rate,
        zero_init_residual=zero_init_residual,
    )


_RAN_MODULES = {56: (1, 1, 1), 92: (1, 2, 3)}


def attention_net(
    *,
    depth: int,
    dataset: str,
    learning: str = "arl",
    mask: str = "mixed",
    p: int = 1,
    t: int = 2,
    r: int = 1,
    num_classes: int = 1000,
    in_chans: int = 3,
    drop_rate: float = 0.0,
) -> ResidualAttentionNet:
    """Residual Attention Network Attention-56/92 (Wang et al., CVPR 2017) for ``dataset``
    ``"imagenet"`` (Table 2) or ``"cifar"`` (see :mod:`visattn.models.residual_attention`)."""
    if depth not in _RAN_MODULES:
        raise ValueError(f"Residual Attention Network depth must be 56 or 92, got {depth}")
    common = dict(
        learning=learning,
        mask=mask,
        p=p,
        t=t,
        r=r,
        num_classes=num_classes,
        in_chans=in_chans,
        drop_rate=drop_rate,
        attention_modules=_RAN_MODULES[depth],
    )
    if dataset == "imagenet":
        return ResidualAttentionNet(
            widths=(256, 512, 1024, 2048),
            mask_depths=(3, 2, 1),
            final_units=3,
            stem="imagenet",
            stem_channels=64,
            **common,
        )
    if dataset == "cifar":
        return ResidualAttentionNet(
            widths=(64, 128, 256, 256),
            mask_depths=(2, 1, 1),
            final_units=2,
            stem="cifar",
            stem_channels=16,
            **common,
        )
    raise ValueError(f"dataset must be 'imagenet' or 'cifar', got {dataset!r}")


# ----------------------------------------------------------------------------- registry


@dataclass(frozen=True)
class ModelSpec:
    """A registered model: ``builder(**fixed, **user kwargs)`` plus fixed placements."""

    name: str
    builder: Callable[..., nn.Module]
    fixed: Mapping[str, Any] = field(default_factory=dict)
    attention: tuple[Mapping[str, Any], ...] = ()
    dataset: str = "imagenet"  # "imagenet" | "cifar": default input, classes, normalisation
    paper: str = ""

    @property
    def placeable(self) -> bool:
        """Whether attention placements apply (ResNet backbones)."""
        return self.builder is not attention_net

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


_MODELS: dict[str, ModelSpec] = {}


def register_model(spec: ModelSpec) -> ModelSpec:
    """Add ``spec`` to the registry (and to timm as ``visattn_<name>``); a taken name raises."""
    if spec.name in _MODELS:
        raise ValueError(f"model {spec.name!r} is already registered")
    normalize_placements(list(spec.attention))  # fail at registration, not at first use
    _MODELS[spec.name] = spec
    _register_timm(spec.name)
    return spec


def _backbones() -> dict[str, ModelSpec]:
    return {n: s for n, s in _MODELS.items() if s.placeable and not s.attention}


def _compose(name: str) -> ModelSpec | None:
    backbones = _backbones()
    for block in list_blocks():
        rest = name[len(block) + 1 :]
        if name.startswith(block + "_") and rest in backbones:
            base = backbones[rest]
            paper = f"{block_info(block).paper} on {rest}"
            return ModelSpec(
                name, base.builder, base.fixed, ({"name": block},), base.dataset, paper
            )
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
            f"composes a registered block with one of {', '.join(sorted(_backbones()))})"
        )
    return spec


def list_models(pattern: str | None = None) -> list[str]:
    """Sorted registered model names (``fnmatch`` ``pattern``), including
    ``<block>_resnet56_cifar`` for every registered block. Other ``<block>_<backbone>``
    compositions are accepted by :func:`create_model` without being listed."""
    names = set(_MODELS) | {f"{b}_resnet56_cifar" for b in list_blocks()}
    return sorted(n for n in names if pattern is None or fnmatch.fnmatchcase(n, pattern))


def create_model(
    name: str,
    *,
    num_classes: int = 1000,
    in_chans: int = 3,
    attention: Any = None,
    checkpoint_path: str | PathLike[str] | None = None,
    **kwargs: Any,
) -> nn.Module:
    """Build a model by name.

    Args:
        name: a name from :func:`list_models` or ``<block>_<backbone>`` (``visattn_`` prefix
            accepted).
        num_classes: classifier outputs.
        in_chans: input channels.
        attention: placement(s) to add (see ``shared/API.md``); composed after those the name
            fixes.
        checkpoint_path: a state_dict file to load (torchvision, timm, Lightning ``.ckpt``);
            attention weights it lacks are reported in ``model.checkpoint_report``.
        **kwargs: builder options (e.g. ``shortcut="B"``, ``drop_rate``, ``learning="nal"``).

    Returns:
        an ``nn.Module`` with ``num_classes``, ``default_input_size`` ``(C, H, W)``,
        ``attention_paths`` (module paths of the placed blocks), ``pretrained_cfg`` (timm's data
        config) and timm's ``forward_features`` / ``forward_head`` / ``reset_classifier``.

    Raises:
        UnknownModelError: (a ``KeyError``) unknown name, with close matches.
        TypeError: an unknown option.
        ValueError: an option conflicting with the name, or a bad placement.
    """
    spec = get_model_spec(name)
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
    placements = list(spec.attention) + normalize_placements(attention)
    if placements and not spec.placeable:
        raise ValueError(
            f"create_model({spec.name!r}): a Residual Attention Network has no ResNet slots for "
            "'attention' placements; use a ResNet backbone (e.g. 'resnet56_cifar')"
        )
    model = spec.builder(
        **{**spec.fixed, **kwargs, "num_classes": num_classes, "in_chans": in_chans}
    )
    model.attention_paths = apply_placements(model, placements, model_name=spec.name)
    model.model_name = spec.name
    model.pretrained_cfg = _pretrained_cfg(spec, model)
    model.default_cfg = model.pretrained_cfg
    if checkpoint_path is not None:
        load_checkpoint(model, checkpoint_path)
    return model


def _pretrained_cfg(spec: ModelSpec, model: nn.Module | None = None) -> dict[str, Any]:
    cifar = spec.dataset == "cifar"
    return {
        "architecture": f"visattn_{spec.name}",
        "url": "",
        "num_classes": getattr(model, "num_classes", spec.num_classes),
        "input_size": getattr(model, "default_input_size", spec.input_size),
        "pool_size": (8, 8) if cifar else (7, 7),
        "crop_pct": 1.0 if cifar else 0.875,
        "interpolation": "bilinear",
        "mean": CIFAR_MEAN if cifar else IMAGENET_MEAN,
        "std": CIFAR_STD if cifar else IMAGENET_STD,
        "first_conv": "conv1" if spec.placeable else "stem.0",
        "classifier": "fc",
        "paper": spec.paper,
    }


# ----------------------------------------------------------------------------- timm

_TIMM_MODULE = "visattn.models._timm_entrypoints"


def _timm_module() -> types.ModuleType:
    mod = sys.modules.get(_TIMM_MODULE)
    if mod is None:
        mod = types.ModuleType(_TIMM_MODULE, "timm entrypoints of the visattn models")
        mod.__all__ = []
        mod.default_cfgs = {}
        sys.modules[_TIMM_MODULE] = mod
    return mod


def _register_timm(name: str) -> None:
    from timm.models import is_model
    from timm.models import register_model as timm_register

    timm_name = f"visattn_{name}"
    if is_model(timm_name):
        return

    def entrypoint(pretrained: bool = False, **kwargs: Any) -> nn.Module:
        if pretrained:
            raise ValueError(
                f"{timm_name} has no pretrained weights to download; pass "
                "checkpoint_path=<a state_dict file> instead"
            )
        for k in ("pretrained_cfg", "pretrained_cfg_overlay", "cache_dir"):
            kwargs.pop(k, None)
        return create_model(name, **kwargs)

    entrypoint.__name__ = entrypoint.__qualname__ = timm_name
    entrypoint.__module__ = _TIMM_MODULE
    entrypoint.__doc__ = f"visattn model {name!r} (see visattn.create_model)."
    mod = _timm_module()
    setattr(mod, timm_name, entrypoint)
    spec = get_model_spec(name)
    mod.default_cfgs[timm_name] = {k: v for k, v in _pretrained_cfg(spec).items() if k != "paper"}
    timm_register(entrypoint)


def register_timm_models() -> list[str]:
    """Register ``visattn_<name>`` in timm for every listed model and every
    ``<block>_<backbone>`` composition (run at import; call again after registering new blocks).
    Returns the timm names."""
    names = set(list_models())
    names |= {f"{b}_{k}" for b in list_blocks() for k in _backbones()}
    for n in sorted(names):
        _register_timm(n)
    return sorted(f"visattn_{n}" for n in names)


# ----------------------------------------------------------------------------- the zoo

_CIFAR_PAPER = "He et al., CVPR 2016"
_IMAGENET_PAPER = "He et al., CVPR 2016"
_SE16 = {"name": "se", "args": {"reduction": 16}}

for _d in (20, 32, 44, 56, 110):
    register_model(
        ModelSpec(f"resnet{_d}_cifar", resnet_cifar, {"depth": _d}, (), "cifar", _CIFAR_PAPER)
    )
register_model(
    ModelSpec(
        "preresnet164_cifar", preresnet_cifar, {"depth": 164}, (), "cifar", "He et al., ECCV 2016"
    )
)
for _d in sorted(_IMAGENET_LAYOUTS):
    register_model(
        ModelSpec(f"resnet{_d}", resnet_imagenet, {"depth": _d}, (), "imagenet", _IMAGENET_PAPER)
    )
for _d in (56, 92):
    register_model(
        ModelSpec(
            f"attention{_d}",
            attention_net,
            {"depth": _d, "dataset": "imagenet"},
            (),
            "imagenet",
            "Wang et al., CVPR 2017",
        )
    )
    register_model(
        ModelSpec(
            f"attention{_d}_cifar",
            attention_net,
            {"depth": _d, "dataset": "cifar"},
            (),
            "cifar",
            "Wang et al., CVPR 2017",
        )
    )

_PAPER_MODELS: list[tuple[str, str, tuple[dict[str, Any], ...], str]] = [
    # (name, backbone, placements, paper)
    ("se_resnet20_cifar", "resnet20_cifar", (_SE16,), "Hu et al., CVPR 2018"),
    ("se_resnet56_cifar", "resnet56_cifar", (_SE16,), "Hu et al., CVPR 2018"),
    ("se_resnet110_cifar", "resnet110_cifar", (_SE16,), "Hu et al., CVPR 2018"),
    ("se_resnet50", "resnet50", (_SE16,), "Hu et al., CVPR 2018"),
    ("se_resnet101", "resnet101", (_SE16,), "Hu et al., CVPR 2018"),
    ("cbam_resnet50", "resnet50", ({"name": "cbam"},), "Woo et al., ECCV 2018"),
    (
        "bam_resnet50",
        "resnet50",
        ({"name": "bam", "position": "stage", "stages": [1, 2, 3]},),
        "Park et al., BMVC 2018",
    ),
    ("eca_resnet50", "resnet50", ({"name": "eca"},), "Wang et al., CVPR 2020"),
    ("gsop_resnet50", "resnet50", ({"name": "gsop", "blocks": "last"},), "Gao et al., CVPR 2019"),
    (
        "gc_resnet50",
        "resnet50",
        ({"name": "gc", "args": {"reduction": 16}},),
        "Cao et al., ICCVW 2019",
    ),
]
for _name, _base, _placements, _paper in _PAPER_MODELS:
    _b = _MODELS[_base]
    register_model(ModelSpec(_name, _b.builder, _b.fixed, _placements, _b.dataset, _paper))

register_timm_models()
