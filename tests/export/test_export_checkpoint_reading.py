"""``python -m visattn export --ckpt`` reads the checkpoint once, weights-only, and builds the
network from that one object; a file that cannot serve is named with what is wrong (empty, not a
torch file, damaged, holding code, a plain state_dict, a directory, weights that do not fit the
saved hyper-parameters) instead of a loader's raw error."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch

pytest.importorskip("lightning")

from helpers.training import tiny_fit

from visattn.__main__ import load_for_export, main


@pytest.fixture(scope="module")
def run_ckpt(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A real train_cls.py checkpoint: one epoch of ResNet-20 + SE on 16 px shapes."""
    root = tmp_path_factory.mktemp("run")
    return Path(tiny_fit(root, "--trainer.max_epochs=1")["last_ckpt"])


def _export_error(ckpt: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> str:
    rc = main(["export", "--ckpt", str(ckpt), "--out", str(tmp_path / "m.onnx")])
    err = capsys.readouterr().err
    assert rc == 2, err
    assert not (tmp_path / "m.onnx").exists()
    assert err.startswith("error: ") and "Traceback" not in err
    return err


def test_export_reads_the_checkpoint_once_and_weights_only(
    run_ckpt: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    saved = torch.load(run_ckpt, map_location="cpu", weights_only=True)  # the reference copy
    calls: list[object] = []
    real_load = torch.load

    def spy(*args, **kwargs):
        calls.append(kwargs.get("weights_only"))
        return real_load(*args, **kwargs)

    monkeypatch.setattr(torch, "load", spy)
    net, size, what, _ = load_for_export(str(run_ckpt), None, None)
    assert calls == [True], f"torch.load calls (weights_only per call): {calls}"
    assert size == (3, 16, 16) and "resnet20_cifar" in what and "mean" in what
    state = {k.removeprefix("net."): v for k, v in saved["state_dict"].items()}
    got = net.state_dict()
    assert got.keys() == state.keys()
    assert all(torch.equal(got[k], state[k]) for k in state)  # the trained weights, not new ones


def test_a_code_carrying_checkpoint_is_refused_without_running(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    marker = tmp_path / "ran"
    path = tmp_path / "evil.ckpt"
    torch.save({"state_dict": {}, "payload": _Payload(marker)}, path)
    err = _export_error(path, tmp_path, capsys)
    assert str(path) in err and "weights-only read refuses" in err
    assert not marker.exists()


class _Payload:
    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):
        return os.system, (f"touch {self.marker}",)


def test_zero_byte_checkpoint_is_named_as_empty(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "last.ckpt").write_bytes(b"")
    err = _export_error(tmp_path / "last.ckpt", tmp_path, capsys)
    assert f"checkpoint {tmp_path / 'last.ckpt'} is empty (0 bytes)" in err


def test_random_bytes_are_not_a_checkpoint(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "noise.ckpt"
    path.write_bytes(bytes(range(7, 256)) * 40)
    err = _export_error(path, tmp_path, capsys)
    assert f"checkpoint {path} is not a PyTorch checkpoint" in err
    assert "Please file an issue" not in err


def test_truncated_checkpoint_is_named_as_damaged(
    run_ckpt: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "cut.ckpt"
    path.write_bytes(run_ckpt.read_bytes()[: run_ckpt.stat().st_size // 2])
    err = _export_error(path, tmp_path, capsys)
    assert f"checkpoint {path} is damaged (truncated or corrupted" in err


def test_plain_state_dict_says_how_to_export_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    import visattn

    path = tmp_path / "weights.pth"
    torch.save(visattn.create_model("resnet20_cifar").state_dict(), path)
    err = _export_error(path, tmp_path, capsys)
    assert f"checkpoint {path} is a plain state_dict" in err
    assert "create_model(NAME, checkpoint_path=FILE)" in err
    assert "pytorch-lightning_version" not in err


def test_a_directory_is_named_with_the_checkpoints_inside(
    run_ckpt: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    version = run_ckpt.parents[1]  # lightning_logs/version_0
    err = _export_error(version, tmp_path, capsys)
    assert f"checkpoint {version} is a directory holding" in err
    assert "checkpoints/last.ckpt" in err and "does not exist" not in err


def test_weights_that_do_not_fit_the_saved_network_name_a_few_keys(
    run_ckpt: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    saved = torch.load(run_ckpt, map_location="cpu", weights_only=True)
    saved["hyper_parameters"]["model"] = "resnet32_cifar"  # 5 blocks per stage instead of 3
    path = tmp_path / "other.ckpt"
    torch.save(saved, path)
    err = _export_error(path, tmp_path, capsys)
    assert f"checkpoint {path} does not match ClassificationModule" in err
    assert "missing key(s): net.layer1.3." in err and "more)" in err
    assert len(err) < 1200, err  # a few keys, not all of them


def test_class_names_and_normalisation_come_from_the_checkpoint_not_the_data_folder(
    tmp_path: Path,
) -> None:
    """P6: class_names were read from the data folder at export time (a renamed and an added
    folder gave 4 names for a 3-output model), and exporting elsewhere failed with "ImageFolder
    split not found". The run records them when it saves."""
    from helpers.data import write_tiny_imagefolder

    data = tmp_path / "data"
    write_tiny_imagefolder(data)
    classes = sorted(p.name for p in (data / "train").iterdir())
    s = tiny_fit(
        tmp_path / "run",
        "--trainer.max_epochs=1",
        "--data.dataset=imagefolder",
        f"--data.root={data}",
        "--data.image_size=16",
    )
    saved = torch.load(s["last_ckpt"], map_location="cpu", weights_only=True)
    assert saved["visattn_data"]["class_names"] == classes
    (data / "train" / classes[0]).rename(data / "train" / "renamed")  # the folder changes
    (data / "train" / "added").mkdir()
    _net, size, _, meta = load_for_export(s["last_ckpt"], None, None)
    assert meta["class_names"] == classes and size == (3, 16, 16)
    import shutil

    shutil.rmtree(data)  # or is not on the exporting machine at all
    assert load_for_export(s["last_ckpt"], None, None)[3]["class_names"] == classes
