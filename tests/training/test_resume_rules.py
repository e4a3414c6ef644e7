"""Resuming a fit run (``--ckpt_path``): a moved or copied run folder resumes in place and never
goes back in time, changed options are named and never recorded as used, a damaged checkpoint
leaves the run untouched; and a last training batch of one image is dropped."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import torch
import yaml
from helpers.files import read_csv
from helpers.training import tiny_fit
from jsonargparse import Namespace

from visattn.training.options import restore_recorded
from visattn.training.resume import find_last_checkpoint


@pytest.fixture(scope="module")
def one_epoch_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A finished one-epoch tiny run; each test resumes its own copy (a copied run folder)."""
    root = tmp_path_factory.mktemp("one_epoch")
    tiny_fit(root, "--trainer.max_epochs=1")
    return root


def _copy(run: Path, dst: Path) -> Path:
    shutil.copytree(run, dst)
    return dst


def _epoch(path: Path) -> int:
    return int(torch.load(path, map_location="cpu", weights_only=True)["epoch"])


def _checkpoints(root: Path) -> dict[str, int]:
    return {p.name: _epoch(p) for p in root.rglob("*.ckpt")}


def test_a_moved_run_resumes_in_place_and_never_goes_back_in_time(
    one_epoch_run: Path, tmp_path: Path
) -> None:
    moved = _copy(one_epoch_run, tmp_path / "moved")
    tiny_fit(moved, "--trainer.max_epochs=2", "--ckpt_path=last")
    second = tiny_fit(moved, "--trainer.max_epochs=3", "--ckpt_path=last")
    ckpts = _checkpoints(moved)
    # one last.ckpt holding the newest epoch, no last-v1 / best-epochNNN-v1 beside it
    assert ckpts["last.ckpt"] == 2
    assert not [name for name in ckpts if "-v" in name], ckpts
    assert Path(second["last_ckpt"]) == next(moved.rglob("last.ckpt"))
    assert Path(second["best_ckpt"]).parent == Path(second["last_ckpt"]).parent  # not the old dir
    # every epoch trained once: steps continue, no epoch replaced by a re-trained one
    rows = read_csv(second["metrics_csv"])
    assert [int(r["epoch"]) for r in rows] == [0, 1, 2]
    assert [int(r["step"]) for r in rows] == [3, 6, 9]


def test_last_means_the_newest_epoch_among_last_checkpoints(tmp_path: Path) -> None:
    ckpts = tmp_path / "lightning_logs" / "version_1" / "checkpoints"
    ckpts.mkdir(parents=True)
    for name, epoch in (("last.ckpt", 1), ("last-v1.ckpt", 4), ("last-v2.ckpt", 3)):
        torch.save({"epoch": epoch, "global_step": 10 * epoch}, ckpts / name)
    torch.save({"epoch": 9, "global_step": 90}, ckpts / "best-epoch009.ckpt")  # not a last one
    old = tmp_path / "lightning_logs" / "version_0" / "checkpoints"
    old.mkdir(parents=True)
    torch.save({"epoch": 7, "global_step": 70}, old / "last.ckpt")  # an older version
    assert find_last_checkpoint(tmp_path) == (1, ckpts / "last-v1.ckpt")
    (ckpts / "last-v2.ckpt").write_bytes(b"")  # a damaged candidate is named, not skipped
    with pytest.raises(ValueError, match=r"last-v2\.ckpt"):
        find_last_checkpoint(tmp_path)


def test_resume_with_changed_options_names_them_and_records_what_was_used(
    one_epoch_run: Path, tmp_path: Path
) -> None:
    run = _copy(one_epoch_run, tmp_path / "run")
    with pytest.warns(UserWarning, match=r"--model\.lr 5\.0 \(the run keeps 0\.05\)") as caught:
        s = tiny_fit(
            run,
            "--trainer.max_epochs=2",
            "--ckpt_path=last",
            "--model.lr=5.0",
            "--data.verify_images=full",  # how the data is read: may change
        )
    said = " ".join(str(w.message) for w in caught)
    assert "verify_images" not in said and "max_epochs" not in said
    config = yaml.safe_load((Path(s["log_dir"]) / "config.yaml").read_text())
    assert config["model"]["lr"] == 0.05  # the value that trained, not the ignored 5.0
    assert config["trainer"]["max_epochs"] == 2  # took effect: a second epoch ran
    rows = read_csv(s["metrics_csv"])
    assert [int(r["epoch"]) for r in rows] == [0, 1]
    assert float(rows[1]["lr"]) == pytest.approx(0.05)


def test_resume_with_another_network_is_refused_before_anything_is_written(
    one_epoch_run: Path, tmp_path: Path
) -> None:
    run = _copy(one_epoch_run, tmp_path / "run")
    before = {p: p.read_bytes() for p in run.rglob("*") if p.is_file()}
    with pytest.raises(ValueError, match=r"another network: --model\.attention"):
        tiny_fit(run, "--trainer.max_epochs=2", "--ckpt_path=last", "--model.attention={name: eca}")
    assert {p: p.read_bytes() for p in run.rglob("*") if p.is_file()} == before


def test_a_failed_resume_leaves_the_runs_config_untouched(
    one_epoch_run: Path, tmp_path: Path
) -> None:
    run = _copy(one_epoch_run, tmp_path / "run")
    last = next(run.rglob("last.ckpt"))
    last.write_bytes(last.read_bytes()[:100])  # damaged (cut off mid-write, disk full, ...)
    config = next(run.rglob("config.yaml"))
    recorded = config.read_bytes()
    with pytest.raises(Exception) as err:
        tiny_fit(run, "--trainer.max_epochs=3", "--ckpt_path=last")
    assert config.read_bytes() == recorded
    assert isinstance(err.value, ValueError) and "is damaged" in str(err.value)
    assert str(last) in str(err.value)


def test_a_last_training_batch_of_one_image_is_dropped(tmp_path: Path) -> None:
    # 49 images at batch 16: 3 full batches and one of a single image, on which BAM's
    # BatchNorm over pooled channels cannot train
    s = tiny_fit(
        tmp_path, "--trainer.max_epochs=1", "--data.num_train=49", "--model.attention={name: bam}"
    )
    assert [int(r["step"]) for r in read_csv(s["metrics_csv"])] == [3]


def test_an_explicit_checkpoint_file_keeps_the_same_promises_as_last(
    one_epoch_run: Path, tmp_path: Path
) -> None:
    """P5: ``--ckpt_path FILE`` into a new root used to let Lightning re-parse the checkpoint's
    options over the given ones: a changed network trained the recorded one, a changed lr was
    dropped, both without a word."""
    last = next(one_epoch_run.rglob("last.ckpt"))
    with pytest.raises(ValueError, match=r"another network: --model\.attention"):
        tiny_fit(
            tmp_path / "a",
            "--trainer.max_epochs=2",
            f"--ckpt_path={last}",
            "--model.attention={name: cbam}",
        )
    assert not list((tmp_path / "a").rglob("config.yaml"))  # refused before it ran
    with pytest.warns(UserWarning, match=r"--model\.lr 5\.0 \(the run keeps 0\.05\)"):
        s = tiny_fit(
            tmp_path / "b", "--trainer.max_epochs=2", f"--ckpt_path={last}", "--model.lr=5.0"
        )
    config = yaml.safe_load((Path(s["log_dir"]) / "config.yaml").read_text())
    assert config["model"]["lr"] == 0.05


def test_bytes_changed_inside_last_ckpt_are_named_before_a_resume(
    one_epoch_run: Path, tmp_path: Path
) -> None:
    """P9: 40 bytes overwritten in place (same size) resumed silently, with other losses."""
    from visattn.training.resume import SEAL_SUFFIX

    run = _copy(one_epoch_run, tmp_path / "run")
    last = next(run.rglob("last.ckpt"))
    assert Path(f"{last}{SEAL_SUFFIX}").is_file()  # sealed when written
    data = bytearray(last.read_bytes())
    at = len(data) // 2
    data[at : at + 40] = bytes(b ^ 0xFF for b in data[at : at + 40])
    last.write_bytes(bytes(data))
    config = next(run.rglob("config.yaml"))
    recorded = config.read_bytes()
    with pytest.raises(ValueError, match=r"changed after it was written.*last\.ckpt\.sha256"):
        tiny_fit(run, "--trainer.max_epochs=2", "--ckpt_path=last")
    assert config.read_bytes() == recorded


def test_checkpoints_are_written_whole_and_their_seals_follow_them(tmp_path: Path) -> None:
    from visattn.training.resume import SEAL_SUFFIX, SealedCheckpointIO, check_seal

    io = SealedCheckpointIO()
    path = tmp_path / "c" / "last.ckpt"
    io.save_checkpoint({"epoch": 1, "w": torch.ones(3)}, path)
    check_seal(path)
    assert sorted(p.name for p in path.parent.iterdir()) == ["last.ckpt", "last.ckpt.sha256"]
    io.save_checkpoint({"epoch": 2, "w": torch.ones(3)}, path)  # replaced whole
    check_seal(path)
    assert torch.load(path, weights_only=True)["epoch"] == 2
    io.remove_checkpoint(path)
    assert not path.exists() and not Path(f"{path}{SEAL_SUFFIX}").exists()


def test_last_ckpt_is_the_last_epochs_even_when_no_ranked_checkpoint_is_saved(
    tmp_path: Path,
) -> None:
    """Lightning 2.6 writes last.ckpt only in a step that also saved a ranked checkpoint, so after
    epochs that did not improve, --ckpt_path last went back in time. With no ranked checkpoint at
    all (save_top_k 0) last.ckpt must still follow every epoch, and record its own path."""
    tiny_fit(tmp_path, "--trainer.max_epochs=2", "--checkpoint.save_top_k=0")
    assert _checkpoints(tmp_path) == {"last.ckpt": 1}
    path = next(tmp_path.rglob("last.ckpt"))
    state = torch.load(path, map_location="cpu", weights_only=True)["callbacks"]
    (ours,) = [v for k, v in state.items() if k.startswith("BestAndLastCheckpoint")]
    assert Path(ours["last_model_path"]) == path


def _resume_config(**data: object) -> Namespace:
    return Namespace(model=Namespace(lr=0.1), data=Namespace(**data))


def test_a_resume_names_no_option_the_data_set_never_read() -> None:
    """A sweep on image folders, resumed with its quickstart base's ``target_size``: the data
    module dropped that option when the run started (checkpoint: None), so it is no change the
    user made and no warning names it. The generated data reads it: there it is named."""
    folder = {
        "hyper_parameters": {"lr": 0.1},
        "datamodule_hyper_parameters": {
            "dataset": "imagefolder",
            "target_size": None,
            "batch_size": 64,
        },
    }
    config = _resume_config(dataset="imagefolder", target_size=[0.28, 0.4], batch_size=64)
    assert restore_recorded(config, folder, "last.ckpt") == []
    assert config.data.target_size == [0.28, 0.4]  # left as given: the data module drops it

    shapes = {
        "hyper_parameters": {"lr": 0.1},
        "datamodule_hyper_parameters": {
            "dataset": "shapes",
            "target_size": [0.2, 0.3],
            "batch_size": 64,
        },
    }
    config = _resume_config(dataset="shapes", target_size=[0.28, 0.4], batch_size=32)
    kept = restore_recorded(config, shapes, "last.ckpt")
    assert kept == [
        "--data.target_size [0.28, 0.4] (the run keeps [0.2, 0.3])",
        "--data.batch_size 32 (the run keeps 64)",
    ]
    assert config.data.target_size == [0.2, 0.3]
