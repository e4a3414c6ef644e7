"""``python -m visattn...`` never imports a module from the working folder that the user did
not name (probe of round 7: a planted ``lightning/`` beside an ordinary checkpoint ran its code
on ``python -m visattn export --ckpt``, then the command blamed a missing extra)."""

from __future__ import annotations

import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

#: the top-level packages visattn imports lazily (the extras), and timm, which it imports at once
PLANTED = ("lightning", "albumentations", "onnxruntime", "ray", "cv2", "timm")


def _plant(folder: Path, names: tuple[str, ...] = PLANTED) -> None:
    """A package folder for each name whose import leaves a file ``RAN_<name>`` behind."""
    for name in names:
        (folder / name).mkdir()
        (folder / name / "__init__.py").write_text(
            f"open({str(folder / ('RAN_' + name))!r}, 'w').write('planted code ran')\n"
        )


def _ran(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.glob("RAN_*"))


@pytest.mark.slow
def test_each_lazily_imported_package_comes_from_its_installation(tmp_path: Path) -> None:
    """What ``python -m visattn.X`` does while it locates X (``sys.argv[0]`` is ``-m`` and the
    working folder is first on the path), then every lazily imported package: none is the
    planted one."""
    _plant(tmp_path)
    code = textwrap.dedent(
        f"""
        import importlib, os, sys
        sys.argv[0] = "-m"
        sys.path[0] = os.getcwd()  # -c put '' there; -m puts the folder's path
        import visattn
        sys.argv[0] = "visattn"
        for name in {PLANTED!r}:
            try:
                module = importlib.import_module(name)
            except ImportError:
                continue  # an extra not installed here: nothing ran either
            print(name, module.__file__)
        """
    )
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=300
    )
    assert out.returncode == 0, out.stderr[-2000:]
    assert _ran(tmp_path) == []
    assert str(tmp_path) not in out.stdout
    assert "lightning" in out.stdout  # the dev extra installs it: the check did reach it


@pytest.mark.slow
def test_without_the_guard_the_planted_package_would_run(tmp_path: Path) -> None:
    """The check above can fail: a plain ``-c`` run (no ``-m``: nothing is taken off the path)
    imports the planted ``cv2``."""
    _plant(tmp_path, ("cv2",))
    code = "import os, sys; sys.path[0] = os.getcwd(); import visattn, cv2"
    subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, timeout=300)
    assert _ran(tmp_path) == ["RAN_cv2"]


@pytest.mark.slow
def test_export_of_a_checkpoint_beside_planted_packages_runs_none_of_them(tmp_path: Path) -> None:
    """The probe's case, end to end: an ordinary checkpoint, the six packages planted beside
    it, ``python -m visattn export --ckpt last.ckpt --out b.onnx`` in that folder."""
    pytest.importorskip("lightning")
    pytest.importorskip("onnxruntime")
    from helpers.training import tiny_fit

    ckpt = Path(tiny_fit(tmp_path / "run", "--trainer.max_epochs=1")["last_ckpt"])
    work = tmp_path / "work"
    work.mkdir()
    shutil.copy(ckpt, work / "last.ckpt")
    _plant(work)
    out = subprocess.run(
        [sys.executable, "-m", "visattn", "export", "--ckpt", "last.ckpt", "--out", "b.onnx"],
        cwd=work,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert out.returncode == 0, out.stderr[-2000:]
    assert _ran(work) == [] and (work / "b.onnx").is_file()


@pytest.mark.slow
def test_a_module_the_user_names_is_found_in_the_working_folder(tmp_path: Path) -> None:
    """``--import my_blocks`` is the user's own code: it is found in the working folder, which
    stays off the path for everything else."""
    (tmp_path / "my_blocks.py").write_text("NAME = 'mine'\n")
    _plant(tmp_path, ("ray",))
    code = textwrap.dedent(
        """
        import os, sys
        sys.argv[0] = "-m"
        sys.path[0] = os.getcwd()  # -c put '' there; -m puts the folder's path
        import visattn
        from visattn._safe_path import import_named
        print(import_named("my_blocks").NAME, os.getcwd() in sys.path)
        try:
            import_named("not_there_at_all")
        except ModuleNotFoundError as e:
            print(e)
        """
    )
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=300
    )
    assert out.returncode == 0, out.stderr[-2000:]
    lines = out.stdout.splitlines()
    assert lines[0] == "mine False"
    assert "--import not_there_at_all: no module 'not_there_at_all'" in lines[1]
    assert _ran(tmp_path) == []
