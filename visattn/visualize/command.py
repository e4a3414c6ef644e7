"""``python -m visattn.visualize --ckpt PATH --out DIR``: attention pictures of a training
checkpoint's validation images.

:func:`visualize` loads the checkpoint (:func:`visattn.training.load.load_run`: the network and
the data module rebuilt from the hyper-parameters saved in it) and draws its first validation
images with :func:`visattn.visualize.figures.visualize_model`. This module sits above
:mod:`visattn.training` (it needs the ``train`` extra to read checkpoints); the maps, the scores
and the figures of the rest of :mod:`visattn.visualize` sit below it.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from .._safe_path import add_import_option, imports_or_exit
from .._values import OptionError
from ..models.checkpoint import CheckpointError
from ..training.load import load_run
from .figures import visualize_model
from .maps import validation_pictures

__all__ = ["main", "visualize"]


def visualize(
    ckpt_path: str | Path,
    out_dir: str | Path,
    num_images: int = 4,
    *,
    indices: Sequence[int] | None = None,
    data_overrides: Mapping[str, Any] | None = None,
    device: str = "cpu",
) -> list[Path]:
    """Attention pictures of validation images for a training checkpoint.

    Args:
        ckpt_path: a checkpoint written by train_cls.py (or the ablation runner).
        out_dir: output folder; files ``attention_val<index>.png``.
        num_images: how many validation images (the first ones) when ``indices`` is not given.
        indices: validation-set indices to draw.
        data_overrides: data-module options to change, e.g. ``{"root": "/data/cifar"}`` when
            the data lives elsewhere than at training time.
        device: where to run the network.

    Returns:
        The PNG paths, one per image.
    """
    loaded = load_run(ckpt_path, data_overrides=data_overrides, device=device)
    net, dm = loaded.net, loaded.datamodule
    if dm is None:
        raise ValueError(f"{ckpt_path} holds no data-module options to draw validation images from")
    dm.setup("validate")
    if indices is None:
        if num_images < 1:
            raise ValueError(f"num_images must be >= 1, got {num_images}")
        indices = list(range(min(num_images, len(dm.val_dataset))))
    pictures = validation_pictures(dm, indices)
    return visualize_model(
        net,
        pictures.pop("images"),
        out_dir,
        names=[f"attention_val{i:05d}" for i in indices],
        **pictures,
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m visattn.visualize",
        description="Write attention-map pictures of validation images for a checkpoint.",
    )
    parser.add_argument("--ckpt", required=True, help="checkpoint written by train_cls.py")
    add_import_option(parser)
    parser.add_argument("--out", required=True, help="output folder")
    parser.add_argument("--num-images", type=int, default=4)
    parser.add_argument("--indices", type=int, nargs="+", help="validation indices to draw")
    parser.add_argument("--data-root", help="data root, when it moved since training")
    parser.add_argument("--device", default="cpu")
    argv = imports_or_exit(sys.argv[1:] if argv is None else list(argv), parser.prog)
    args = parser.parse_args(argv)
    overrides = {"root": args.data_root} if args.data_root else None
    try:
        paths = visualize(
            args.ckpt,
            args.out,
            args.num_images,
            indices=args.indices,
            data_overrides=overrides,
            device=args.device,
        )
    except (CheckpointError, FileNotFoundError, OptionError) as e:  # the file or an option
        print(f"{parser.prog}: error: {e}", file=sys.stderr)
        return 2
    for p in paths:
        print(p)
    return 0
