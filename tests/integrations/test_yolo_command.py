"""YOLO as its users run it: the shipped model files (``configs/yolo/``) are what
``write_model_yaml`` writes from ultralytics' bundled files now, each builds with its blocks at
the head's inputs, and ``python -m visattn yolo`` (ultralytics' ``yolo`` command after
``register()``) trains and validates one of them in a fresh process, on a tiny generated
detection set, as the deploy guide shows."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import yaml
from PIL import Image

pytest.importorskip("ultralytics")

from ultralytics import YOLO

from visattn.integrations import yolo

pytestmark = pytest.mark.xdist_group("yolo")
ROOT = Path(__file__).resolve().parents[2]
SHIPPED = sorted((ROOT / "configs" / "yolo").glob("*.yaml"))


def _family_and_block(path: Path) -> tuple[str, str]:
    stem, block = path.stem.split("-", 1)  # yolov8n-cbam: family yolov8, scale n, block cbam
    return stem[:-1], block


def test_every_family_ships_cbam_se_and_eca() -> None:
    assert {p.name for p in SHIPPED} == {
        f"{f}n-{b}.yaml" for f in ("yolov8", "yolo11") for b in ("cbam", "se", "eca")
    }


@pytest.mark.parametrize("path", SHIPPED, ids=lambda p: p.name)
def test_shipped_file_is_what_write_model_yaml_writes_now(path: Path, tmp_path: Path) -> None:
    """A changed ultralytics or insert_attention without regenerating the files fails here."""
    family, block = _family_and_block(path)
    fresh = yolo.write_model_yaml(tmp_path / path.name, family, block)
    assert fresh.read_text() == path.read_text()
    assert yaml.safe_load(path.read_text()) == yolo.model_yaml(family, block)


@pytest.mark.parametrize("path", SHIPPED, ids=lambda p: p.name)
def test_shipped_file_builds_with_its_block_on_the_heads_inputs(path: Path) -> None:
    yolo.register()
    family, block = _family_and_block(path)
    model = YOLO(str(path)).model
    blocks = [m for m in model.model if isinstance(m, yolo.VisAttn)]
    assert len(blocks) == 3 and all(b.block_name == block for b in blocks)
    # each block follows a layer the head reads: the row before it in the bundled file
    assert [b.i - k for k, b in enumerate(blocks, 1)] == list(yolo.HEAD_INPUTS[family])
    # the head's Concat rows read the blocks, not the layers before them
    concat_inputs = {f for m in model.model if type(m).__name__ == "Concat" for f in m.f}
    assert {b.i for b in blocks[:2]} <= concat_inputs


def _tiny_detection_set(root: Path, n: int = 8, size: int = 64) -> Path:
    """``n`` train and ``n`` val images, each with one filled square of class 0 or 1 (red or
    blue), in ultralytics' layout; returns the data file."""
    rng = np.random.default_rng(0)
    for split in ("train", "val"):
        (root / "images" / split).mkdir(parents=True)
        (root / "labels" / split).mkdir(parents=True)
        for i in range(n):
            img = np.full((size, size, 3), 128, np.uint8)
            cls = i % 2
            side = int(rng.integers(16, 32))
            x0, y0 = (int(v) for v in rng.integers(0, size - side, 2))
            img[y0 : y0 + side, x0 : x0 + side] = (220, 30, 30) if cls == 0 else (30, 30, 220)
            Image.fromarray(img).save(root / "images" / split / f"{i}.png")
            cx, cy, w = (x0 + side / 2) / size, (y0 + side / 2) / size, side / size
            (root / "labels" / split / f"{i}.txt").write_text(f"{cls} {cx} {cy} {w} {w}\n")
    data = root / "data.yaml"
    data.write_text(
        yaml.safe_dump(
            {
                "path": str(root),
                "train": "images/train",
                "val": "images/val",
                "names": {0: "red", 1: "blue"},
            }
        )
    )
    return data


def _yolo_command(args: list[str], cwd: Path) -> subprocess.CompletedProcess:
    env = {
        **os.environ,
        "PYTHONPATH": str(ROOT),
        "YOLO_OFFLINE": "1",
        "YOLO_AUTOINSTALL": "false",
        "YOLO_CONFIG_DIR": str(cwd / "settings"),
        "YOLO_VERBOSE": "true",  # as a user sees it (the test session's conftest quiets it)
    }
    return subprocess.run(
        [sys.executable, "-m", "visattn", "yolo", *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )


def test_visattn_yolo_trains_and_validates_a_shipped_file_in_a_fresh_process(
    tmp_path: Path,
) -> None:
    data = _tiny_detection_set(tmp_path / "shapes")
    common = ["imgsz=64", "batch=4", "workers=0", "device=cpu", "plots=False"]
    model = ROOT / "configs" / "yolo" / "yolov8n-cbam.yaml"
    train = _yolo_command(
        [
            "detect",
            "train",
            f"model={model}",
            f"data={data}",
            "epochs=1",
            "amp=False",
            f"project={tmp_path / 'runs'}",
            "name=cbam",
            "exist_ok=True",
            *common,
        ],
        tmp_path,
    )
    assert train.returncode == 0, train.stdout[-3000:] + train.stderr[-3000:]
    weights = tmp_path / "runs" / "cbam" / "weights" / "last.pt"
    assert weights.is_file(), train.stdout[-2000:] + train.stderr[-2000:]
    val = _yolo_command(
        [
            "detect",
            "val",
            f"model={weights}",
            f"data={data}",
            f"project={tmp_path / 'runs'}",
            "name=val",
            "exist_ok=True",
            *common,
        ],
        tmp_path,
    )
    assert val.returncode == 0, val.stdout[-3000:] + val.stderr[-3000:]
    assert "mAP50" in val.stdout + val.stderr
    trained = YOLO(str(weights)).model
    assert sum(isinstance(m, yolo.VisAttn) for m in trained.model) == 3


def test_plain_yolo_command_line_without_register_names_the_missing_row(tmp_path: Path) -> None:
    """Why the wrapper exists: ultralytics' parse_model alone does not know the row."""
    out = subprocess.run(
        [
            sys.executable,
            "-c",
            "from ultralytics import YOLO; import sys; YOLO(sys.argv[1])",
            str(ROOT / "configs" / "yolo" / "yolov8n-se.yaml"),
        ],
        env={**os.environ, "YOLO_OFFLINE": "1", "YOLO_CONFIG_DIR": str(tmp_path)},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode != 0 and "VisAttn" in out.stderr
