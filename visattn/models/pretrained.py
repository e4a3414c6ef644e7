"""Released ImageNet weights for the named models: pretrained tags and checked converters.

A **tag** (:class:`PretrainedTag`) names a released file for a visattn model, timm style
(``se_resnet50.ra2_in1k``): where it is published (a Hugging Face hub id or a URL), its
checksum where one is published, the evaluation transform its authors used (input size,
``crop_pct``, interpolation, mean/std), its published top-1, and the **source**: the key
layout of the file. Each source has a **converter** that maps the released layout into
visattn's: prefixes and nesting stripped, module names mapped, shapes reconciled (a ``nn.Linear``
weight into a 1x1 conv, a swapped pair of pooled maps).

The released tags are data, ``visattn/models/weights/tags.toml`` (one row per file), and their
converters live in :mod:`visattn.models.weights.converters`, one module per source family;
:func:`register_pretrained` and :func:`register_converter` add one's own.

:func:`load_pretrained` reads a file (weights only: no code runs), converts it and loads it
**strictly both ways**: every tensor of the file must be consumed and every parameter and
buffer of the model filled, with the same shape. Anything else raises ``ValueError`` naming
the leftovers on each side; nothing is loaded partially.

Through timm, ``timm.create_model("visattn_se_resnet50.ra2_in1k", pretrained=True)`` downloads
the tag's file (on a connected machine) and loads it through the same converter; offline,
``pretrained_cfg_overlay=dict(file=PATH)`` loads a local copy.
"""

from __future__ import annotations

import dataclasses
import hashlib
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from importlib import resources
from os import PathLike
from pathlib import Path
from typing import Any

import tomllib
import torch
import torch.nn as nn

from .._registry import Registry
from ..constants import IMAGENET_MEAN, IMAGENET_STD
from .checkpoint import _mismatch_phrases, _shape_mismatches, read_state_dict, unwrap_state_dict
from .weights.converters import CONVERTERS, Converter

__all__ = [
    "PretrainedTag",
    "convert_state_dict",
    "get_pretrained",
    "list_converters",
    "list_pretrained",
    "load_pretrained",
    "read_tag_table",
    "register_converter",
    "register_pretrained",
]


@dataclass(frozen=True, kw_only=True)
class PretrainedTag:
    """A released weight file for a visattn model.

    Attributes:
        model: the visattn model name (``se_resnet50``); timm's is ``visattn_<model>.<tag>``.
        tag: the tag (``ra2_in1k``).
        source: the converter of the file's key layout (:func:`list_converters`).
        top1: the published ImageNet-1k top-1 (%), as its publisher reports it (timm's tags:
            timm's results table at 224x224 with the tag's ``crop_pct``).
        hf_hub_id / url: where the file can be downloaded from (``hf_hub_id`` is what timm
            downloads; ``url`` a direct link).
        page: where the authors publish it for download by hand (a Google Drive, Baidu or
            Dropbox page: no library can fetch those), when there is no direct link.
        sha256: the published checksum or its published prefix (torch.hub's file-name
            convention); empty where none is published.
        input_size, crop_pct, interpolation, mean, std: the evaluation transform.
        test_input_size, test_crop_pct: the publisher's test-time size, where it differs.
        num_classes: the classifier's outputs in the file.
        publisher: who trained it (paper or library).
        proof: what the offline test proves about the mapping.
    """

    model: str
    tag: str
    source: str
    top1: float
    hf_hub_id: str = ""
    url: str = ""
    page: str = ""
    sha256: str = ""
    input_size: tuple[int, int, int] = (3, 224, 224)
    test_input_size: tuple[int, int, int] | None = None
    crop_pct: float = 0.875
    test_crop_pct: float | None = None
    interpolation: str = "bilinear"
    mean: tuple[float, float, float] = IMAGENET_MEAN
    std: tuple[float, float, float] = IMAGENET_STD
    num_classes: int = 1000
    publisher: str = ""
    proof: str = ""
    notes: str = ""

    @property
    def name(self) -> str:
        """``<model>.<tag>``."""
        return f"{self.model}.{self.tag}"

    @property
    def downloadable(self) -> bool:
        """Whether timm can download the file (a hub id or a direct URL)."""
        return bool(self.hf_hub_id or self.url)

    def pretrained_cfg(self) -> dict[str, Any]:
        """timm's pretrained config of this tag (``hf_hub_id``/``url``, eval transform)."""
        cfg: dict[str, Any] = {
            "hf_hub_id": self.hf_hub_id or None,
            "url": self.url if not self.hf_hub_id else "",
            "input_size": self.input_size,
            "crop_pct": self.crop_pct,
            "interpolation": self.interpolation,
            "mean": self.mean,
            "std": self.std,
            "num_classes": self.num_classes,
            "first_conv": "conv1",
            "classifier": "fc",
            "notes": (
                f"source: {self.source}; published top-1 {self.top1:.2f}",
                *([f"download by hand: {self.page}"] if self.page else []),
            ),
        }
        if self.test_input_size is not None:
            cfg["test_input_size"] = self.test_input_size
        if self.test_crop_pct is not None:
            cfg["test_crop_pct"] = self.test_crop_pct
        return cfg


def _tags_of(name: str) -> str:
    model = name.removeprefix("visattn_").split(".", 1)[0]
    same = _TAGS.names(f"{model}.*")
    return (f"{model!r} has {', '.join(same)}; " if same else "") + "see visattn.list_pretrained()"


_TAGS: Registry[PretrainedTag] = Registry("pretrained tag", hint=_tags_of)
#: the released layouts (:mod:`visattn.models.weights.converters`) and users' own
_CONVERTERS: Registry[Converter] = Registry(
    "source", error=ValueError, hint=lambda _: f"known key layouts: {', '.join(list_converters())}"
)
for _source, _fn in CONVERTERS.items():
    _CONVERTERS.add(_source, _fn)


def register_pretrained(tag: PretrainedTag) -> PretrainedTag:
    """Add ``tag``; a taken ``<model>.<tag>`` or an unknown source raises ``ValueError``."""
    if tag.source not in _CONVERTERS:
        raise ValueError(f"pretrained tag {tag.name!r}: {_CONVERTERS.unknown(tag.source)}")
    return _TAGS.add(tag.name, tag)


def list_pretrained(pattern: str | None = None) -> list[PretrainedTag]:
    """The registered tags (``fnmatch`` ``pattern`` on ``<model>.<tag>``), sorted by name; each
    carries its source and published top-1."""
    return [_TAGS[n] for n in _TAGS.names(pattern)]


def get_pretrained(name: str) -> PretrainedTag:
    """The tag ``<model>.<tag>`` (timm's ``visattn_`` prefix accepted); unknown names raise
    ``KeyError`` naming the model's tags or the closest names."""
    key = name[len("visattn_") :] if name.startswith("visattn_") else name
    if key in _TAGS:
        return _TAGS[key]
    raise _TAGS.unknown(name)


def register_converter(source: str) -> Callable[[Converter], Converter]:
    """Decorator: ``fn(state_dict, model) -> state_dict`` maps the layout ``source`` into
    visattn's. A taken name raises ``ValueError``."""

    return _CONVERTERS.register(source)


def list_converters() -> list[str]:
    """Names of the registered key layouts (``source=`` of :func:`load_pretrained`)."""
    return _CONVERTERS.names()


# --------------------------------------------------------------------------- reading files


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def check_sha256(path: str | PathLike[str], expected: str) -> None:
    """Raise ``ValueError`` unless the file's sha256 starts with ``expected`` (a full digest or
    the published prefix, as in torch.hub's ``name-<prefix>.pth``)."""
    expected = expected.lower()
    if not re.fullmatch(r"[0-9a-f]{8,64}", expected):
        raise ValueError(f"sha256 must be 8 to 64 hex digits, got {expected!r}")
    actual = _sha256(Path(path))
    if not actual.startswith(expected):
        raise ValueError(
            f"checksum mismatch for {str(path)!r}: sha256 {actual[: len(expected)]}... but "
            f"{expected}... was published; the file is damaged or not the released one"
        )


# --------------------------------------------------------------------------- converting


def convert_state_dict(
    state: Mapping[str, torch.Tensor], model: nn.Module, source: str
) -> dict[str, torch.Tensor]:
    """``state`` in the layout ``source`` mapped into ``model``'s keys (not yet checked)."""
    return _CONVERTERS.lookup(source)(dict(state), model)


def check_complete(
    state: Mapping[str, torch.Tensor], model: nn.Module, what: str, *, except_prefix: str = ""
) -> None:
    """Raise ``ValueError`` unless ``state`` fills every parameter and buffer of ``model`` with
    the same shape and has nothing else: the leftovers of each side are named (missing: model
    tensors the file does not fill; unexpected: file tensors nothing consumes). Keys starting
    with ``except_prefix`` (a classifier about to be replaced) are left out on both sides."""
    own = model.state_dict()
    if except_prefix:
        own = {k: v for k, v in own.items() if not k.startswith(except_prefix)}
        state = {k: v for k, v in state.items() if not k.startswith(except_prefix)}
    problems = _mismatch_phrases(
        [k for k in own if k not in state],  # not filled
        [k for k in state if k not in own],  # not consumed
        _shape_mismatches(own, state),
    )
    if problems:
        raise ValueError(
            f"{what} does not fit {getattr(model, 'model_name', type(model).__name__)}: "
            + "; ".join(problems)
            + ". Nothing was loaded (a checkpoint of another architecture, or a model built "
            "with other options than the authors')"
        )


def load_pretrained(
    model: nn.Module,
    path: str | PathLike[str],
    *,
    source: str = "visattn",
    sha256: str = "",
) -> nn.Module:
    """Load a released weight file into ``model``, converting its key layout.

    Args:
        model: a visattn model built as the file's authors built it (for a tag, the tag's
            model; :func:`list_pretrained` says which).
        path: the file (``.pth``/``.pth.tar``/``.bin`` read weights-only, or ``.safetensors``).
        source: the file's key layout, one of :func:`list_converters` (``"timm"``,
            ``"cbam_official"``, ``"eca_official"``, ...); ``"visattn"`` for visattn's own.
        sha256: a published checksum (or its published prefix) the file must match.

    Returns:
        ``model``, with every parameter and buffer loaded.

    Raises:
        FileNotFoundError: no such file.
        ValueError: a directory, an empty, unreadable or truncated file
            (:class:`~visattn.models.checkpoint.CheckpointError`, as
            :func:`~visattn.models.checkpoint.read_state_dict` reads it), a checksum mismatch,
            an unknown source, or a file that does not fill the model exactly (leftovers named
            on both sides).
    """
    if sha256:
        check_sha256(path, sha256)
    state = convert_state_dict(read_state_dict(path)[0], model, source)
    check_complete(state, model, f"weight file {str(path)!r} (source {source!r})")
    model.load_state_dict(state, strict=True)
    return model


def timm_filter_fn(tag: PretrainedTag) -> Callable[[dict, nn.Module], dict]:
    """timm's ``pretrained_filter_fn`` for ``tag``: unwrap, convert, check completeness. A model
    with another number of classes than the file (fine-tuning) is checked without its
    classifier, which timm then leaves at its initialisation."""

    def filter_fn(state: dict, model: nn.Module) -> dict:
        out = convert_state_dict(unwrap_state_dict(state)[0], model, tag.source)
        new_head = getattr(model, "num_classes", tag.num_classes) != tag.num_classes
        head = (getattr(model, "pretrained_cfg", None) or {}).get("classifier") or "fc"
        check_complete(
            out,
            model,
            f"pretrained weights of {tag.name!r} (source {tag.source!r})",
            except_prefix=f"{head}." if new_head else "",
        )
        return out

    return filter_fn


# --------------------------------------------------------------------------- the table

#: fields of a tags.toml row that hold tuples (TOML has only arrays)
_TUPLES = ("input_size", "test_input_size", "mean", "std")


def read_tag_table(text: str) -> list[PretrainedTag]:
    """The tags of a ``tags.toml`` text (``[[tag]]`` rows of :class:`PretrainedTag` fields); a
    row with an unknown or missing field raises ``ValueError`` naming the row."""
    fields = {f.name for f in dataclasses.fields(PretrainedTag)}
    tags = []
    for i, row in enumerate(tomllib.loads(text).get("tag", [])):
        where = f"tag row {i + 1} ({row.get('model', '?')}.{row.get('tag', '?')})"
        unknown = sorted(set(row) - fields)
        if unknown:
            raise ValueError(f"{where}: unknown fields {unknown}; valid: {sorted(fields)}")
        values = {k: tuple(v) if k in _TUPLES and v is not None else v for k, v in row.items()}
        try:
            tags.append(PretrainedTag(**values))
        except TypeError as e:
            raise ValueError(f"{where}: {e}") from None
    return tags


TAG_TABLE = "tags.toml"
for _tag in read_tag_table(resources.files(__package__).joinpath("weights", TAG_TABLE).read_text()):
    register_pretrained(_tag)
