"""Tiny training settings shared by the tests that run ``visattn.training.cli`` end to end: the
embedded shapes data at 16 px (48 training images: 3 steps per epoch at batch 16) and a quiet CPU
trainer, so a run costs seconds."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from visattn.training import run

# the data part: 16 px images, 3 training steps per epoch, no worker processes
TINY_DATA = [
    "--data.image_size=16",
    "--data.num_train=48",
    "--data.num_val=32",
    "--data.num_test=32",
    "--data.batch_size=16",
    "--data.num_workers=0",
]
# a CPU trainer without a progress bar or model summary, logging every step
TINY_TRAINER = [
    "--trainer.accelerator=cpu",
    "--trainer.enable_progress_bar=false",
    "--trainer.enable_model_summary=false",
    "--trainer.log_every_n_steps=1",
]
# a whole tiny run: ResNet-20 with SE on shapes
TINY = [
    "--model.model=resnet20_cifar",
    "--model.attention={name: se, args: {reduction: 4}}",
    "--model.lr=0.05",
    "--data.dataset=shapes",
    *TINY_DATA,
    *TINY_TRAINER,
]


def tiny_fit(root: Path, *extra: str) -> dict[str, Any]:
    """``fit`` with :data:`TINY` in ``root``; ``extra`` arguments come last (they win)."""
    return run(["fit", *TINY, f"--trainer.default_root_dir={root}", *extra])
