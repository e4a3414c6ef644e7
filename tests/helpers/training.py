"""Tiny training settings shared by the tests that run ``visattn.training.cli`` end to end: the
embedded shapes data at 16 px (48 training images: 3 steps per epoch at batch 16) and a quiet CPU
trainer, so a run costs seconds."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from lightning.pytorch.callbacks import Callback

from visattn.training import run

REPO = Path(__file__).resolve().parents[2]

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


class KillAtEpoch(Callback):
    """Ends the process at once (``os._exit``, no clean-up, as SIGKILL would) when epoch
    ``epoch`` starts: the run is left as a killed run leaves it, checkpoints of the epochs before
    on disk, for a resume test."""

    def __init__(self, epoch: int) -> None:
        self.epoch = epoch

    def on_train_epoch_start(self, trainer: Any, pl_module: Any) -> None:
        if trainer.current_epoch == self.epoch:
            os._exit(9)


def killed_fit(root: Path, epoch: int, *extra: str) -> None:
    """``train_cls.py fit`` with :data:`TINY` in a process of its own that dies as epoch
    ``epoch`` starts (:class:`KillAtEpoch`)."""
    kill = "{class_path: helpers.training.KillAtEpoch, init_args: {epoch: " + f"{epoch}}}}}"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), str(REPO / "tests")])}
    env["OMP_NUM_THREADS"] = "1"  # as the in-process runs it is compared with (conftest)
    done = subprocess.run(
        [
            sys.executable,
            str(REPO / "train_cls.py"),
            "fit",
            *TINY,
            f"--trainer.default_root_dir={root}",
            f"--trainer.callbacks=[{kill}]",
            *extra,
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 9, done.stdout + done.stderr
