"""``python -m visattn blocks`` / ``python -m visattn models [PATTERN]``: the zoo as tables."""

from __future__ import annotations

import argparse
import sys

import torch

from . import block_info, create_block, create_model, list_blocks, list_models
from .models import get_model_spec
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
    of the registered models, built with their paper's number of classes (10 for CIFAR)."""
    rows = []
    for name in list_models(pattern):
        spec = get_model_spec(name)
        model = create_model(name, num_classes=spec.num_classes)
        size = model.default_input_size
        with torch.no_grad():
            macs = count_macs(model, (1, *size))
        rows.append(
            [
                name,
                f"{count_params(model) / 1e6:.3f}M",
                _fmt_count(macs),
                "x".join(map(str, size)),
                str(spec.num_classes),
                spec.paper,
            ]
        )
    return _table(["model", "params", "MACs", "input", "classes", "paper"], rows)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m visattn", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    pb = sub.add_parser("blocks", help="list the registered attention blocks")
    pb.add_argument("--family", choices=["channel", "spatial", "hybrid", "residual"])
    pb.add_argument("--channels", type=int, default=256)
    pb.add_argument("--size", type=int, default=14)
    pm = sub.add_parser("models", help="list the registered models")
    pm.add_argument("pattern", nargs="?", default=None, help="fnmatch pattern, e.g. '*cifar*'")
    args = parser.parse_args(argv)
    if args.command == "blocks":
        print(blocks_table(args.channels, args.size, args.family))
    else:
        print(models_table(args.pattern))
    return 0


if __name__ == "__main__":
    sys.exit(main())
