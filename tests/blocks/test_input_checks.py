"""Clear, early errors for bad input: blocks given an empty batch or a 3-D tensor, data options
out of range, a broken config file, a class count given in the wrong place, and training used
without the ``train`` extra."""

from __future__ import annotations

import subprocess
import sys
import warnings
from pathlib import Path

import pytest
import torch

import visattn
from visattn.data import VisattnDataModule

REPO = Path(__file__).resolve().parents[2]
QUICKSTART = str(REPO / "configs" / "quickstart.yaml")


# ------------------------------------------------------------------------------------- blocks


@pytest.mark.parametrize("name", visattn.list_blocks())
@pytest.mark.parametrize("train", [True, False], ids=["train", "eval"])
def test_every_block_handles_an_empty_batch(name: str, train: bool) -> None:
    blk = visattn.create_block(name, 16).train(train)
    x = torch.randn(0, 16, 8, 8, requires_grad=True)
    y = blk(x)
    assert y.shape == (0, 16, 8, 8)
    y.sum().backward()  # backward through an empty batch works too


@pytest.mark.parametrize("name", visattn.list_blocks())
def test_every_block_rejects_3d_input_naming_itself(name: str) -> None:
    for blk in (visattn.create_block(name, 16), visattn.block_info(name).cls(16)):
        with pytest.raises(ValueError, match=rf"block '{name}'.*\(N, C, H, W\)") as err:
            blk(torch.randn(16, 8, 8))
        assert "(16, 8, 8)" in str(err.value)
        with pytest.raises(ValueError, match=r"\(N, C, H, W\)"):
            blk(torch.randn(1, 2, 16, 8, 8))


def test_input_check_survives_scripting_and_export() -> None:
    blk = visattn.create_block("sge", 16).eval()  # a block that compiles with torch.jit.script
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        scripted = torch.jit.script(blk)
    x = torch.randn(2, 16, 8, 8)
    torch.testing.assert_close(scripted(x), blk(x))
    with pytest.raises(Exception, match=r"\(N, C, H, W\)"):
        scripted(torch.randn(16, 8, 8))
    exported = torch.export.export(blk, (x,)).module()
    torch.testing.assert_close(exported(x), blk(x))


# --------------------------------------------------------------------------------------- data


@pytest.mark.parametrize("size", [0, -32])
def test_non_positive_image_size_names_the_option(size: int) -> None:
    for dataset in ("shapes", "cifar10"):
        with pytest.raises(ValueError, match="image_size must be a positive"):
            VisattnDataModule(dataset, image_size=size)


@pytest.mark.parametrize("key", ["num_train", "num_val", "num_test"])
def test_shapes_with_zero_images_is_an_error_not_the_default(key: str) -> None:
    with pytest.raises(ValueError, match=rf"{key} must be >= 1"):
        VisattnDataModule("shapes", **{key: 0})


def test_data_num_classes_is_checked_against_the_data() -> None:
    assert VisattnDataModule("shapes", num_classes=9).num_classes == 9
    assert VisattnDataModule("cifar100", num_classes=100).num_classes == 100
    with pytest.raises(ValueError, match="num_classes 5 given, but the shapes data has 9"):
        VisattnDataModule("shapes", num_classes=5)


# ---------------------------------------------------------------------------------------- CLI


def _cli(*args: str):
    from visattn.training import VisattnCLI

    return VisattnCLI(
        args=["--config", QUICKSTART, *args], run=False, parser_kwargs={"exit_on_error": False}
    )


def test_cli_image_size_zero_names_image_size() -> None:
    with pytest.raises(ValueError, match="image_size"):
        _cli("--data.image_size=0")


def test_cli_model_num_classes_points_to_a_real_option() -> None:
    with pytest.raises(Exception, match=r"data\.num_classes") as err:
        _cli("--model.num_classes=5")
    assert "--data.num_classes" in str(err.value) or "data.num_classes" in str(err.value)
    cli = _cli("--data.num_classes=9")  # the option the message names exists and works
    assert cli.model.hparams.num_classes == 9
    with pytest.raises(ValueError, match="shapes data has 9 classes"):
        _cli("--data.num_classes=5")


def test_yaml_syntax_error_names_the_config_file(tmp_path: Path) -> None:
    bad = tmp_path / "broken.yaml"
    bad.write_text("model:\n  model: resnet20_cifar\n lr: [0.1\n")
    with pytest.raises(ValueError, match=r"broken\.yaml") as err:
        _cli("--config", str(bad))
    assert "<unicode string>" not in str(err.value)
    assert "line" in str(err.value)


# ------------------------------------------------------------------------------------- extras

_WITHOUT_TRAIN = """
import sys
for m in ("lightning", "lightning.pytorch", "albumentations", "torchmetrics"):
    sys.modules[m] = None  # as if not installed
import torch, visattn
m = visattn.create_model("se_resnet20_cifar", num_classes=3)
assert m(torch.randn(1, 3, 32, 32)).shape == (1, 3)
assert visattn.create_block("cbam", 32)(torch.randn(1, 32, 4, 4)).shape == (1, 32, 4, 4)
from visattn.data import make_shapes  # the generator needs no extra
assert make_shapes(2)[0].shape == (2, 32, 32, 3)
for stmt in ("import visattn.training", "from visattn.data import VisattnDataModule",
             "import visattn.data.datamodule", "import visattn.data.transforms"):
    try:
        exec(stmt)
    except ImportError as e:
        assert "pip install visattn[train]" in str(e), (stmt, str(e))
        print("ok:", stmt)
    else:
        raise SystemExit(f"{stmt} did not raise")
"""


def test_training_without_the_extra_names_it() -> None:
    out = subprocess.run(
        [sys.executable, "-c", _WITHOUT_TRAIN], capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.count("ok:") == 4


@pytest.mark.parametrize("bad", (-1, 2.5, True))
def test_create_model_refuses_an_impossible_num_classes(bad) -> None:
    with pytest.raises(ValueError, match=r"num_classes must be an int >= 0"):
        visattn.create_model("resnet20_cifar", num_classes=bad)
