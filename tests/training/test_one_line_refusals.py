"""Bad input to train_cls.py ends in one line that names the option (or the file) and what it may
be, with exit status 2, before anything trains (probe of round 7: each of these ended in a
30-50 line traceback, though the reliability guide promises one line)."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("lightning")

from helpers.training import REPO

from visattn.training.cli import cli_main

QUICK = ["fit", "--config", str(REPO / "configs" / "quickstart.yaml")]


def _files(folder: Path) -> None:
    (folder / "dup.yaml").write_text("trainer:\n  max_epochs: 1\n  max_epochs: 2\n")
    (folder / "a.yaml").write_text("_base_: [b.yaml]\n")
    (folder / "b.yaml").write_text("_base_: [a.yaml]\n")
    (folder / "secret.txt").write_text("root:x:0:0:root:/root:/bin/bash\n")
    (folder / "p.yaml").write_text("_base_: [secret.txt]\n")
    (folder / "octal.yaml").write_text("trainer:\n  max_epochs: 010\n")


@pytest.mark.parametrize(
    "extra, said",
    [
        (["--config", "dup.yaml"], "config dup.yaml, line 3: not valid YAML (the key 'max_epochs'"),
        (["--config", "a.yaml"], "_base_ cycle: "),
        (["--config", "p.yaml"], "secret.txt: holds a str, not a mapping of options"),
        (["--config", "octal.yaml"], "'010' is ambiguous: YAML 1.1 reads it as the octal number 8"),
        (["--model.lr", "-0.1"], "--model.lr must be a finite number > 0, got -0.1"),
        (["--data.batch_size", "0"], "--data.batch_size must be an integer >= 1, got 0"),
        (["--data.batch_size", "-4"], "--data.batch_size must be an integer >= 1, got -4"),
        (["--data.num_workers", "-3"], "--data.num_workers must be an integer >= 0"),
        (["--model.label_smoothing", "2"], "--model.label_smoothing must be in [0, 1)"),
        (["--trainer.max_epochs", "0"], "--trainer.max_epochs must be >= 1 (or -1 for no limit)"),
        (
            ["--model.attention", "{name: se, position: standrd}"],
            "unknown position 'standrd' (did you mean 'standard'?); valid positions: [",
        ),
    ],
    ids=[
        "duplicate-key",
        "base-cycle",
        "base-not-a-config",
        "octal",
        "negative-lr",
        "batch-0",
        "batch-negative",
        "workers-negative",
        "label-smoothing",
        "max-epochs-0",
        "misspelt-position",
    ],
)
def test_bad_input_is_one_line_naming_the_option(
    extra: list[str],
    said: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    _files(tmp_path)
    monkeypatch.chdir(tmp_path)
    root = ["--trainer.default_root_dir", str(tmp_path / "runs")]
    with pytest.raises(SystemExit) as stop:
        cli_main([*QUICK, *extra, *root])
    assert stop.value.code == 2
    lines = [ln for ln in capsys.readouterr().err.splitlines() if ln.strip()]
    assert len(lines) == 1 and said in lines[0], lines
    assert "root:x:0" not in lines[0]  # a file's content is never quoted
    assert not (tmp_path / "runs").exists()  # a refused run leaves nothing


@pytest.fixture(scope="module")
def se_ckpt(tmp_path_factory: pytest.TempPathFactory) -> str:
    from helpers.training import tiny_fit

    return tiny_fit(tmp_path_factory.mktemp("se"), "--trainer.max_epochs=1")["last_ckpt"]


def test_testing_another_networks_checkpoint_is_refused_naming_both(
    se_ckpt: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Probe of round 7: a CBAM config with an SE run's checkpoint scored the SE network
    without a word."""
    from helpers.training import TINY

    options = [a for a in TINY if not a.startswith("--model.attention")]
    root = f"--trainer.default_root_dir={tmp_path}"
    with pytest.raises(SystemExit) as stop:
        cli_main(["test", *options, "--model.attention={name: cbam}", "--ckpt_path", se_ckpt, root])
    assert stop.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1
    assert (
        'model.attention [{"name": "cbam"}] given, [{"args": {"reduction": 4}, "name": "se"}]'
        in err[0]
    )
    # the options it trained with, spelled otherwise, or none at all: scored
    for attention in (
        ["--model.attention={name: se, position: standard, args: {reduction: 4}}"],
        [],
    ):
        cli_main(["test", *options, *attention, "--ckpt_path", se_ckpt, root])


def test_a_plain_config_and_one_with_base_read_a_word_option_alike(tmp_path: Path) -> None:
    """Probe of round 7: ``verify_images: off`` read as the word in a file with ``_base_`` and as
    ``False`` in a plain one (refused: "Expected a str"); every file is read by one reader."""
    from visattn.training.options import expand_config_args

    (tmp_path / "plain.yaml").write_text("data:\n  verify_images: off\n")
    (tmp_path / "child.yaml").write_text("_base_: [plain.yaml]\ntrainer:\n  max_epochs: 1\n")
    import yaml

    for name in ("plain.yaml", "child.yaml"):
        pieces = expand_config_args(["--config", str(tmp_path / name)])
        texts = [yaml.safe_load(p) for p in pieces if p != "--config"]
        assert {"data": {"verify_images": "off"}} in texts, (name, texts)


def test_pictures_of_a_damaged_checkpoint_are_one_line(
    se_ckpt: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from visattn.visualize.command import main as visualize_main

    cut = tmp_path / "cut.ckpt"
    cut.write_bytes(Path(se_ckpt).read_bytes()[:20000])
    assert visualize_main(["--ckpt", str(cut), "--out", str(tmp_path / "pics")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and f"checkpoint {cut} is damaged" in err[0]
