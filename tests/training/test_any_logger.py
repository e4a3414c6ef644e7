"""A run's own files (``metrics.csv``, ``config.yaml``, ``checkpoints/``, the summary) live in
``<default_root_dir>/lightning_logs/version_N`` whatever ``--trainer.logger`` is, never collide
with the logger's files, and ``--ckpt_path last`` resumes bit-exactly with TensorBoard (the
default), CSV, MLflow and W&B in offline mode, the last two continuing the same logger run; a
logger that refuses its options says why in its own words; the ``AttentionPictures`` callback
sends image summaries to TensorBoard without changing training."""

from __future__ import annotations

import csv
import io
import json
import logging
from pathlib import Path

import pytest
import torch

pytest.importorskip("lightning")

from helpers.tiers import tiered
from helpers.training import killed_fit, tiny_fit
from lightning.pytorch.loggers import CSVLogger

from visattn.training.loggers import RUN_IDS, LoggerConfigError, build_loggers

MLFLOW_CLASS = "lightning.pytorch.loggers.mlflow.MLFlowLogger"

CSV = "--trainer.logger=lightning.pytorch.loggers.CSVLogger"
MLFLOW = "--trainer.logger=lightning.pytorch.loggers.MLFlowLogger"
PICTURES = (
    '--trainer.callbacks+={"class_path": "visattn.training.callbacks.AttentionPictures", '
    '"init_args": {"every_n_epochs": 1, "num_images": 2}}'
)


def _step(metric: object) -> int:
    return metric.step


def _logger_args(kind: str, root: Path) -> list[str]:
    if kind == "tensorboard":
        return []
    if kind == "csv":
        return [CSV, f"--trainer.logger.save_dir={root}"]
    pytest.importorskip("mlflow")
    store = root.parent / f"{root.name}_store"
    store.mkdir(exist_ok=True)
    return [
        MLFLOW,
        f"--trainer.logger.tracking_uri=sqlite:///{store / 'mlflow.db'}",
        f"--trainer.logger.artifact_location={(store / 'artifacts').as_uri()}",
    ]


@pytest.fixture(scope="module")
def reference(tmp_path_factory: pytest.TempPathFactory) -> str:
    """metrics.csv of an uninterrupted two-epoch run with the default logger, in one thread like
    the runs it is compared with (a module fixture runs before the per-test one-thread fixture;
    two threads sum in another order)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        summary = tiny_fit(tmp_path_factory.mktemp("reference"), "--trainer.max_epochs=2")
    finally:
        torch.set_num_threads(threads)
    return Path(summary["metrics_csv"]).read_text()


@pytest.mark.parametrize("kind", ["tensorboard", "csv", "mlflow"])
def test_resume_last_is_exact_and_the_run_keeps_its_own_files(
    tmp_path: Path, kind: str, reference: str
) -> None:
    root = tmp_path / "run"
    args = _logger_args(kind, root)
    first = tiny_fit(root, "--trainer.max_epochs=1", *args)
    run_dir = root / "lightning_logs" / "version_0"
    assert Path(first["log_dir"]) == run_dir
    assert Path(first["last_ckpt"]) == run_dir / "checkpoints" / "last.ckpt"
    assert (run_dir / "config.yaml").is_file()
    resumed = tiny_fit(root, "--trainer.max_epochs=2", "--ckpt_path=last", *args)
    assert Path(resumed["log_dir"]) == run_dir
    assert resumed["epochs"] == 2
    assert Path(resumed["metrics_csv"]).read_text() == reference  # bit-exact, one row per epoch
    assert sorted(p.name for p in (root / "lightning_logs").iterdir()) == ["version_0"]
    if kind == "csv":  # Lightning's own step-level table, beside visattn's, not over it
        assert (run_dir / "csv" / "metrics.csv").is_file()
    if kind == "mlflow":  # nothing of the run's goes into the tracking store
        store = root.parent / "run_store"
        assert not list(store.rglob("metrics.csv")) and not list(store.rglob("config.yaml"))
        assert not list(store.rglob("*.ckpt"))
        # the resumed fit continued the first fit's MLflow run: one run, both epochs in it
        from mlflow.tracking import MlflowClient

        client = MlflowClient(f"sqlite:///{store / 'mlflow.db'}")
        experiments = [e.experiment_id for e in client.search_experiments()]
        (run,) = client.search_runs(experiments)
        assert json.loads((run_dir / RUN_IDS).read_text()) == {MLFLOW_CLASS: [run.info.run_id]}
        history = sorted(client.get_metric_history(run.info.run_id, "val/acc"), key=_step)
        expected = [float(row["val/acc"]) for row in csv.DictReader(io.StringIO(reference))]
        assert len(expected) == 2
        assert [h.value for h in history] == pytest.approx(expected)  # epochs 0 and 1, in one run


def test_wandb_offline_resume_is_exact_and_continues_the_same_run(
    tmp_path: Path, reference: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytest.importorskip("wandb")
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_SILENT", "true")
    root, store = tmp_path / "run", tmp_path / "wandb_store"
    store.mkdir()
    args = [
        "--trainer.logger=lightning.pytorch.loggers.WandbLogger",
        f"--trainer.logger.save_dir={store}",
        "--trainer.logger.project=visattn-test",
    ]
    tiny_fit(root, "--trainer.max_epochs=1", *args)
    run_dir = root / "lightning_logs" / "version_0"
    (run_id,) = json.loads((run_dir / RUN_IDS).read_text())[
        "lightning.pytorch.loggers.wandb.WandbLogger"
    ]
    resumed = tiny_fit(root, "--trainer.max_epochs=2", "--ckpt_path=last", *args)
    assert Path(resumed["log_dir"]) == run_dir
    assert Path(resumed["metrics_csv"]).read_text() == reference  # bit-exact
    # both fits wrote to the run with the recorded id (offline runs are folders ending in it)
    runs = sorted(p.name for p in (store / "wandb").glob("offline-run-*"))
    # every offline run folder carries the first run's id (a new W&B run would add a folder
    # with another id); wandb may reuse one folder for both sessions when they start within
    # the same second, so the number of folders is not checked
    assert runs and all(name.endswith(f"-{run_id}") for name in runs), runs
    assert not list(store.rglob("metrics.csv")) and not list(store.rglob("*.ckpt"))


def test_a_resumed_run_passes_its_recorded_mlflow_run_id_back(tmp_path: Path) -> None:
    pytest.importorskip("mlflow")
    run_dir = tmp_path / "lightning_logs" / "version_2"
    run_dir.mkdir(parents=True)
    (run_dir / RUN_IDS).write_text(json.dumps({MLFLOW_CLASS: ["abc123"]}))
    spec = {
        "class_path": "lightning.pytorch.loggers.MLFlowLogger",
        "init_args": {"tracking_uri": f"sqlite:///{tmp_path / 'mlflow.db'}"},
    }
    (resumed,) = build_loggers(spec, tmp_path, 2, resume=True)
    assert resumed._run_id == "abc123"
    (fresh,) = build_loggers(spec, tmp_path, 2)  # not a resume: a new MLflow run
    assert fresh._run_id is None
    given = {**spec, "init_args": {**spec["init_args"], "run_id": "mine"}}
    (explicit,) = build_loggers(given, tmp_path, 2, resume=True)  # the command line wins
    assert explicit._run_id == "mine"
    (run_dir / RUN_IDS).write_text("{not json")
    with pytest.raises(LoggerConfigError, match="delete it to resume into new logger runs"):
        build_loggers(spec, tmp_path, 2, resume=True)


def test_two_mlflow_runs_sharing_a_store_keep_their_own_files(tmp_path: Path) -> None:
    root = tmp_path / "run"
    args = _logger_args("mlflow", root)
    first = tiny_fit(root, "--trainer.max_epochs=1", *args)
    text = Path(first["metrics_csv"]).read_text()
    second = tiny_fit(root, "--trainer.max_epochs=1", "--model.lr=0.01", *args)
    assert Path(second["log_dir"]) == root / "lightning_logs" / "version_1"
    assert Path(first["metrics_csv"]).read_text() == text
    assert Path(second["metrics_csv"]).read_text() != text
    assert "lr: 0.01" in (root / "lightning_logs/version_1/config.yaml").read_text()
    assert "lr: 0.01" not in (root / "lightning_logs/version_0/config.yaml").read_text()


def test_attention_pictures_reach_tensorboard_and_leave_training_unchanged(
    tmp_path: Path, reference: str
) -> None:
    pytest.importorskip("tensorboard")
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    summary = tiny_fit(tmp_path, "--trainer.max_epochs=2", PICTURES)
    assert Path(summary["metrics_csv"]).read_text() == reference
    events = EventAccumulator(summary["log_dir"], size_guidance={"images": 0})
    events.Reload()
    tags = events.Tags()["images"]
    # SE applies channel weights: one picture of them per stage, and Grad-CAM of the last stage
    assert sorted(tags) == [
        "channels/layer1",
        "channels/layer2",
        "channels/layer3",
        "gradcam/layer3",
    ]
    steps = [int(r.split(",")[1]) for r in reference.splitlines()[1:]]
    for tag in tags:
        images = events.Images(tag)
        assert [im.step for im in images] == steps  # after every epoch
        assert all(im.width > im.height > 0 for im in images)  # the two images side by side


def test_attention_pictures_with_a_logger_without_images_say_so_once(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.INFO):
        tiny_fit(tmp_path, "--trainer.max_epochs=2", *_logger_args("csv", tmp_path), PICTURES)
    told = [r.getMessage() for r in caplog.records if "AttentionPictures" in r.getMessage()]
    assert told == ["AttentionPictures: CSVLogger takes no images; none sent"]


def test_mlflow_refusing_a_file_store_shows_its_own_message(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytest.importorskip("mlflow")
    monkeypatch.delenv("MLFLOW_ALLOW_FILE_STORE", raising=False)
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    with pytest.raises(LoggerConfigError, match="MLFLOW_ALLOW_FILE_STORE") as err:
        tiny_fit(
            tmp_path,
            "--trainer.max_epochs=1",
            MLFLOW,
            f"--trainer.logger.save_dir={tmp_path / 'mlruns'}",
        )
    assert "MLFlowLogger" in str(err.value)
    assert "Union" not in str(err.value)
    assert not (tmp_path / "lightning_logs").exists()  # refused before anything was written


class Refusing(CSVLogger):
    """A logger that refuses its options, as a misconfigured tracking client would."""

    def __init__(self, token: str = "") -> None:
        raise ValueError(f"token {token!r} is not valid for this server")


def test_a_logger_that_refuses_its_options_is_named_with_its_own_message(tmp_path: Path) -> None:
    spec = {"class_path": f"{__name__}.Refusing", "init_args": {"token": "abc"}}
    with pytest.raises(LoggerConfigError, match=r"Refusing could not be created: token 'abc'"):
        build_loggers(spec, tmp_path, 0)
    with pytest.raises(LoggerConfigError, match="no such class"):
        build_loggers({"class_path": "lightning.pytorch.loggers.NoSuchLogger"}, tmp_path, 0)


def test_loggers_under_the_run_tree_share_the_run_version(tmp_path: Path) -> None:
    csv = {"class_path": "lightning.pytorch.loggers.CSVLogger", "init_args": {"save_dir": tmp_path}}
    tb = {
        "class_path": "lightning.pytorch.loggers.TensorBoardLogger",
        "init_args": {"save_dir": str(tmp_path)},
    }
    default, csv_logger, tb_logger = (
        *build_loggers(None, tmp_path, 3),
        *build_loggers([csv, tb], tmp_path, 3),
    )
    run_dir = tmp_path / "lightning_logs" / "version_3"
    assert Path(default.log_dir) == run_dir
    assert Path(tb_logger.log_dir) == run_dir
    assert Path(csv_logger.log_dir) == run_dir / "csv"
    elsewhere = {
        "class_path": "lightning.pytorch.loggers.CSVLogger",
        "init_args": {"save_dir": str(tmp_path / "csv_logs")},
    }
    (other,) = build_loggers(elsewhere, tmp_path, 3)
    assert Path(other.log_dir) == tmp_path / "csv_logs" / "lightning_logs" / "version_0"
    assert build_loggers(False, tmp_path, 3) == []


def _logged_rows(kind: str, run_dir: Path, store: Path) -> object:
    """What the logger kept of a run, in a form to compare row by row."""
    if kind == "csv":
        return (run_dir / "csv" / "metrics.csv").read_text()
    if kind == "tensorboard":
        from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

        acc = EventAccumulator(str(run_dir))
        acc.Reload()
        return {tag: [(e.step, e.value) for e in acc.Scalars(tag)] for tag in acc.Tags()["scalars"]}
    from mlflow.tracking import MlflowClient

    client = MlflowClient(f"sqlite:///{store / 'mlflow.db'}")
    (run,) = client.search_runs([e.experiment_id for e in client.search_experiments()])
    return {
        key: sorted((m.step, m.value) for m in client.get_metric_history(run.info.run_id, key))
        for key in sorted(run.data.metrics)
    }


@pytest.mark.parametrize(
    ("kind", "left"),
    # the default logger with nothing left to log, and MLflow (its own store) with rows left;
    # the other four pairs in the heavy tier
    tiered(
        [(kind, left) for kind in ("csv", "tensorboard", "mlflow") for left in ("some", "none")],
        keep=lambda case: case in (("tensorboard", "none"), ("mlflow", "some")),
    ),
)
def test_a_killed_and_resumed_run_keeps_every_logger_row(
    tmp_path: Path, kind: str, left: str
) -> None:
    """Killed (os._exit, no clean-up) as epoch 2 starts, then ``--ckpt_path last``: the logger
    holds what an uninterrupted 3-epoch run's holds, row by row. ``none``: the resume has nothing
    left to train (max_epochs 2), and the logger keeps the rows it had."""
    epochs = 3 if left == "some" else 2
    whole_root, root = tmp_path / "whole", tmp_path / "run"
    tiny_fit(whole_root, f"--trainer.max_epochs={epochs}", *_logger_args(kind, whole_root))
    killed_fit(root, 2, "--trainer.max_epochs=3", *_logger_args(kind, root))
    tiny_fit(root, f"--trainer.max_epochs={epochs}", "--ckpt_path=last", *_logger_args(kind, root))
    got = _logged_rows(kind, root / "lightning_logs/version_0", tmp_path / "run_store")
    want = _logged_rows(kind, whole_root / "lightning_logs/version_0", tmp_path / "whole_store")
    assert got == want
