"""A block in the user's own file, registered with ``@visattn.register_block``, is known by name
in every command once its module is named (``--import my_blocks``, ``imports:`` in a sweep
file): train_cls.py, a ``--jobs 2`` sweep, export. Round 7's trial found every command refusing
it ("unknown block 'chgate'"). The module is the guide's example, ``docs/examples/my_blocks.py``,
run in a working folder of its own as a user would; each command is a process of its own, so
the block never enters this test process's registry."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import yaml

pytest.importorskip("lightning")

from helpers.training import REPO, TINY_DATA, TINY_TRAINER

EXAMPLE = REPO / "docs" / "examples" / "my_blocks.py"
TINY_LCT = [
    "--model.model=resnet20_cifar",
    "--model.attention={name: lct, args: {groups: 4}}",
    "--model.lr=0.05",
    "--data.dataset=shapes",
    "--trainer.max_epochs=1",
    *TINY_DATA,
    *TINY_TRAINER,
]


def _run(args: list[str], cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, *args], cwd=cwd, capture_output=True, text=True, timeout=600
    )


@pytest.fixture(scope="module")
def work(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("user")
    shutil.copy(EXAMPLE, folder / "my_blocks.py")
    return folder


@pytest.mark.slow
def test_without_its_module_the_block_is_refused_with_the_way_to_name_it(work: Path) -> None:
    out = _run([str(REPO / "train_cls.py"), "fit", *TINY_LCT], work)
    assert out.returncode == 2
    last = out.stderr.strip().splitlines()[-1]
    assert "unknown block 'lct'" in last and "--import MODULE" in last


@pytest.mark.slow
def test_a_missing_module_is_one_line(work: Path) -> None:
    out = _run([str(REPO / "train_cls.py"), "--import", "my_blokcs", "fit", *TINY_LCT], work)
    assert out.returncode == 2
    assert out.stderr.strip().splitlines() == [
        f"train_cls.py: error: --import my_blokcs: no module 'my_blokcs' is installed or in the "
        f"working folder ({work}); give a module name (my_blocks for my_blocks.py), not a path"
    ]


@pytest.mark.slow
def test_own_block_trains_records_its_module_and_exports_by_name(work: Path) -> None:
    root = work / "run"
    out = _run(
        [str(REPO / "train_cls.py"), "fit", "--import", "my_blocks", *TINY_LCT,
         f"--trainer.default_root_dir={root}"],
        work,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr[-2000:]
    ckpt = next(root.rglob("last.ckpt"))
    saved = torch.load(ckpt, map_location="cpu", weights_only=True)
    assert saved["visattn_imports"] == ["my_blocks"]
    # a checkpoint names its module but never imports it: the user names it again
    refused = _run(["-m", "visattn", "export", "--ckpt", str(ckpt), "--out", "m.onnx"], work)
    assert refused.returncode == 2
    assert "--import my_blocks" in refused.stderr.strip().splitlines()[-1]
    export = ["-m", "visattn", "export", "--import", "my_blocks", "--ckpt", str(ckpt)]
    exported = _run([*export, "--out", "m.onnx"], work)
    assert exported.returncode == 0, exported.stderr[-2000:]
    assert (work / "m.onnx").is_file()


@pytest.mark.slow
def test_a_sweep_with_its_module_trains_it_in_jobs_workers(work: Path) -> None:
    sweep = {
        "name": "mine",
        "imports": ["my_blocks"],
        "seeds": [0],
        "set": {a[2:].split("=", 1)[0]: yaml.safe_load(a.split("=", 1)[1]) for a in TINY_LCT},
        "variants": [
            {"name": "none", "set": {"model.attention": None}},
            {"name": "lct", "set": {"model.attention": {"name": "lct", "args": {"groups": 4}}}},
        ],
    }
    (work / "sweep.yaml").write_text(yaml.safe_dump(sweep, sort_keys=False))
    out = _run(["-m", "visattn.ablate", "sweep.yaml", "--out", "out", "--jobs", "2"], work)
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-2000:]
    marker = json.loads((work / "out/runs/lct/seed0/result.json").read_text())
    assert marker["row"]["status"] == "ok" and marker["imports"] == ["my_blocks"]
    assert "lct" in (work / "out/report.md").read_text()
