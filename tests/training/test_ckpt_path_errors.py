"""``train_cls.py fit|test --ckpt_path FILE`` checks the file before the run starts: an empty
``last.ckpt``, random bytes, a plain state_dict or the checkpoint of another network raise a
short error naming the file and what is wrong, instead of a bare ``EOFError``, torch's "Please
file an issue" or a strict key-mismatch traceback listing every key."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import torch

pytest.importorskip("lightning")

from helpers.training import TINY, tiny_fit

from visattn.training import run

pytestmark = pytest.mark.xdist_group(
    "ckpt_path_errors"
)  # the fitted run is trained once, on one worker


@pytest.fixture(scope="module")
def fitted(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The root of a real one-epoch run (ResNet-20 + SE)."""
    root = tmp_path_factory.mktemp("fitted")
    tiny_fit(root, "--trainer.max_epochs=1")
    return root


def _test_error(ckpt: Path | str, *extra: str) -> ValueError:
    with pytest.raises(ValueError) as err:
        run(["test", *TINY, f"--ckpt_path={ckpt}", *extra])
    assert type(err.value).__name__ == "CheckpointError"
    return err.value


def test_zero_byte_last_ckpt_is_named_on_resume(tmp_path: Path) -> None:
    last = tmp_path / "lightning_logs" / "version_0" / "checkpoints" / "last.ckpt"
    last.parent.mkdir(parents=True)
    last.write_bytes(b"")
    with pytest.raises(ValueError, match=r"is empty \(0 bytes\)") as err:
        tiny_fit(tmp_path, "--ckpt_path=last", "--trainer.max_epochs=2")
    assert str(last) in str(err.value)
    assert not (last.parents[1] / "config.yaml").exists()  # nothing ran, nothing was written


def test_random_bytes_are_named_as_no_checkpoint(tmp_path: Path) -> None:
    path = tmp_path / "noise.ckpt"
    path.write_bytes(bytes(range(3, 256)) * 50)
    err = _test_error(path, f"--trainer.default_root_dir={tmp_path}")
    assert f"checkpoint {path} is not a PyTorch checkpoint" in str(err)


def test_plain_state_dict_is_named_with_the_way_to_start_from_it(tmp_path: Path) -> None:
    import visattn

    path = tmp_path / "weights.pth"
    torch.save(visattn.create_model("resnet20_cifar", num_classes=9).state_dict(), path)
    err = _test_error(path, f"--trainer.default_root_dir={tmp_path}")
    assert f"checkpoint {path} is a plain state_dict" in str(err)
    assert "--model.model_kwargs" in str(err)


@pytest.mark.parametrize(
    "other",
    [
        ["--model.model=resnet32_cifar"],  # deeper: missing keys
        ["--model.attention={name: cbam}"],  # other attention: missing and unexpected keys
    ],
    ids=["deeper", "other_attention"],
)
def test_resuming_with_another_network_is_refused_naming_the_recorded_network(
    fitted: Path, tmp_path: Path, other: list[str]
) -> None:
    shutil.copytree(fitted, tmp_path, dirs_exist_ok=True)
    last = tmp_path / "lightning_logs" / "version_0" / "checkpoints" / "last.ckpt"
    before = last.read_bytes()
    with pytest.raises(ValueError) as err:
        tiny_fit(tmp_path, "--ckpt_path=last", "--trainer.max_epochs=2", *other)
    msg = str(err.value)
    # the resume rules (visattn.training.resume) refuse before any weight is compared: the
    # message names the checkpoint, the option that differs and the network the run trained
    assert str(last) in msg and "another network" in msg and other[0].split("=")[0] in msg
    assert len(msg) < 1500, msg
    assert last.read_bytes() == before


def test_testing_on_data_with_other_classes_names_the_classifier(
    fitted: Path, tmp_path: Path
) -> None:
    """LightningCLI rebuilds the model from the checkpoint, but the class count comes from the
    data: 2 target colours make 6 classes where the checkpoint has 9."""
    last = fitted / "lightning_logs" / "version_0" / "checkpoints" / "last.ckpt"
    msg = str(
        _test_error(
            last, f"--trainer.default_root_dir={tmp_path}", "--data.target_colors=[red, green]"
        )
    )
    assert "shape mismatch(es): net.fc.weight: file (9, 64) vs model (6, 64)" in msg
    assert "9 classes" in msg and len(msg) < 1500


def test_the_matching_checkpoint_still_tests(fitted: Path, tmp_path: Path) -> None:
    last = fitted / "lightning_logs" / "version_0" / "checkpoints" / "last.ckpt"
    summary = run(["test", *TINY, f"--ckpt_path={last}", f"--trainer.default_root_dir={tmp_path}"])
    assert 0.0 <= summary["test_acc"] <= 1.0


EVIL = """
import pathlib, torch
pathlib.Path(__file__).with_name("imported.marker").write_text("ran")
class Evil(torch.optim.SGD):
    pass
"""


def _planted(fitted: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A copy of the run's last.ckpt whose saved optimizer option names ``evilmod.Evil``, with
    evilmod.py importable (first on the path, as ``python -m`` puts the working folder)."""
    (tmp_path / "evilmod.py").write_text(EVIL)
    monkeypatch.syspath_prepend(str(tmp_path))
    last = next(fitted.rglob("last.ckpt"))
    saved = torch.load(last, weights_only=True)
    saved["hyper_parameters"]["optimizer"] = {"class_path": "evilmod.Evil", "init_args": {}}
    path = tmp_path / "x.ckpt"
    torch.save(saved, path)
    return path


def test_a_checkpoint_naming_a_foreign_class_is_refused_before_anything_imports_it(
    fitted: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """P1: a checkpoint is data; its options may not choose a module to import."""
    from visattn.models.checkpoint import UntrustedClassError
    from visattn.training.load import load_run

    path = _planted(fitted, tmp_path, monkeypatch)
    with pytest.raises(UntrustedClassError, match=r"optimizer.*'evilmod.Evil'"):
        load_run(path)  # export and visualize load through this
    with pytest.raises(UntrustedClassError, match=r"evilmod\.Evil"):
        run(["test", *TINY, f"--ckpt_path={path}", f"--trainer.default_root_dir={tmp_path}"])
    with pytest.raises(UntrustedClassError, match=r"evilmod\.Evil"):  # a resumed fit
        tiny_fit(tmp_path / "resume", f"--ckpt_path={path}", "--trainer.max_epochs=2")
    assert not (tmp_path / "imported.marker").exists()


def test_the_export_command_refuses_such_a_checkpoint_from_the_working_folder(
    fitted: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import subprocess
    import sys

    path = _planted(fitted, tmp_path, monkeypatch)
    proc = subprocess.run(
        [sys.executable, "-m", "visattn", "export", "--ckpt", str(path), "--out", "o.onnx"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode != 0 and "evilmod.Evil" in proc.stderr + proc.stdout
    assert not (tmp_path / "imported.marker").exists() and not (tmp_path / "o.onnx").exists()


def test_trusted_packages_and_options_given_by_the_user_stay_allowed() -> None:
    from visattn.models.checkpoint import check_recorded_classes

    check_recorded_classes(
        {
            "optimizer": {"class_path": "torch.optim.RAdam", "init_args": {}},
            "_instantiator": "lightning.pytorch.cli.instantiate_module",
            "attention": {"name": "se"},  # not a class option
            "model": "resnet20_cifar",
        },
        "test",
    )
