"""Load weights from disk into a visattn model: torchvision / timm state_dicts, checkpoints that
wrap them (``{"state_dict": ...}``, ``{"model": ...}``) and Lightning checkpoints of
:class:`visattn.training.module.ClassificationModule` (keys prefixed ``net.``).

Keys of attention blocks the file lacks (``*.attn_<slot>.*``, e.g. loading torchvision's
ResNet-50 weights into ``se_resnet50``) are *new*: they keep their initialisation and are
reported (a ``UserWarning`` and :attr:`LoadReport.new_keys`). Anything else that does not match, a
missing or unexpected backbone key or a shape mismatch, is an error.

Reading a file (:func:`read_checkpoint`) is weights-only, once; a file that cannot serve (missing,
a directory, empty, not a torch file, damaged, holding code, a plain state_dict where a training
checkpoint is needed, weights of another network) raises :class:`CheckpointError` naming the
file and what is wrong, instead of the loader's own error.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import json
import logging
import pickle
import re
import sys
import warnings
from collections.abc import Mapping
from dataclasses import dataclass, field
from os import PathLike
from pathlib import Path
from typing import Any

import torch
import torch.nn as nn
from safetensors.torch import load_file

from .._values import first_line
from ..constants import HOOK_SLOTS, SLOT_POSITIONS
from ..files import file_digest

__all__ = [
    "SEAL_SUFFIX",
    "TRUSTED_MODULES",
    "CheckpointError",
    "LoadReport",
    "UntrustedClassError",
    "check_recorded_classes",
    "check_seal",
    "check_state_dict_matches",
    "check_training_checkpoint",
    "load_checkpoint",
    "read_checkpoint",
    "read_seal",
    "read_state_dict",
    "training_checkpoint",
    "unwrap_state_dict",
]

_log = logging.getLogger(__name__)
# the keys of attention slots and of blocks placed after/before a module (visattn.models.sites)
_SLOT_ATTRS = [f"attn_{p}" for p in SLOT_POSITIONS] + list(HOOK_SLOTS)
_ATTENTION_KEY = re.compile(rf"(^|\.)({'|'.join(_SLOT_ATTRS)})\.")


@dataclass
class LoadReport:
    """What :func:`load_checkpoint` did."""

    path: str
    loaded: int  # number of tensors loaded
    new_keys: list[str] = field(default_factory=list)  # attention keys the file did not have
    ignored_keys: list[str] = field(default_factory=list)  # Lightning keys outside ``net.``
    # classifier keys kept at their initialisation (``classifier="if_matching"``)
    reset_keys: list[str] = field(default_factory=list)


class CheckpointError(ValueError):
    """A checkpoint file that cannot be used; the message names the file and what is wrong."""


# torch.save writes a zip archive (since torch 1.6) or, in the legacy format, a pickle
_TORCH_MAGIC = (b"PK\x03\x04", b"\x80")


def _unreadable(path: Path) -> str | None:
    """Why ``path`` cannot be a torch file, judged without unpickling it, or None."""
    if path.is_dir():
        found = sorted(str(p.relative_to(path)) for p in path.rglob("*.ckpt"))[:3]
        hint = f" holding {', '.join(found)}" if found else ""
        return f"is a directory{hint}; pass the checkpoint file itself"
    size = path.stat().st_size
    if size == 0:
        return (
            "is empty (0 bytes): its write was interrupted or the disk was full; use another "
            "checkpoint of the run (best-*.ckpt, or last.ckpt of an earlier version)"
        )
    with open(path, "rb") as f:
        head = f.read(8)
    if not head.startswith(_TORCH_MAGIC):
        kind = "a text file" if head.isascii() and head.strip() else f"bytes {head!r}"
        return (
            f"is not a PyTorch checkpoint: it starts with {kind}, where torch.save writes a zip "
            "archive (or a pickle in the legacy format)"
        )
    return None


#: the file beside a checkpoint that holds its SHA-256 as written (``last.ckpt.sha256``)
SEAL_SUFFIX = ".sha256"
_HEX64 = re.compile(r"^[0-9a-fA-F]{64}$")


def read_seal(path: str | PathLike[str]) -> list[tuple[str, int | None]] | None:
    """The digests sealed for the checkpoint ``path`` (``[(sha256, size or None), ...]``), or
    ``None`` when it has no seal. A line is ``SHA256  SIZE`` (what visattn writes) or
    ``SHA256  NAME`` / ``SHA256 *NAME`` (``sha256sum``'s own format, no size). A seal holds two
    lines only while a new checkpoint replaces the old one (either file is then the sealed one).

    Raises:
        CheckpointError: the seal is not in either format.
    """
    seal = Path(f"{path}{SEAL_SUFFIX}")
    try:
        text = seal.read_text()
    except FileNotFoundError:
        return None
    except (OSError, UnicodeDecodeError) as e:
        raise CheckpointError(f"seal {seal} cannot be read ({first_line(e)})") from None
    sealed = []
    for n, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        digest, _, rest = line.strip().partition(" ")
        rest = rest.strip()
        if not _HEX64.match(digest) or not rest:
            raise CheckpointError(
                f"seal {seal} line {n} is not 'SHA256  SIZE' or sha256sum's 'SHA256  NAME' "
                f"(got {line[:80]!r}); remove the seal to read {Path(path).name} unchecked, "
                "or write it again with sha256sum"
            )
        sealed.append((digest.lower(), int(rest) if rest.isdigit() else None))
    if not sealed:
        raise CheckpointError(
            f"seal {seal} is empty; remove it to read {Path(path).name} unchecked"
        )
    return sealed


def check_seal(path: str | PathLike[str]) -> None:
    """Check a checkpoint against the digest sealed beside it when it was written
    (``NAME.sha256``, see :func:`read_seal`); a checkpoint without a seal (written elsewhere,
    or by an older visattn) passes. :func:`read_checkpoint` calls this on every read.

    Raises:
        CheckpointError: the file's SHA-256 (or size) is none of the sealed ones, or the seal
            is unreadable.
    """
    sealed = read_seal(path)
    if sealed is None:
        return
    found = file_digest(path)
    if any(d == found["sha256"] and s in (None, found["size"]) for d, s in sealed):
        return
    raise CheckpointError(
        f"checkpoint {path} is damaged: it changed after it was written (its SHA-256, size "
        f"{found['size']:,} bytes, differs from the one sealed in {Path(path).name}"
        f"{SEAL_SUFFIX} when the run saved it: a bad copy or a disk error); use another "
        "checkpoint of the run "
        "(best-epochNNN.ckpt), or train the run again"
    )


def read_checkpoint(path: str | PathLike[str], *, mmap: bool = False) -> Any:
    """The object saved in ``path`` by ``torch.save``, read once and weights-only (tensors,
    containers and plain values: nothing in the file runs), on the CPU, after checking it
    against its seal where it has one (:func:`check_seal`).

    Args:
        path: the file.
        mmap: map the tensors' storage instead of reading it (zip-format files only; for a
            quick look at keys and shapes).

    Raises:
        FileNotFoundError: no such file.
        CheckpointError: a directory, an empty file, not a torch file, a damaged one, one
            that differs from its seal, or one holding objects a weights-only read refuses;
            the message names the file.
    """
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"checkpoint {path} does not exist")
    problem = _unreadable(path)
    if problem:
        raise CheckpointError(f"checkpoint {path} {problem}")
    check_seal(path)
    if mmap:
        with open(path, "rb") as f:
            mmap = f.read(4) == _TORCH_MAGIC[0]  # the legacy format cannot be mapped
    try:
        return torch.load(path, map_location="cpu", weights_only=True, mmap=mmap)
    except pickle.UnpicklingError as e:
        found = re.search(r"GLOBAL ([\w.]+)", str(e))
        what = f" such as {found.group(1)}" if found else ""
        raise CheckpointError(
            f"checkpoint {path} holds objects{what} beyond tensors and plain containers, which "
            "a weights-only read refuses (unpickling them could run code); save the weights "
            "with torch.save(module.state_dict(), ...)"
        ) from e
    except Exception as e:  # a damaged archive: RuntimeError, EOFError, zipfile errors, ...
        raise _damaged(path, e) from e


def _damaged(path: Path, e: Exception) -> CheckpointError:
    return CheckpointError(
        f"checkpoint {path} is damaged (truncated or corrupted; {first_line(e)}); use another "
        "checkpoint of the run or write it again"
    )


def _read_safetensors(path: Path) -> dict[str, torch.Tensor]:
    """A ``.safetensors`` file's tensors (the format holds nothing else), on the CPU."""
    if not path.exists():
        raise FileNotFoundError(f"checkpoint {path} does not exist")
    if path.is_dir() or path.stat().st_size == 0:
        raise CheckpointError(f"checkpoint {path} {_unreadable(path)}")
    try:
        return load_file(str(path), device="cpu")
    except Exception as e:  # a header or length that does not add up: SafetensorError, ...
        raise _damaged(path, e) from e


#: the packages whose classes a recorded option (a checkpoint's hyper-parameters, a sweep's
#: completion marker) may name: importing any other module would run its top-level code, and a
#: ``.py`` file shipped beside a downloaded checkpoint is found first on ``python -m``'s path
TRUSTED_MODULES = ("torch", "lightning", "pytorch_lightning", "visattn")
#: the options whose values are class paths (LightningCLI's spelling and visattn's own)
_CLASS_KEYS = frozenset(
    {"class_path", "_class_path", "_instantiator", "optimizer", "logger", "callbacks"}
)


class UntrustedClassError(CheckpointError):
    """A recorded option names a class outside :data:`TRUSTED_MODULES`."""


def _class_paths(value: Any, key: str = "") -> list[tuple[str, str]]:
    """``(option, class path)`` for every class path in ``value``, a nested record."""
    if isinstance(value, Mapping):
        found = []
        for k, v in value.items():
            option = f"{key}.{k}" if key else str(k)
            if str(k).rsplit(".", 1)[-1] in _CLASS_KEYS and isinstance(v, str) and "." in v:
                found.append((option, v))
            else:
                found += _class_paths(v, option)
        return found
    if isinstance(value, (list, tuple)):
        return [f for item in value for f in _class_paths(item, key)]
    if isinstance(value, str) and value[:1] in "{[" and key.rsplit(".", 1)[-1] in _CLASS_KEYS:
        try:  # a flat record keeps nested options as JSON text
            return _class_paths(json.loads(value), key)
        except ValueError:
            return []
    return []


def check_recorded_classes(record: Any, source: str) -> None:
    """Refuse a record (read from a file, never typed by the user) that names a class outside
    :data:`TRUSTED_MODULES`, before anything imports it.

    Options given on the command line or in a config file may name any class (they are the
    user's own code); a checkpoint or a completion marker is data, and data must not choose a
    module to import. ``source`` names the file in the message.

    Raises:
        UntrustedClassError: naming the option and the class.
    """
    for option, path in _class_paths(record):
        root = path.split(".", 1)[0]
        if root not in TRUSTED_MODULES:
            raise UntrustedClassError(
                f"{source} records {option} = {path!r}, a class outside "
                f"{', '.join(TRUSTED_MODULES)}; a recorded option may not choose a module to "
                "import (its code would run). Give that option on the command line if you "
                "trust it, or use a checkpoint from a source you trust"
            )
        where = _untrusted_location(root)
        if where:
            raise UntrustedClassError(
                f"{source} records {option} = {path!r}, and {root!r} is {where}; a recorded "
                "option imports only an installed package's own code. Install the package (pip "
                f"install {root.replace('_', '-')}) or run from another folder"
            )


def _untrusted_location(root: str) -> str:
    """Why importing the top-level package ``root`` now could run code that is not the
    installed package's ('' when it could not): it is not imported yet and the import system
    would find it outside the files its installed distribution owns (a folder named so in the
    working folder, found first on ``python -m``'s path), or no distribution owns it."""
    if root in sys.modules:
        return ""
    spec = importlib.util.find_spec(root)
    if spec is None:
        return ""  # not importable at all: the import fails without running anything
    origin = spec.origin or next(iter(spec.submodule_search_locations or []), None)
    if origin is None:
        return "not an installed package"
    found = Path(origin).resolve()
    for name in importlib.metadata.packages_distributions().get(root, []):
        try:
            dist = importlib.metadata.distribution(name)
        except importlib.metadata.PackageNotFoundError:
            continue
        base = Path(str(dist.locate_file(""))).resolve()
        owned = {str(f).replace("\\", "/") for f in dist.files or ()}
        if found.is_relative_to(base) and found.relative_to(base).as_posix() in owned:
            return ""
    return f"not installed here: the import would run {found}"


def training_checkpoint(obj: Any, path: str | PathLike[str]) -> dict[str, Any]:
    """``obj`` (read from ``path``) as a checkpoint written by ``train_cls.py``: a Lightning
    checkpoint dict with the network's ``state_dict`` and the ``hyper_parameters`` that rebuild
    it.

    Raises:
        CheckpointError: anything else, saying what the file holds instead (a plain
            state_dict gets the ways to use one).
        UntrustedClassError: its hyper-parameters name a class outside
            :data:`TRUSTED_MODULES` (:func:`check_recorded_classes`).
    """
    if isinstance(obj, dict) and isinstance(obj.get("state_dict"), dict):
        hparams = obj.get("hyper_parameters")
        if "pytorch-lightning_version" in obj and isinstance(hparams, dict) and "model" in hparams:
            check_recorded_classes(hparams, f"checkpoint {path}")
            check_recorded_classes(obj.get("datamodule_hyper_parameters"), f"checkpoint {path}")
            return obj
    if isinstance(obj, dict) and obj and all(isinstance(v, torch.Tensor) for v in obj.values()):
        raise CheckpointError(
            f"checkpoint {path} is a plain state_dict ({len(obj)} tensors, e.g. "
            f"{next(iter(obj))!r}), not a checkpoint written by train_cls.py: it has no "
            "hyper-parameters to rebuild the network from. Build the network and load it with "
            "visattn.create_model(NAME, checkpoint_path=FILE) (then visattn.export_onnx), or "
            "start a training run from it with --model.model_kwargs "
            "'{checkpoint_path: FILE}'"
        )
    keys = sorted(map(str, obj))[:6] if isinstance(obj, dict) else []
    held = f"a dict with keys {keys}" if isinstance(obj, dict) else f"a {type(obj).__name__}"
    raise CheckpointError(
        f"checkpoint {path} is not a checkpoint written by train_cls.py: it holds {held}, "
        "without the 'state_dict', 'hyper_parameters' (with 'model') and "
        "'pytorch-lightning_version' entries"
    )


def _shape_mismatches(own: Mapping[str, Any], state: Mapping[str, Any]) -> list[str]:
    return [
        f"{k}: file {tuple(state[k].shape)} vs model {tuple(own[k].shape)}"
        for k in state
        if k in own and state[k].shape != own[k].shape
    ]


def _mismatch_phrases(missing: list[str], unexpected: list[str], shapes: list[str]) -> list[str]:
    """One phrase per kind of mismatch, each naming a few keys (empty when all match)."""
    problems = []
    if missing:
        problems.append(f"{len(missing)} missing key(s): {_few(missing)}")
    if unexpected:
        problems.append(f"{len(unexpected)} unexpected key(s): {_few(unexpected)}")
    if shapes:
        problems.append(f"{len(shapes)} shape mismatch(es): {_few(shapes)}")
    return problems


def check_state_dict_matches(
    model: nn.Module, state: Mapping[str, Any], path: str | PathLike[str], hint: str = ""
) -> None:
    """Raise unless ``state`` (the weights in ``path``) has exactly ``model``'s keys and shapes.

    Raises:
        CheckpointError: names the file, the model's class and a few mismatched keys of each
            kind (missing, unexpected, other shape), then ``hint``.
    """
    own = model.state_dict()
    problems = _mismatch_phrases(
        [k for k in own if k not in state],
        [k for k in state if k not in own],
        _shape_mismatches(own, state),
    )
    if problems:
        raise CheckpointError(
            f"checkpoint {path} does not match {type(model).__name__}: "
            + "; ".join(problems)
            + (f". {hint}" if hint else "")
        )


def check_training_checkpoint(path: str | PathLike[str], module: nn.Module) -> dict[str, Any]:
    """Read ``path`` (weights-only, tensors memory-mapped) and check that it is a checkpoint
    written by ``train_cls.py`` whose weights fit ``module`` (a LightningModule: keys
    ``net.*``), before a trainer resumes or tests from it.

    Returns:
        the checkpoint dict.

    Raises:
        FileNotFoundError, CheckpointError: as :func:`read_checkpoint`,
            :func:`training_checkpoint` and :func:`check_state_dict_matches`; a mismatch names
            the model and attention the checkpoint was written for.
    """
    saved = training_checkpoint(read_checkpoint(path, mmap=True), path)
    hparams = saved["hyper_parameters"]
    hint = (
        f"It was written for model {hparams.get('model')!r}, attention "
        f"{hparams.get('attention')!r}, {hparams.get('num_classes')} classes: use the model and "
        "data options it was trained with (its run's config.yaml)"
    )
    check_state_dict_matches(module, saved["state_dict"], path, hint)
    return saved


def unwrap_state_dict(obj: Any) -> tuple[Any, list[str]]:
    """The state_dict inside a saved object, and the keys left out: a Lightning checkpoint's
    ``state_dict`` (its ``net.`` keys, the others left out), ``{"state_dict": ...}`` or
    ``{"model": ...}`` (torchvision's reference scripts), without a ``module.`` prefix on every
    key ((Distributed)DataParallel). Anything else is returned as it is."""
    ignored: list[str] = []
    if isinstance(obj, Mapping) and isinstance(obj.get("state_dict"), Mapping):
        is_lightning = any(str(k).startswith("pytorch-lightning") for k in obj)
        obj = obj["state_dict"]
        if is_lightning and any(k.startswith("net.") for k in obj):
            ignored = sorted(k for k in obj if not k.startswith("net."))
            obj = {k[4:]: v for k, v in obj.items() if k.startswith("net.")}
    elif isinstance(obj, Mapping) and isinstance(obj.get("model"), Mapping):
        obj = obj["model"]
    if isinstance(obj, Mapping) and obj and all(str(k).startswith("module.") for k in obj):
        obj = {k[len("module.") :]: v for k, v in obj.items()}
    return obj, ignored


def read_state_dict(path: str | PathLike[str]) -> tuple[dict[str, torch.Tensor], list[str]]:
    """The state_dict in ``path`` (a ``torch.save`` file read as :func:`read_checkpoint` does, or
    a ``.safetensors`` file), unwrapped by :func:`unwrap_state_dict`; returns it with the keys
    left out (a Lightning checkpoint's keys outside ``net.``).

    Raises:
        FileNotFoundError: no such file.
        CheckpointError: as :func:`read_checkpoint`, or the file holds no dict of tensors.
    """
    path = Path(path)
    raw = _read_safetensors(path) if path.suffix == ".safetensors" else read_checkpoint(path)
    obj, ignored = unwrap_state_dict(raw)
    if not isinstance(obj, Mapping) or not all(isinstance(v, torch.Tensor) for v in obj.values()):
        raise CheckpointError(
            f"checkpoint {path} holds no state_dict (a dict of tensors, possibly under "
            "'state_dict' or 'model')"
        )
    return dict(obj), ignored


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
    state, ignored = read_state_dict(path)
    own = model.state_dict()
    reset: list[str] = []
    if classifier == "if_matching":
        head = _classifier_prefix(model)
        reset = [
            k
            for k in own
            if k.startswith(head) and (k not in state or state[k].shape != own[k].shape)
        ]
        # the file's classifier goes too when ours has none (num_classes=0) or another shape
        drop = reset + [k for k in state if k.startswith(head) and k not in own]
        state = {k: v for k, v in state.items() if k not in drop}
        own = {k: v for k, v in own.items() if k not in reset}
    missing = [k for k in own if k not in state]
    new_keys = [k for k in missing if _ATTENTION_KEY.search(k)]
    missing_backbone = [k for k in missing if not _ATTENTION_KEY.search(k)]
    unexpected = [k for k in state if k not in own]
    shapes = _shape_mismatches(own, state)
    problems = _mismatch_phrases(missing_backbone, unexpected, shapes)
    if problems:
        hint = (
            " (a different num_classes? build the model with the checkpoint's num_classes and "
            "call reset_classifier())"
            if any(s.startswith("fc.") for s in shapes)
            else ""
        )
        raise CheckpointError(
            f"checkpoint {str(path)!r} does not match {type(model).__name__}: "
            + "; ".join(problems)
            + hint
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


def _few(items: list[str], n: int = 5) -> str:
    return ", ".join(items[:n]) + (f", ... ({len(items) - n} more)" if len(items) > n else "")
