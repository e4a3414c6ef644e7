"""Load weights from disk into a visattn model: torchvision / timm state_dicts, checkpoints that
wrap them (``{"state_dict": ...}``, ``{"model": ...}``) and Lightning checkpoints of
:class:`visattn.training.module.ClassificationModule` (keys prefixed ``net.``).

Keys of attention blocks the file lacks (``*.attn_<slot>.*``, e.g. loading torchvision's
ResNet-50 weights into ``se_resnet50``) are *new*: they keep their initialisation and are
reported (a ``UserWarning`` and :attr:`LoadReport.new_keys`). Anything else that does not match, a
missing or unexpected backbone key or a shape mismatch, is an error.
"""

from __future__ import annotations

import logging
import re
import warnings
from dataclasses import dataclass, field
from os import PathLike
from pathlib import Path

import torch
import torch.nn as nn

from ..constants import SLOT_POSITIONS

__all__ = ["LoadReport", "load_checkpoint"]

_log = logging.getLogger(__name__)
_ATTENTION_KEY = re.compile(rf"(^|\.)attn_({'|'.join(SLOT_POSITIONS)})\.")


@dataclass
class LoadReport:
    """What :func:`load_checkpoint` did."""

    path: str
    loaded: int  # number of tensors loaded
    new_keys: list[str] = field(default_factory=list)  # attention keys the file did not have
    ignored_keys: list[str] = field(default_factory=list)  # Lightning keys outside ``net.``
    # classifier keys kept at their initialisation (``classifier="if_matching"``)
    reset_keys: list[str] = field(default_factory=list)


def _read_state_dict(path: Path) -> tuple[dict[str, torch.Tensor], list[str]]:
    try:
        obj = torch.load(path, map_location="cpu", weights_only=True)
    except FileNotFoundError:
        raise FileNotFoundError(f"checkpoint_path {str(path)!r} does not exist") from None
    except Exception as e:  # unpickling errors come in several types
        raise ValueError(
            f"checkpoint_path {str(path)!r} could not be read as a weights-only torch file "
            f"({type(e).__name__}: {e}); save a plain state_dict with torch.save"
        ) from e
    ignored: list[str] = []
    if isinstance(obj, dict) and "state_dict" in obj and isinstance(obj["state_dict"], dict):
        is_lightning = any(k.startswith("pytorch-lightning") for k in obj)
        obj = obj["state_dict"]
        if is_lightning and any(k.startswith("net.") for k in obj):
            ignored = sorted(k for k in obj if not k.startswith("net."))
            obj = {k[4:]: v for k, v in obj.items() if k.startswith("net.")}
    elif isinstance(obj, dict) and "model" in obj and isinstance(obj["model"], dict):
        obj = obj["model"]  # torchvision reference scripts
    if not isinstance(obj, dict) or not all(isinstance(v, torch.Tensor) for v in obj.values()):
        raise ValueError(
            f"checkpoint_path {str(path)!r} holds no state_dict (a dict of tensors, possibly under "
            "'state_dict' or 'model')"
        )
    if obj and all(k.startswith("module.") for k in obj):  # (Distributed)DataParallel
        obj = {k[len("module.") :]: v for k, v in obj.items()}
    return obj, ignored


def _classifier_prefix(model: nn.Module) -> str:
    cfg = getattr(model, "pretrained_cfg", None) or {}
    return str(cfg.get("classifier") or "fc") + "."


def load_checkpoint(
    model: nn.Module, path: str | PathLike[str], *, classifier: str = "strict"
) -> LoadReport:
    """Load the weights in ``path`` into ``model`` (on CPU first, then copied to the model's
    device); attention keys missing from the file are reported, every other mismatch raises.

    ``classifier="if_matching"`` (backbone weights for a model with another number of classes,
    as timm does for ``pretrained=True``): classifier keys (``pretrained_cfg["classifier"]``,
    ``fc`` by default) that the file lacks or whose shape differs keep their initialisation
    and are reported in :attr:`LoadReport.reset_keys`; every other key stays strict.

    Returns:
        a :class:`LoadReport`; also stored as ``model.checkpoint_report``.

    Raises:
        FileNotFoundError: no such file.
        ValueError: the file holds no state_dict, or its keys / shapes do not match ``model``
            outside the attention slots.
    """
    path = Path(path)
    if classifier not in ("strict", "if_matching"):
        raise ValueError(f"classifier must be 'strict' or 'if_matching', got {classifier!r}")
    state, ignored = _read_state_dict(path)
    own = model.state_dict()
    reset: list[str] = []
    if classifier == "if_matching":
        state, own, reset = _without_mismatched_classifier(model, state, own)
    new_keys = [k for k in own if k not in state and _ATTENTION_KEY.search(k)]
    problems = _mismatches(state, own)
    if problems:
        raise ValueError(
            f"checkpoint {str(path)!r} does not match {type(model).__name__}: {problems}"
        )
    model.load_state_dict(state, strict=False)
    report = LoadReport(str(path), len(state), new_keys, ignored, reset)
    if new_keys:
        msg = (
            f"checkpoint {str(path)!r} has no weights for {len(new_keys)} attention tensor(s) "
            f"(kept at their initialisation): {_few(new_keys)}"
        )
        _log.info(msg)
        warnings.warn(msg, UserWarning, stacklevel=3)
    if reset:
        _log.info(
            "checkpoint %r: classifier %s kept at its initialisation (another num_classes)",
            str(path),
            _few(reset),
        )
    model.checkpoint_report = report
    return report


def _without_mismatched_classifier(
    model: nn.Module, state: dict[str, torch.Tensor], own: dict[str, torch.Tensor]
) -> tuple[dict[str, torch.Tensor], dict[str, torch.Tensor], list[str]]:
    """``state`` and ``own`` without the classifier keys that do not match (missing from the
    file, or of another shape), and those keys (they keep their initialisation)."""
    head = _classifier_prefix(model)
    reset = [
        k for k in own if k.startswith(head) and (k not in state or state[k].shape != own[k].shape)
    ]
    # the file's classifier goes too when ours has none (num_classes=0) or another shape
    drop = reset + [k for k in state if k.startswith(head) and k not in own]
    state = {k: v for k, v in state.items() if k not in drop}
    own = {k: v for k, v in own.items() if k not in reset}
    return state, own, reset


def _mismatches(state: dict[str, torch.Tensor], own: dict[str, torch.Tensor]) -> str:
    """What keeps ``state`` from loading into a model with state_dict ``own``, outside the
    attention slots (whose keys the file may lack): missing, unexpected, mis-shaped keys
    (``""``: nothing)."""
    missing = [k for k in own if k not in state and not _ATTENTION_KEY.search(k)]
    unexpected = [k for k in state if k not in own]
    shapes = [
        f"{k}: file {tuple(state[k].shape)} vs model {tuple(own[k].shape)}"
        for k in state
        if k in own and state[k].shape != own[k].shape
    ]
    problems = []
    if missing:
        problems.append(f"{len(missing)} missing key(s): {_few(missing)}")
    if unexpected:
        problems.append(f"{len(unexpected)} unexpected key(s): {_few(unexpected)}")
    if shapes:
        problems.append(f"{len(shapes)} shape mismatch(es): {_few(shapes)}")
    hint = (
        " (a different num_classes? build the model with the checkpoint's num_classes and "
        "call reset_classifier())"
        if any(s.startswith("fc.") for s in shapes)
        else ""
    )
    return "; ".join(problems) + hint if problems else ""


def _few(items: list[str], n: int = 5) -> str:
    return ", ".join(items[:n]) + (f", ... ({len(items) - n} more)" if len(items) > n else "")
