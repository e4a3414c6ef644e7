"""Clear, early errors from the training command line: an impossible ``image_size``, a class
count given in the wrong place (the message points to the real option), a broken config file
(named, with its line), and training used without the ``train`` extra."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from helpers.paths import REPO

QUICKSTART = str(REPO / "configs" / "quickstart.yaml")


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


def test_a_misspelt_option_names_the_one_meant(capsys) -> None:
    """The command line exits as argparse does (usage, code 2) and a sweep's resolver raises,
    both naming the known option closest to the unrecognized one."""
    from jsonargparse import ArgumentError

    from visattn.training.cli import cli_main
    from visattn.training.config import RunConfig

    with pytest.raises(SystemExit) as done:
        cli_main(["fit", "--config", QUICKSTART, "--model.atention", "se"])
    err = capsys.readouterr().err
    assert done.value.code == 2 and "fit --help" in err  # the subcommand's usage and tip
    assert err.rstrip().endswith(
        "unrecognized arguments: --model.atention se; --model.atention: did you mean "
        "--model.attention?"
    )
    with pytest.raises(ArgumentError, match=r"--trainer\.max_epoks: did you mean --trainer\.max"):
        RunConfig.parse(["fit", "--config", QUICKSTART, "--trainer.max_epoks=2"])
    with pytest.raises(ArgumentError) as far:  # nothing close: argparse's message alone
        RunConfig.parse(["fit", "--zzz=2"])
    assert str(far.value) == "unrecognized arguments: --zzz=2"


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


@pytest.mark.parametrize(
    "flags, expected",
    [
        (
            ["--model.attention.name", "sse"],
            "unknown block 'sse'; did you mean 'scse', 'se', 'sge'?",
        ),
        (
            ["--model.attention.name", "se", "--model.attention.args", '{"reductio": 4}'],
            "block 'se': unknown option 'reductio' (did you mean 'reduction'?)",
        ),
    ],
    ids=["block", "option"],
)
def test_a_bad_attention_option_is_one_line_from_train_cls(
    flags: list[str], expected: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """Not jsonargparse's 83-line trace of every union member: visattn's own message, once,
    and the command line's exit (code 2) rather than a traceback. In-process, through the
    function ``train_cls.py`` calls: a fresh interpreter per case cost 8 s of imports."""
    from visattn.training.cli import cli_main

    with pytest.raises(SystemExit) as done:
        cli_main(["fit", "--config", QUICKSTART, *flags])
    err = capsys.readouterr().err
    assert done.value.code == 2, err[-2000:]
    errors = [ln for ln in err.splitlines() if "error" in ln.lower()]
    prog = Path(sys.argv[0]).name  # argparse's name for the command: train_cls.py when run so
    assert len(errors) == 1 and errors[0].startswith(f"{prog}: error: {expected}"), err[-2000:]
    assert "Traceback" not in err and len(err.splitlines()) <= 3


# ------------------------------------------------------------------- YAML that reads wrongly

LAUGHS = "a: &a [x, x, x, x, x, x, x, x, x, x]\n" + "".join(
    f"{k}: &{k} [*{p}, *{p}, *{p}, *{p}, *{p}, *{p}, *{p}, *{p}, *{p}, *{p}]\n"
    for p, k in zip("abcdefghi", "bcdefghij")
)


def test_a_repeated_key_in_a_config_is_refused_naming_both_lines(tmp_path: Path) -> None:
    """P13: a second ``model:`` block silently replaced the first."""
    path = tmp_path / "twice.yaml"
    path.write_text("model:\n  lr: 0.5\ndata:\n  batch_size: 8\nmodel:\n  attention: se\n")
    with pytest.raises(ValueError, match=r"'model' appears twice \(first at line 1\)"):
        _cli("--config", str(path))


def test_aliases_that_expand_to_billions_are_refused_at_once(tmp_path: Path) -> None:
    """P12: ten levels of ten-fold anchors grew to gigabytes, then a MemoryError."""
    import time

    import yaml

    from visattn.files import load_yaml

    path = tmp_path / "laughs.yaml"
    path.write_text(LAUGHS + "model:\n  lr: 0.1\n")
    start = time.perf_counter()
    with pytest.raises(ValueError, match="expand to more than"):
        _cli("--config", str(path))
    with pytest.raises(yaml.YAMLError, match="expand to more than"):
        load_yaml(LAUGHS, "sweep set")
    assert time.perf_counter() - start < 30
    assert load_yaml("a: &x [1, 2]\nb: *x\n") == {"a": [1, 2], "b": [1, 2]}  # aliases still work


@pytest.mark.parametrize(
    ("base", "message"),
    [
        ("5", "_base_ must be a file name or a list"),
        ("[null]", "_base_ must be a file name"),
        ("sub", "is a folder"),
    ],
)
def test_a_base_that_is_not_a_file_list_is_named(tmp_path: Path, base: str, message: str) -> None:
    """P17: ``_base_: 5`` gave a TypeError, a folder "not found"."""
    (tmp_path / "sub").mkdir()
    path = tmp_path / "c.yaml"
    path.write_text(f"_base_: {base}\nmodel:\n  lr: 0.1\n")
    with pytest.raises(ValueError, match=message):
        _cli("--config", str(path))


def test_a_base_chain_too_deep_is_named_instead_of_a_recursion_error(tmp_path: Path) -> None:
    for i in range(40):
        (tmp_path / f"c{i}.yaml").write_text(f"_base_: c{i + 1}.yaml\nmodel:\n  lr: 0.1\n")
    (tmp_path / "c40.yaml").write_text("model:\n  lr: 0.1\n")
    with pytest.raises(ValueError, match="nest more than 32 deep"):
        _cli("--config", str(tmp_path / "c0.yaml"))


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--data.cutout=1000"], "cutout must be a square side in pixels from 0 (off) to 31"),
        (["--seed_everything=-1"], "seed_everything must be an integer from 0 to 4,294,967,295"),
    ],
)
def test_impossible_options_end_in_one_line(args, message, capsys) -> None:
    """P17: --data.cutout 1000 gave numpy's "low >= high", --seed_everything -1 numpy's bound."""
    from visattn.training.cli import cli_main

    with pytest.raises(SystemExit) as done:
        cli_main(["fit", "--config", QUICKSTART, *args, "--trainer.fast_dev_run=1"])
    err = capsys.readouterr().err
    assert done.value.code == 2 and message in err and "Traceback" not in err
    assert len(err.strip().splitlines()) == 1


def test_missing_data_ends_in_one_line_naming_the_folder_and_the_fix(tmp_path, capsys) -> None:
    """A CIFAR folder or an ImageFolder split that is not there: the message says where it
    looked and what to pass, as the last line, with exit status 2 and no traceback."""
    from visattn.data import DatasetNotFoundError
    from visattn.training.cli import cli_main

    for dataset, said in (("cifar10", "cifar-10-batches-py"), ("imagefolder", "split not found")):
        with pytest.raises(SystemExit) as done:
            cli_main(["fit", "--config", QUICKSTART, f"--data.dataset={dataset}",
                      f"--data.root={tmp_path / 'nowhere'}", "--trainer.max_epochs=1"])  # fmt: skip
        err = capsys.readouterr().err
        assert done.value.code == 2 and "Traceback" not in err, err[-2000:]
        last = err.strip().splitlines()[-1]
        assert said in last and str(tmp_path / "nowhere") in last and "--data.root" in last
    assert issubclass(DatasetNotFoundError, FileNotFoundError)  # code catching that still does


def test_a_bad_checkpoint_ends_in_one_line(tmp_path: Path, capsys) -> None:
    """P17: the docs promise one line; it was a 31-line double traceback."""
    from visattn.training.cli import cli_main

    bad = tmp_path / "bad.ckpt"
    bad.write_text("garbage")
    with pytest.raises(SystemExit):
        cli_main(["test", "--config", QUICKSTART, f"--ckpt_path={bad}"])
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "is not a PyTorch checkpoint" in err[0]


def test_export_refuses_a_class_count_no_memory_holds(capsys) -> None:
    from visattn.__main__ import main

    assert (
        main(
            [
                "export",
                "--model",
                "resnet20_cifar",
                "--num-classes",
                "1000000000",
                "--out",
                "x.onnx",
            ]
        )
        == 2
    )
    assert "--num-classes must be an integer from 1 to 1,000,000" in capsys.readouterr().err


def test_a_data_layout_error_ends_in_its_whole_message(tmp_path: Path, capsys) -> None:
    """Issue 62 item 6: splits whose class folders differ raised a plain ValueError, printed
    behind a full traceback. Now: exit status 2, no traceback, every line of the message."""
    from PIL import Image

    from visattn.data import DatasetLayoutError
    from visattn.training.cli import cli_main

    for split, classes in (("train", ("cat", "dog")), ("val", ("cat", "emu"))):
        for name in classes:
            (tmp_path / split / name).mkdir(parents=True)
            Image.new("RGB", (8, 8)).save(tmp_path / split / name / "a.png")
    with pytest.raises(SystemExit) as done:
        cli_main(["fit", "--config", QUICKSTART, "--data.dataset=imagefolder",
                  f"--data.root={tmp_path}", "--trainer.max_epochs=1"])  # fmt: skip
    err = capsys.readouterr().err
    assert done.value.code == 2 and "Traceback" not in err, err[-2000:]
    assert str(tmp_path / "val" / "emu") in err and str(tmp_path / "val" / "dog") in err
    assert issubclass(DatasetLayoutError, ValueError)  # code catching ValueError still does


def test_an_option_a_link_sets_says_which_to_give() -> None:
    """Issue 62 item 6: ``--model.num_classes 9`` said "int | None is not callable"."""
    from jsonargparse import ArgumentError

    from visattn.training.config import RunConfig

    with pytest.raises(ArgumentError, match=r"sets it from data\.num_classes.*--data\.num_classes"):
        RunConfig.parse(["fit", "--config", QUICKSTART, "--model.num_classes=9"])
