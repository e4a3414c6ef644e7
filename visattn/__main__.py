"""``python -m visattn blocks`` / ``python -m visattn models [PATTERN]`` / ``python -m visattn
weights [PATTERN]``: the zoo and its released weights as tables;
``python -m visattn export (--ckpt RUN.ckpt | --model NAME) --out model.onnx``: a network as an
ONNX file checked in onnxruntime (or a ``.pt2`` torch.export program);
``python -m visattn ablate SWEEP.yaml --out DIR``: a sweep, exactly as ``python -m visattn.ablate``
(every option passed through);
``python -m visattn yolo ARGS``: ultralytics' ``yolo ARGS`` with model files that hold visattn
blocks (the ``yolo`` extra)."""

from __future__ import annotations

import argparse
import re
import sys
import warnings
from typing import Any

import torch

from . import block_info, create_block, create_model, list_blocks, list_models
from ._registry import close_matches
from ._safe_path import add_import_option, imports_or_exit
from .constants import MAX_IMAGE_SIZE
from .export import ExportError, export_onnx, export_program
from .integrations import yolo
from .models import get_model_spec
from .models.costs import model_costs
from .models.pretrained import PretrainedTag, list_pretrained
from .profile import count_macs, count_params


def _fmt_count(n: float) -> str:
    for unit, scale in (("G", 1e9), ("M", 1e6), ("K", 1e3)):
        if abs(n) >= scale:
            return f"{n / scale:.2f}{unit}"
    return f"{n:.0f}"


def _table(headers: list[str], rows: list[list[str]]) -> str:
    widths = [
        max(len(h), *(len(r[i]) for r in rows)) if rows else len(h) for i, h in enumerate(headers)
    ]
    line = "| " + " | ".join(h.ljust(w) for h, w in zip(headers, widths)) + " |"
    sep = "|" + "|".join("-" * (w + 2) for w in widths) + "|"
    body = ["| " + " | ".join(c.ljust(w) for c, w in zip(r, widths)) + " |" for r in rows]
    return "\n".join([line, sep, *body])


def blocks_table(channels: int = 256, size: int = 14, family: str | None = None) -> str:
    rows = []
    for name in list_blocks(family):
        info = block_info(name)
        blk = create_block(name, channels)
        macs = count_macs(blk, (1, channels, size, size))
        rows.append([name, info.family, info.paper, f"{count_params(blk):,}", _fmt_count(macs)])
    headers = ["block", "family", "paper", "params", f"MACs @ {channels}x{size}x{size}"]
    return _table(headers, rows)


def models_table(pattern: str | None = None) -> str:
    """Name, parameters and multiply-accumulates (one image at the model's default input size)
    of the registered models, built with their paper's number of classes (10 for CIFAR); the
    counts of the named models come from their shipped table (:mod:`visattn.models.costs`)."""
    rows = []
    for name, cost in model_costs(list_models(pattern)).items():
        rows.append(
            [
                name,
                f"{cost.params / 1e6:.3f}M",
                _fmt_count(cost.macs),
                "x".join(map(str, cost.input_size)),
                str(cost.num_classes),
                get_model_spec(name).paper,
            ]
        )
    return _table(["model", "params", "MACs", "input", "classes", "paper"], rows)


#: the most classes ``export --model --num-classes`` builds (ImageNet-21k has 21,843; a billion
#: would ask for a 256 GB classifier)
MAX_EXPORT_CLASSES = 1_000_000


def load_for_export(
    ckpt: str | None, model: str | None, num_classes: int | None
) -> tuple[torch.nn.Module, tuple[int, int, int], str, dict[str, Any]]:
    """The network to export, its input size ``(C, H, W)``, a line saying what it is, and the
    metadata the ONNX file records (``mean``/``std`` of the inputs and ``class_names`` where the
    checkpoint's data options say them; :func:`~visattn.export.export_onnx`'s ``metadata``).

    A checkpoint written by ``train_cls.py`` is loaded with
    :func:`visattn.training.load.load_run` (read once, weights-only; the network rebuilt from
    its saved hyperparameters); its input size and
    normalisation come from the saved data-module options when present. A model name builds
    the untrained registered model at its default input size.

    Raises:
        ValueError: both or neither of ``ckpt`` and ``model``; a file that is no usable
            training checkpoint (:class:`~visattn.models.checkpoint.CheckpointError`, naming the
            file and what is wrong).
        FileNotFoundError: no such file.
    """
    if (ckpt is None) == (model is None):
        raise ValueError("give exactly one of --ckpt PATH and --model NAME")
    if num_classes is not None and (
        isinstance(num_classes, bool) or not 1 <= num_classes <= MAX_EXPORT_CLASSES
    ):
        raise ValueError(
            f"--num-classes must be an integer from 1 to {MAX_EXPORT_CLASSES:,}, got {num_classes}"
        )
    if model is not None:
        spec = get_model_spec(model)
        net = create_model(model, num_classes=num_classes or spec.num_classes)
        return net, tuple(net.default_input_size), f"{model} (untrained)", {}
    if num_classes is not None:
        raise ValueError("--num-classes applies to --model; a checkpoint keeps its own")
    try:
        from .training.load import build_datamodule, load_run
    except ImportError as e:
        raise ImportError(
            f"loading a training checkpoint needs the train extra: pip install 'visattn[train]' "
            f"({e})"
        ) from e
    run = load_run(ckpt, with_data=False)
    what = f"{run.hparams['model']} from {ckpt}"
    recorded = run.data
    if recorded is not None:  # what the run saw, recorded at save: no data folder read
        return (
            run.net,
            tuple(recorded["input_shape"]),
            what + _normalised(recorded),
            {k: recorded[k] for k in ("mean", "std", "dataset", "class_names") if recorded.get(k)},
        )
    dm = None
    if run.data_options:  # a checkpoint of an older visattn: its data options, on this folder
        try:
            dm = build_datamodule(run.data_options)
        except (FileNotFoundError, ValueError) as e:
            warnings.warn(
                f"{ckpt} records no data facts and its data cannot be read here ({e}); "
                "exporting without mean, std and class names",
                stacklevel=2,
            )
    if dm is None:
        return run.net, tuple(run.net.default_input_size), what, {}
    what += _normalised({"mean": dm.mean, "std": dm.std})
    meta: dict[str, Any] = {"mean": list(dm.mean), "std": list(dm.std), "dataset": dm.source.name}
    outputs = getattr(run.net, "num_classes", None)
    if dm.classes and (outputs is None or len(dm.classes) == outputs):
        meta["class_names"] = list(dm.classes)
    elif dm.classes:
        warnings.warn(
            f"the data folder now has {len(dm.classes)} classes for a {outputs}-output network "
            "(renamed or added folders?): exporting without class names",
            stacklevel=2,
        )
    return run.net, dm.image_shape, what, meta


def _normalised(data: dict[str, Any]) -> str:
    mean, std = data.get("mean"), data.get("std")
    if not mean or not std:
        return ""
    return (
        f"; inputs normalised with mean {tuple(round(m, 4) for m in mean)}, "
        f"std {tuple(round(s, 4) for s in std)}"
    )


def export_command(args: argparse.Namespace) -> int:
    try:
        if args.image_size is not None and not 1 <= args.image_size <= MAX_IMAGE_SIZE:
            raise ValueError(
                f"--image-size must be in [1, {MAX_IMAGE_SIZE}] (the training limit), "
                f"got {args.image_size}"
            )
        net, size, what, meta = load_for_export(args.ckpt, args.model, args.num_classes)
    except (ValueError, KeyError, FileNotFoundError, ImportError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    if args.image_size is not None:
        size = (size[0], args.image_size, args.image_size)
    print(f"model: {what}; input {'x'.join(map(str, size))}")
    common = dict(
        input_size=size, dynamic_batch=not args.static_batch, dynamic_size=args.dynamic_size
    )
    try:
        if args.out.endswith(".pt2"):
            report = export_program(net, args.out, **common)
        elif args.out.endswith(".onnx"):
            report = export_onnx(
                net,
                args.out,
                opset=args.opset,
                exporter=args.exporter,
                rtol=args.rtol,
                atol=args.atol,
                metadata=meta,
                **common,
            )
        else:
            print(f"error: --out must end in .onnx or .pt2, got {args.out}", file=sys.stderr)
            return 2
    except ExportError as e:
        print(f"FAILED: {e}", file=sys.stderr)
        return 1
    except ValueError as e:  # an impossible option (opset, size), refused before any work
        print(f"error: {e}", file=sys.stderr)
        return 2
    print(report.summary())
    print("ok")
    return 0


def _transform(tag: PretrainedTag) -> str:
    text = f"{tag.input_size[-1]}px, crop {tag.crop_pct}, {tag.interpolation}"
    if tag.test_input_size is not None:
        text += f" (test {tag.test_input_size[-1]}px"
        text += f", crop {tag.test_crop_pct})" if tag.test_crop_pct is not None else ")"
    return text


def _where(tag: PretrainedTag) -> str:
    if tag.hf_hub_id:
        return f"hub `{tag.hf_hub_id}`"
    if tag.url:
        return f"[direct link]({tag.url})"
    return f"[by hand]({tag.page})"


def weights_table(pattern: str | None = None) -> str:
    """The released tags (``visattn/models/weights/tags.toml``, through
    :func:`~visattn.models.pretrained.list_pretrained`): name, source (key layout), published
    top-1, the publisher's eval transform and where the file is; as Markdown."""
    rows = [
        [f"`{t.name}`", t.source, f"{t.top1:g}", _transform(t), _where(t)]
        for t in list_pretrained(pattern)
    ]
    return _table(["tag", "source", "published top-1", "eval transform", "file"], rows)


def weights_proofs(pattern: str | None = None) -> str:
    """What the offline tests prove for each released layout (a tag's ``proof``), one Markdown
    item per distinct proof, naming the tags it covers."""
    by_proof: dict[tuple[str, str], list[str]] = {}
    for t in list_pretrained(pattern):
        by_proof.setdefault((t.source, t.proof), []).append(f"`{t.name}`")
    return "\n".join(
        f"- **{source}** ({', '.join(names)}): {proof}"
        for (source, proof), names in by_proof.items()
    )


def main(argv: list[str] | None = None) -> int:
    argv = imports_or_exit(sys.argv[1:] if argv is None else list(argv), "python -m visattn")
    if argv[:1] == ["ablate"]:  # its own parser, options and --help
        from .ablate.__main__ import main as ablate_main

        return ablate_main(argv[1:])
    if argv[:1] == ["yolo"]:  # ultralytics' own command line, after register()
        return yolo.main(argv[1:])
    parser = argparse.ArgumentParser(
        prog="python -m visattn",
        description=__doc__.replace("``", ""),  # the docstring's markup, not the terminal's
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    sub = parser.add_subparsers(dest="command", required=True)
    pb = sub.add_parser("blocks", help="list the registered attention blocks")
    pb.add_argument("--family", choices=["channel", "spatial", "hybrid", "residual"])
    pb.add_argument("--channels", type=int, default=256)
    pb.add_argument("--size", type=int, default=14)
    pm = sub.add_parser("models", help="list the registered models")
    pm.add_argument("pattern", nargs="?", default=None, help="fnmatch pattern, e.g. '*cifar*'")
    pw = sub.add_parser("weights", help="list the released weights (tags) and what loads them")
    pw.add_argument("pattern", nargs="?", default=None, help="fnmatch pattern, e.g. 'eca_*'")
    pw.add_argument("--proofs", action="store_true", help="what the tests prove for each layout")
    pe = sub.add_parser(
        "export",
        help="export a checkpoint or a registered model to ONNX (checked in onnxruntime) or .pt2",
    )
    src = pe.add_mutually_exclusive_group(required=True)
    src.add_argument("--ckpt", help="checkpoint written by train_cls.py")
    src.add_argument("--model", help="registered model name (untrained weights)")
    pe.add_argument("--out", required=True, help="output file, .onnx or .pt2")
    add_import_option(pe)
    pe.add_argument("--num-classes", type=int, help="classes of --model (default: its paper's)")
    pe.add_argument("--image-size", type=int, help="input height and width (default: the model's)")
    pe.add_argument("--opset", type=int, help="ONNX opset (default: the exporter's)")
    pe.add_argument("--exporter", choices=["auto", "dynamo", "torchscript"], default="auto")
    pe.add_argument("--static-batch", action="store_true", help="fix the batch at 2")
    pe.add_argument("--dynamic-size", action="store_true", help="symbolic height and width too")
    pe.add_argument("--rtol", type=float, default=1e-3, help="check tolerance (relative)")
    pe.add_argument("--atol", type=float, default=1e-4, help="check tolerance (absolute)")
    sub.add_parser(
        "ablate",
        add_help=False,
        help="run or resume a sweep: the options of python -m visattn.ablate "
        "(python -m visattn ablate --help lists them)",
    )
    sub.add_parser(
        "yolo",
        add_help=False,
        help="ultralytics' yolo command, with visattn's VisAttn rows registered "
        "(e.g. python -m visattn yolo detect train model=yolov8n-cbam.yaml data=DATA.yaml)",
    )
    args = parser.parse_args(argv)
    if args.command == "export":
        return export_command(args)
    if args.command == "blocks":
        print(blocks_table(args.channels, args.size, args.family))
        return 0
    if args.command == "weights":
        names = [t.name for t in list_pretrained()]
        found = list_pretrained(args.pattern) if args.pattern else names
    else:
        names = list_models()
        found = list_models(args.pattern) if args.pattern else names
    if not found:  # an empty table would look like a zoo without them
        kind = "tag" if args.command == "weights" else "model"
        word = args.pattern.strip("*?")
        close = close_matches(word, names)  # a whole name mistyped, or else a part of one
        if not close:
            parts = {w for n in names for w in re.split(r"[_.]", n) if w}  # se, resnet50, in1k
            close = [f"*{w}*" for w in close_matches(word, parts)]
        hint = f"; did you mean {', '.join(map(repr, close))}?" if close else ""
        print(f"error: no {kind} matches {args.pattern!r}{hint}", file=sys.stderr)
        return 1
    if args.command == "weights":
        print(weights_proofs(args.pattern) if args.proofs else weights_table(args.pattern))
    else:
        print(models_table(args.pattern))
    return 0


if __name__ == "__main__":
    sys.exit(main())
