"""Every read of a checkpoint checks its seal, the checkpoint and its seal stay consistent
whenever a write stops, and a recorded class is imported only from an installed package."""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest
import torch

import visattn.training.resume as resume_mod
from visattn.models.checkpoint import (
    SEAL_SUFFIX,
    CheckpointError,
    UntrustedClassError,
    check_recorded_classes,
    read_checkpoint,
)
from visattn.training.resume import SealedCheckpointIO


def _saved(tmp_path: Path, epoch: int = 1) -> Path:
    path = tmp_path / "last.ckpt"
    SealedCheckpointIO().save_checkpoint({"epoch": epoch, "w": torch.arange(64.0)}, path)
    return path


def test_a_byte_flipped_inside_a_weight_is_refused_on_any_read(tmp_path: Path) -> None:
    path = _saved(tmp_path)
    data = bytearray(path.read_bytes())
    at = data.find(torch.arange(64.0).numpy().tobytes()[40:48])
    assert at > 0, "the weights' bytes are in the file"
    data[at] ^= 0x01
    path.write_bytes(bytes(data))
    with pytest.raises(CheckpointError, match=r"changed after it was written"):
        read_checkpoint(path)
    with pytest.raises(CheckpointError, match=r"changed after it was written"):
        read_checkpoint(path, mmap=True)  # the quick look a sweep's plan takes too


def test_a_seal_in_sha256sums_own_format_is_read(tmp_path: Path) -> None:
    path = _saved(tmp_path)
    digest = hashlib.sha256(path.read_bytes()).hexdigest()
    Path(f"{path}{SEAL_SUFFIX}").write_text(f"{digest}  last.ckpt\n")
    assert read_checkpoint(path)["epoch"] == 1
    Path(f"{path}{SEAL_SUFFIX}").write_text(f"{digest[:-1]}0  last.ckpt\n")
    with pytest.raises(CheckpointError, match="changed after it was written"):
        read_checkpoint(path)
    Path(f"{path}{SEAL_SUFFIX}").write_text("not a digest\n")
    with pytest.raises(CheckpointError, match=r"line 1 is not 'SHA256  SIZE'"):
        read_checkpoint(path)


@pytest.mark.parametrize("stop_at", ["checkpoint", "final seal"])
def test_a_write_stopped_anywhere_leaves_a_checkpoint_its_seal_names(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, stop_at: str
) -> None:
    path = _saved(tmp_path, epoch=1)
    writes = {"text": 0}
    real_text, real_bytes = resume_mod.atomic_write_text, resume_mod.atomic_write_bytes

    def text(*a, **k):
        writes["text"] += 1
        if stop_at == "final seal" and writes["text"] == 2:
            raise KeyboardInterrupt("stopped")
        return real_text(*a, **k)

    def data(*a, **k):
        if stop_at == "checkpoint":
            raise KeyboardInterrupt("stopped")
        return real_bytes(*a, **k)

    monkeypatch.setattr(resume_mod, "atomic_write_text", text)
    monkeypatch.setattr(resume_mod, "atomic_write_bytes", data)
    with pytest.raises(KeyboardInterrupt):
        SealedCheckpointIO().save_checkpoint({"epoch": 2, "w": torch.arange(64.0)}, path)
    expected = 1 if stop_at == "checkpoint" else 2
    assert read_checkpoint(path)["epoch"] == expected  # whole, and accepted by its seal
    monkeypatch.undo()
    SealedCheckpointIO().save_checkpoint({"epoch": 3, "w": torch.arange(64.0)}, path)
    assert len(Path(f"{path}{SEAL_SUFFIX}").read_text().splitlines()) == 1
    assert read_checkpoint(path)["epoch"] == 3


def test_a_planted_package_in_the_working_folder_is_not_imported(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A trusted name (pytorch_lightning) not yet imported: the working folder's copy would be
    found first on ``python -m``'s path, and its code would run."""
    planted = tmp_path / "pytorch_lightning"
    planted.mkdir()
    (planted / "__init__.py").write_text(
        "import pathlib\npathlib.Path(__file__).parent.with_name('ran.marker').write_text('x')\n"
    )
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    import sys

    for name in [m for m in sys.modules if m.split(".")[0] == "pytorch_lightning"]:
        monkeypatch.delitem(sys.modules, name)
    record = {"optimizer": {"class_path": "pytorch_lightning.Opt"}}
    with pytest.raises(UntrustedClassError, match=r"pytorch_lightning.*ran\.marker|would run"):
        check_recorded_classes(record, "evil.ckpt")
    assert not (tmp_path / "ran.marker").exists()


def test_an_installed_trusted_package_is_accepted() -> None:
    check_recorded_classes({"optimizer": {"class_path": "torch.optim.SGD"}}, "a.ckpt")
