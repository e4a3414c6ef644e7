"""The README's first command gives about the same figure whichever seed a newcomer draws
(trial of round 7: best val/acc 0.993 ... 0.958 over seeds 0-4 on one host, std 1.7 points).

Heavy tier: five quickstart trainings, 45-110 s each on an idle 2-core machine. They run as the
README's command runs (the machine's default thread count, pictures callback left out: it
draws no random numbers from the training's streams)."""

from __future__ import annotations

import os
import re
import statistics
import subprocess
import sys
from pathlib import Path

import pytest
from helpers.paths import REPO

pytestmark = pytest.mark.heavy

SEEDS = range(5)


def _best_val_acc(root: Path, seed: int) -> float:
    env = {k: v for k, v in os.environ.items() if k != "OMP_NUM_THREADS"}  # the default
    done = subprocess.run(
        [
            sys.executable,
            str(REPO / "train_cls.py"),
            "fit",
            "--config",
            str(REPO / "configs" / "quickstart.yaml"),
            f"--seed_everything={seed}",
            f"--trainer.default_root_dir={root}",
            "--trainer.callbacks=null",
            "--trainer.enable_progress_bar=false",
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
        cwd=REPO,
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    found = re.search(r"best val/acc (\d\.\d+)", done.stdout + done.stderr)
    assert found, done.stdout[-2000:]
    return 100 * float(found.group(1))


def test_the_quickstart_is_robust_to_the_seed(tmp_path: Path) -> None:
    accs = [_best_val_acc(tmp_path / f"seed{s}", s) for s in SEEDS]
    mean, sd = statistics.fmean(accs), statistics.stdev(accs)
    assert sd <= 1.5, f"best val/acc over seeds 0-4: {accs}, std {sd:.2f} points (goal 1.5)"
    assert min(accs) >= mean - 3, f"the worst seed is {mean - min(accs):.2f} under the mean"
