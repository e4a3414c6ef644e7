"""visattn blocks in Ultralytics YOLO model files (the ``yolo`` extra: ``pip install
visattn[yolo]``; ultralytics is AGPL-3.0 and imported only by :func:`register`).

A YAML row ``[from, repeats, VisAttn, [block]]`` or ``[from, repeats, VisAttn, [block,
{option: value, ...}]]`` puts the registered block ``block`` (:func:`visattn.list_blocks`) on the
previous layer's output, with the keyword options of :func:`visattn.create_block` (``init:
identity`` included)::

    backbone:
      ...
      - [-1, 6, C2f, [256, True]]
      - [-1, 1, VisAttn, [cbam, {reduction: 8}]]   # CBAM on the P3 features

    from ultralytics import YOLO
    from visattn.integrations import yolo

    yolo.register()                       # once per process, before building from YAML
    model = YOLO("yolov8n-cbam.yaml")     # every width scale: n, s, m, l, x

:func:`insert_attention` writes such rows into a model dict (``yaml_model_load`` of a bundled
file) after given layers, renumbering the ``from`` indices of the rows that follow.

How registration works. Ultralytics' ``parse_model`` (``ultralytics.nn.tasks``) finds a row's
module by its name in that module's namespace, and gives a module it has no rule for the row's
arguments unchanged, taking its output channels equal to its input's: what an attention block
does. :func:`register` adds :class:`VisAttn` to that namespace and wraps ``parse_model`` so that
each ``VisAttn`` row also gets the channels of the layer it follows (``parse_model``'s own
``c2``, the previous row's output channels after width scaling), so the block is built with
its parameters at parse time at every scale. The model's ``yaml`` keeps the rows as written.

Limits:

* a ``VisAttn`` row takes the previous layer's output (``from`` must be ``-1``); put it right
  after the layer it attends to;
* :func:`register` changes ultralytics' state for the whole process, and must run in every
  process that builds a model from such a YAML. Ultralytics' multi-GPU training starts new
  processes from a generated script, where it has not run (``KeyError: 'VisAttn'``); saved
  ``.pt`` checkpoints hold the modules themselves and load without it;
* a ``DetectionModel`` sets ``eps=1e-3, momentum=0.03`` on every ``BatchNorm2d`` it holds
  (ultralytics' ``initialize_weights``), the blocks' own norms included;
* ultralytics' restricted loading (``ULTRALYTICS_SAFE_LOAD=1``) allows only ultralytics' and
  torch's classes, so it refuses checkpoints that hold visattn blocks.
"""

from __future__ import annotations

import copy
import functools
import json
import os
import sys
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import torch
import torch.nn as nn

from .._extras import missing_extra
from ..blocks import block_info, create_block
from ..blocks.registry import UnknownBlockError
from ..files import atomic_write_text

__all__ = [
    "HEAD_INPUTS",
    "MODULE_NAME",
    "VisAttn",
    "insert_attention",
    "main",
    "model_yaml",
    "register",
    "write_model_yaml",
]

#: the module name YAML rows use
MODULE_NAME = "VisAttn"
_WRAPPED = "_visattn_wrapped"

#: the layers whose outputs the detection head reads (P3, P4, P5) in ultralytics' bundled model
#: files: yolov8 (C2f, C2f, SPPF) and yolo11 (C3k2, C3k2, C2PSA)
HEAD_INPUTS = {"yolov8": (4, 6, 9), "yolo11": (4, 6, 10)}


def _options(where: str, options: Any) -> dict[str, Any]:
    if options is None:
        return {}
    if not isinstance(options, Mapping) or not all(isinstance(k, str) for k in options):
        raise TypeError(
            f"{where}: options must be a mapping of option names to values "
            f"(e.g. {{reduction: 8}}), got {options!r}"
        )
    return dict(options)


class VisAttn(nn.Module):
    """A visattn block as an Ultralytics layer: ``block`` built by
    :func:`visattn.create_block` for ``c1`` channels with ``options``.

    Args:
        c1: input channels (given by the wrapped ``parse_model``, see the module docstring).
        block: a registered block name (or one of timm's attention strings).
        options: keyword options of the block (``{"reduction": 8}``, ``{"init": "identity"}``).
        layer: the row's index in the model file, named in errors (given by ``parse_model``).

    Shapes: ``(N, c1, H, W) -> (N, c1, H, W)``, the block's own.

    Raises:
        UnknownBlockError: (a ``KeyError``) ``block`` is not registered; names close matches.
        TypeError, ValueError: the block's own refusal of ``options`` or of ``c1``.
    """

    def __init__(
        self,
        c1: int,
        block: str,
        options: Mapping[str, Any] | None = None,
        layer: int | None = None,
    ) -> None:
        super().__init__()
        where = f"{MODULE_NAME}({block!r})"
        where = where if layer is None else f"layer {layer} ({where})"
        if isinstance(c1, bool) or not isinstance(c1, int) or c1 < 1:
            raise ValueError(f"{where}: channels must be a positive int, got {c1!r}")
        self.block_name = block
        self.options = _options(where, options)
        if "channels" in self.options:
            raise TypeError(
                f"{where}: option 'channels' is not an option here: the block takes the "
                f"channels of the layer before it ({c1}); remove it"
            )
        try:
            self.block = create_block(block, c1, **self.options)
        except UnknownBlockError as e:  # close matches kept, the layer named
            raise UnknownBlockError(f"{where}: {e}") from e
        except (TypeError, ValueError) as e:  # the block's own refusal, with the layer named
            raise type(e)(f"{where}: {e}") from e

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.block(x)

    def extra_repr(self) -> str:
        return f"{self.block_name!r}, {self.options}" if self.options else repr(self.block_name)


def _is_visattn_row(row: Sequence[Any]) -> bool:
    return len(row) == 4 and row[2] in (MODULE_NAME, VisAttn)


def _check_row(i: int, row: Sequence[Any]) -> tuple[str, dict[str, Any]]:
    """The block name and options of the ``VisAttn`` row ``i``; refuses a malformed row."""
    f, _, _, args = row
    if f != -1:
        raise ValueError(
            f"layer {i} ({MODULE_NAME}): 'from' must be -1 (the block takes the previous "
            f"layer's output), got {f!r}; put the row right after the layer it attends to"
        )
    if not isinstance(args, Sequence) or isinstance(args, str) or not 1 <= len(args) <= 2:
        raise ValueError(
            f"layer {i} ({MODULE_NAME}): arguments must be [block] or [block, {{options}}], "
            f"got {args!r}"
        )
    if not isinstance(args[0], str):
        raise TypeError(
            f"layer {i} ({MODULE_NAME}): the first argument is a block name "
            f"(visattn.list_blocks()), got {args[0]!r}; the channels come from the layer before"
        )
    block_info(args[0])
    return args[0], _options(args[0], args[1] if len(args) == 2 else None)


def _with_channel_args(d: Mapping[str, Any]) -> dict[str, Any]:
    """A copy of the model dict ``d`` whose ``VisAttn`` rows ask ``parse_model`` for their
    input channels, and name their index: arguments ``["c2", "'<block>'", {options}, i]``.
    ``parse_model`` replaces a string argument by its local variable of that name (``c2``: the
    previous row's output channels) or by its Python literal (the quoted block name, so names
    such as ``lambda`` survive). Malformed rows raise ``ValueError``/``TypeError`` naming the
    layer."""
    d = copy.deepcopy(dict(d))
    rows = [*d.get("backbone", []), *d.get("head", [])]
    for i, row in enumerate(rows):
        if _is_visattn_row(row):
            block, options = _check_row(i, row)
            row[3] = ["c2", repr(block), options, i]
    return d


def register() -> None:
    """Make ``VisAttn`` rows usable in Ultralytics YOLO model files, for this process (see the
    module docstring for how, and its limits). Calling it again does nothing.

    Raises:
        ImportError: ultralytics is not installed (``pip install visattn[yolo]``).
    """
    try:
        from ultralytics.nn import tasks
    except ImportError as err:
        raise missing_extra(err, "yolo", "visattn.integrations.yolo.register") from err
    setattr(tasks, MODULE_NAME, VisAttn)
    if getattr(tasks.parse_model, _WRAPPED, False):
        return
    original: Callable[..., Any] = tasks.parse_model

    @functools.wraps(original)
    def parse_model(d: dict[str, Any], ch: int, verbose: bool = True) -> Any:
        return original(_with_channel_args(d), ch, verbose)

    setattr(parse_model, _WRAPPED, True)
    tasks.parse_model = parse_model


def _layer_refs(f: int | Sequence[int], j: int, remap: Callable[[int], int], new_j: int) -> Any:
    """The ``from`` field ``f`` of old row ``j`` (now row ``new_j``) with every layer it names
    moved by ``remap`` (relative entries stay relative)."""
    if isinstance(f, Sequence):
        return [_layer_refs(x, j, remap, new_j) for x in f]
    if f < 0:
        return remap(j + f) - new_j
    return remap(f)


def insert_attention(
    cfg: Mapping[str, Any],
    after: int | Sequence[int],
    block: str,
    options: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """A copy of the YOLO model dict ``cfg`` (``backbone`` and ``head`` lists, e.g. from
    ``ultralytics.nn.tasks.yaml_model_load("yolov8n.yaml")``) with a ``VisAttn`` row of
    ``block`` (and ``options``) after each layer index in ``after``.

    Layers are numbered as ultralytics numbers them, over ``backbone`` then ``head``. The block's
    output replaces the layer's: later rows that read layer ``k`` (by ``-1`` or by its index,
    as the head's ``Concat`` and ``Detect`` rows do) read the block after it, and every index is
    renumbered for the inserted rows. E.g. ``insert_attention(yolov8n, [4, 6, 9], "cbam")`` puts
    CBAM on the P3, P4 and P5 features the head takes.

    Raises:
        ValueError: an index that is not a layer before the last, or repeated.
        UnknownBlockError: ``block`` is not registered.
    """
    if not isinstance(block, str):
        raise TypeError(f"insert_attention: block must be a registered block name, got {block!r}")
    block_info(block)  # an unknown name raises, with close matches
    options = _options(block, options)
    backbone, head = list(cfg["backbone"]), list(cfg["head"])
    rows = backbone + head
    wanted = [after] if isinstance(after, int) else list(after)
    if len(set(wanted)) != len(wanted) or any(
        isinstance(a, bool) or not isinstance(a, int) or not 0 <= a < len(rows) - 1 for a in wanted
    ):
        raise ValueError(
            f"insert_attention: 'after' must be distinct layer indices in 0..{len(rows) - 2} "
            f"(the model has {len(rows)} layers, the last one its head), got {after!r}"
        )
    points = sorted(wanted)

    def new_pos(k: int) -> int:
        return k + sum(a < k for a in points)

    def remap(k: int) -> int:  # where the output of old layer k is read from now
        return new_pos(k) + (k in points)

    args: list[Any] = [block, dict(options)] if options else [block]
    out_backbone, out_head = [], []
    for j, row in enumerate(rows):
        f, n, m, a = copy.deepcopy(row)
        into = out_backbone if j < len(backbone) else out_head
        into.append([_layer_refs(f, j, remap, new_pos(j)), n, m, a])
        if j in points:
            into.append([-1, 1, MODULE_NAME, copy.deepcopy(args)])
    return {**copy.deepcopy(dict(cfg)), "backbone": out_backbone, "head": out_head}


def model_yaml(family: str, block: str, options: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """Ultralytics' bundled ``family`` model file (``"yolov8"`` or ``"yolo11"``, every width
    scale) with ``block`` on the P3, P4 and P5 features the head reads (:data:`HEAD_INPUTS`),
    as a model dict."""
    if family not in HEAD_INPUTS:
        raise ValueError(f"model_yaml: family must be one of {list(HEAD_INPUTS)}, got {family!r}")
    try:
        from ultralytics.nn.tasks import yaml_model_load
    except ImportError as err:
        raise missing_extra(err, "yolo", "visattn.integrations.yolo.model_yaml") from err
    bundled = {
        k: v
        for k, v in yaml_model_load(f"{family}.yaml").items()
        if k not in ("scale", "yaml_file")  # yaml_model_load's own additions
    }
    return insert_attention(bundled, HEAD_INPUTS[family], block, options)


def write_model_yaml(
    path: str | os.PathLike,
    family: str,
    block: str,
    options: Mapping[str, Any] | None = None,
) -> Path:
    """Write :func:`model_yaml` as a model file (YAML in JSON's flow style), one layer per
    line. Name it ``<family><scale>-<block>.yaml`` (``yolov8n-cbam.yaml``): ultralytics reads
    the width scale from the name, as for its own files."""
    cfg = model_yaml(family, block, options)
    lines = [
        f"# Ultralytics {family} with visattn's {block!r} on the P3, P4 and P5 features the head",
        f"# reads (after layers {', '.join(map(str, HEAD_INPUTS[family]))} of {family}.yaml; the "
        "head's indices renumbered).",
        "# Written by visattn.integrations.yolo.write_model_yaml from ultralytics' bundled "
        f"{family}.yaml,",
        "# which is AGPL-3.0 like ultralytics; so is this file. Build it in a process that ran",
        "# visattn.integrations.yolo.register(), or with the `visattn yolo ...` command.",
    ]
    for key, value in cfg.items():
        if key in ("backbone", "head"):
            lines.append(f"{key}:")
            lines += [f"  - {json.dumps(row)}" for row in value]
        elif isinstance(value, Mapping):  # scales: one line per scale
            lines.append(f"{key}:")
            lines += [f"  {k}: {json.dumps(v)}" for k, v in value.items()]
        else:
            lines.append(f"{key}: {json.dumps(value)}")
    out = Path(path)
    atomic_write_text(out, "\n".join(lines) + "\n")
    return out


def main(argv: Sequence[str] | None = None) -> int:
    """``visattn yolo ARGS``: ultralytics' ``yolo`` command (``yolo ARGS``) in a process that ran
    :func:`register`, so model files with ``VisAttn`` rows build, e.g. ``visattn yolo detect
    train model=yolov8n-cbam.yaml data=data.yaml epochs=1``."""
    register()
    from ultralytics.cfg import entrypoint

    args = sys.argv[1:] if argv is None else list(argv)
    sys.argv[:] = ["yolo", *args]  # ultralytics reads its arguments from this very list
    entrypoint()
    return 0
