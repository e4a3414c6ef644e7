"""The LightningModule: schedule, optimizer groups, metrics keys, NaN stop; and full runs through
``visattn.training.cli.run``: determinism, resume, summary."""

from __future__ import annotations

import hashlib
import math
from pathlib import Path

import pytest
import torch
from helpers.files import read_csv
from helpers.training import TINY, tiny_fit

from visattn.models.placement import Placement
from visattn.profile import device_description
from visattn.training import ClassificationModule, NonFiniteLossError, lr_factor, run

# -------------------------------------------------------------------------------------- schedule


def test_multistep_schedule_divides_by_ten_at_82_and_123() -> None:
    kw = dict(schedule="multistep", max_epochs=164, milestones=[82, 123], gamma=0.1)
    assert lr_factor(0, **kw) == 1.0
    assert lr_factor(81.99, **kw) == 1.0
    assert lr_factor(82, **kw) == pytest.approx(0.1)
    assert lr_factor(122.5, **kw) == pytest.approx(0.1)
    assert lr_factor(123, **kw) == pytest.approx(0.01)


def test_cosine_schedule_with_linear_warmup() -> None:
    kw = dict(schedule="cosine", max_epochs=10, warmup_epochs=2, warmup_start=0.0)
    assert lr_factor(0, **kw) == 0.0
    assert lr_factor(1, **kw) == pytest.approx(0.5)
    assert lr_factor(2, **kw) == pytest.approx(1.0)
    assert lr_factor(6, **kw) == pytest.approx(0.5)  # half-way through the cosine
    assert lr_factor(10, **kw) == pytest.approx(0.0, abs=1e-12)
    assert lr_factor(4, **kw) == pytest.approx(0.5 * (1 + math.cos(math.pi * 0.25)))


def test_linear_schedule_is_a_triangle_after_the_warm_up() -> None:
    kw = dict(schedule="linear", max_epochs=10, warmup_epochs=1, warmup_start=0.1)
    assert lr_factor(0, **kw) == pytest.approx(0.1)
    assert lr_factor(0.5, **kw) == pytest.approx(0.55)
    assert lr_factor(1, **kw) == pytest.approx(1.0)
    assert lr_factor(5.5, **kw) == pytest.approx(0.5)  # half-way down
    assert lr_factor(10, **kw) == pytest.approx(0.0, abs=1e-12)
    assert lr_factor(7, min_lr_ratio=0.2, **kw) == pytest.approx(1 - 0.8 * 6 / 9)


def test_no_weight_decay_on_norms_and_biases() -> None:
    m = ClassificationModule("resnet20_cifar", num_classes=10, no_weight_decay_norm_bias=True)
    groups = m._param_groups()
    decay = [p for g in groups if g["weight_decay"] == 1e-4 for p in g["params"]]
    no_decay = [p for g in groups if g["weight_decay"] == 0.0 for p in g["params"]]
    assert len(decay) + len(no_decay) == len(list(m.net.parameters()))
    assert all(p.ndim > 1 for p in decay)
    names_no_wd = {n for n, p in m.net.named_parameters() if any(p is q for q in no_decay)}
    assert (
        "bn1.weight" in names_no_wd and "fc.bias" in names_no_wd and "fc.weight" not in names_no_wd
    )


def test_unknown_optimizer_and_schedule_are_rejected() -> None:
    with pytest.raises(ValueError, match="optimizer"):
        ClassificationModule("resnet20_cifar", optimizer="lamb")
    with pytest.raises(ValueError, match="schedule"):
        ClassificationModule("resnet20_cifar", schedule="poly")


def test_attention_is_kept_as_plain_normalised_mappings() -> None:
    m = ClassificationModule("resnet20_cifar", attention={"name": "se", "args": {"reduction": 4}})
    assert m.hparams.attention == Placement("se", args={"reduction": 4}).to_dict()


def test_label_smoothing_changes_the_loss_as_torch_defines_it() -> None:
    m = ClassificationModule("resnet20_cifar", num_classes=10, label_smoothing=0.1)
    logits = torch.randn(8, 10)
    y = torch.randint(0, 10, (8,))
    logp = logits.log_softmax(-1)
    expected = (0.9 * -logp.gather(1, y[:, None]).squeeze(1) - 0.1 * logp.mean(-1)).mean()
    torch.testing.assert_close(m._loss(logits, y), expected)


def test_channels_last_and_compile_options_keep_plain_state_dict_keys() -> None:
    m = ClassificationModule("resnet20_cifar", num_classes=10, channels_last=True)
    assert m.net.conv1.weight.is_contiguous(memory_format=torch.channels_last)
    assert m(torch.randn(2, 3, 32, 32)).shape == (2, 10)
    mc = ClassificationModule("resnet20_cifar", num_classes=10, compile=True)
    assert all(k.startswith(("net.", "train_", "val_", "test_")) for k in mc.state_dict())
    assert mc._forward_net is not mc.net


# ---------------------------------------------------------------------------------- short runs


def test_run_writes_config_checkpoints_metrics_and_summary(tmp_path: Path) -> None:
    s = tiny_fit(tmp_path, "--trainer.max_epochs=2")
    log_dir = Path(s["log_dir"])
    assert log_dir == tmp_path / "lightning_logs" / "version_0"
    assert (log_dir / "config.yaml").is_file()
    assert list(log_dir.glob("events.out.tfevents.*"))
    assert Path(s["best_ckpt"]).is_file() and Path(s["last_ckpt"]).name == "last.ckpt"
    rows = read_csv(s["metrics_csv"])
    assert [r["epoch"] for r in rows] == ["0", "1"]
    for key in ("train/loss", "val/loss", "val/acc", "val/acc5", "lr", "step"):
        assert all(r[key] != "" for r in rows), key
    assert s["best_val_acc"] == max(float(r["val/acc"]) for r in rows)
    assert s["last_val_acc"] == float(rows[-1]["val/acc"])
    assert s["epochs"] == 2 and s["params"] > 270_000 and s["macs"] > 0 and s["wall_s"] > 0
    # the link data.num_classes -> model.num_classes (9 shapes classes, never written)
    ckpt = torch.load(s["last_ckpt"], map_location="cpu", weights_only=False)
    assert ckpt["hyper_parameters"]["num_classes"] == 9
    assert ckpt["state_dict"]["net.fc.weight"].shape[0] == 9


def test_an_epoch_before_the_first_validation_saves_last_without_a_false_warning(
    tmp_path: Path,
) -> None:
    """Validating every second epoch (as the CIFAR-10 sweep does), the first epoch's checkpoint
    has no val/acc to rank by: last.ckpt is written, no best one, and Lightning's "could not
    find the monitored key" warning (a hint at a logging bug that is not there) stays away."""
    import warnings

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        s = tiny_fit(tmp_path, "--trainer.max_epochs=2", "--trainer.check_val_every_n_epoch=2")
    said = [str(w.message) for w in caught]
    assert not [m for m in said if "could not find the monitored key" in m], said
    rows = read_csv(s["metrics_csv"])
    assert [r["val/acc"] != "" for r in rows] == [False, True]
    assert Path(s["best_ckpt"]).name == "best-epoch001.ckpt" and Path(s["last_ckpt"]).is_file()


def test_a_resumed_run_is_not_warned_of_its_own_checkpoints(tmp_path: Path) -> None:
    """Lightning warns that a checkpoint folder "exists and is not empty"; resuming, the folder
    is the run's own (a new run gets a new version_N and an empty one)."""
    import warnings

    tiny_fit(tmp_path, "--trainer.max_epochs=1")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        tiny_fit(tmp_path, "--trainer.max_epochs=2", "--ckpt_path=last")
    assert not [w for w in caught if "is not empty" in str(w.message)]


def test_same_seed_gives_identical_metrics_csv(tmp_path: Path) -> None:
    a = tiny_fit(tmp_path / "a", "--trainer.max_epochs=2", "--data.cutout=4")
    b = tiny_fit(tmp_path / "b", "--trainer.max_epochs=2", "--data.cutout=4")
    assert Path(a["metrics_csv"]).read_text() == Path(b["metrics_csv"]).read_text()
    c = tiny_fit(tmp_path / "c", "--trainer.max_epochs=2", "--data.cutout=4", "--seed_everything=1")
    assert Path(c["metrics_csv"]).read_text() != Path(a["metrics_csv"]).read_text()


def test_resume_from_last_continues_the_same_run_to_the_planned_epoch(tmp_path: Path) -> None:
    first = tiny_fit(tmp_path, "--trainer.max_epochs=2")  # "interrupted" after 2 of 3 epochs
    before = read_csv(first["metrics_csv"])
    ckpt = torch.load(first["last_ckpt"], map_location="cpu", weights_only=False)
    recorded = ckpt["callbacks"]["RunSummary"]["fit_s"]  # the training time up to that save
    assert first["earlier_s"] == 0 and 0 < recorded <= first["wall_s"]
    # and by processor: all of it on this machine's
    by_device = ckpt["callbacks"]["RunSummary"]["fit_s_by_device"]
    assert by_device == {first["device"]: recorded}
    assert first["device"] == device_description("cpu") and first["earlier_s_by_device"] == {}
    resumed = tiny_fit(tmp_path, "--trainer.max_epochs=3", "--ckpt_path=last")
    assert resumed["earlier_s"] == recorded and resumed["wall_s"] > recorded
    assert resumed["earlier_s_by_device"] == by_device
    # CPU seconds too: the checkpoint's, by processor, carried into the resumed run's total
    cpu = ckpt["callbacks"]["RunSummary"]["fit_cpu_s_by_device"]
    assert set(cpu) == {first["device"]} and 0 < cpu[first["device"]] <= first["cpu_s"]
    assert resumed["earlier_cpu_s_by_device"] == cpu and resumed["cpu_s"] > cpu[first["device"]]
    assert resumed["log_dir"] == first["log_dir"]  # same version dir, same metrics.csv
    rows = read_csv(resumed["metrics_csv"])
    assert [r["epoch"] for r in rows] == ["0", "1", "2"]
    assert rows[:2] == before  # earlier rows kept verbatim
    assert int(rows[2]["step"]) == 3 * int(rows[0]["step"])  # global step continued
    assert resumed["epochs"] == 3


def test_resume_last_without_a_previous_run_says_where_it_looked(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match=r"last\.ckpt"):
        tiny_fit(tmp_path, "--trainer.max_epochs=1", "--ckpt_path=last")


def test_nan_loss_stops_with_step_and_advice(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    real = ClassificationModule._loss

    def poisoned(self: ClassificationModule, logits: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        loss = real(self, logits, y)
        if self.training and self.global_step == 4:
            return loss * float("nan")
        return loss

    monkeypatch.setattr(ClassificationModule, "_loss", poisoned)
    with pytest.raises(NonFiniteLossError) as err:
        tiny_fit(tmp_path, "--trainer.max_epochs=3")
    msg = str(err.value)
    assert "step 4" in msg and "epoch 1" in msg
    assert "--model.lr" in msg and "gradient_clip_val" in msg and "32-true" in msg


def test_test_subcommand_reports_test_accuracy(tmp_path: Path) -> None:
    fit = tiny_fit(tmp_path, "--trainer.max_epochs=1")
    s = run(
        ["test", *TINY, f"--trainer.default_root_dir={tmp_path}", f"--ckpt_path={fit['best_ckpt']}"]
    )
    assert 0.0 <= s["test_acc"] <= 1.0 and s["best_val_acc"] is None


def test_adamw_cosine_with_warmup_runs_and_lr_rises(tmp_path: Path) -> None:
    s = tiny_fit(
        tmp_path,
        "--trainer.max_epochs=2",
        "--model.optimizer=adamw",
        "--model.lr=0.001",
        "--model.schedule=cosine",
        "--model.warmup_epochs=1",
        "--model.warmup_start=0.1",
        "--model.no_weight_decay_norm_bias=true",
        "--model.label_smoothing=0.1",
    )
    rows = read_csv(s["metrics_csv"])
    # lr logged at each epoch's start: 0.1 * lr, then the full lr after the 1-epoch warm-up
    assert float(rows[0]["lr"]) == pytest.approx(1e-4)
    assert float(rows[1]["lr"]) == pytest.approx(1e-3)


@pytest.mark.parametrize("recorded", ["another machine", "total only"])
def test_a_checkpoint_carries_the_training_time_by_processor_across_machines(
    tmp_path: Path, recorded: str
) -> None:
    """A run resumed from a checkpoint written elsewhere keeps that machine's seconds apart
    from this one's, in the summary and in its next checkpoint; a checkpoint of an older visattn
    (the total only) gives its seconds under ``RunSummary.UNRECORDED_DEVICE``."""
    from visattn.training.callbacks import RunSummary

    first = tiny_fit(tmp_path, "--trainer.max_epochs=1")
    last = Path(first["last_ckpt"])
    ckpt = torch.load(last, map_location="cpu", weights_only=False)
    state = ckpt["callbacks"]["RunSummary"]
    if recorded == "another machine":
        state.update(fit_s=50.0, fit_s_by_device={"Other CPU (avx512f)": 50.0})
        state["fit_cpu_s_by_device"] = {"Other CPU (avx512f)": 40.0}
        earlier = {"Other CPU (avx512f)": 50.0}
    else:
        state.pop("fit_s_by_device")
        state.pop("fit_cpu_s_by_device")
        state["fit_s"] = 50.0
        earlier = {RunSummary.UNRECORDED_DEVICE: 50.0}
    torch.save(ckpt, last)
    data = last.read_bytes()  # sealed again, as the run would have written it
    Path(f"{last}.sha256").write_text(f"{hashlib.sha256(data).hexdigest()}  {len(data)}\n")
    resumed = tiny_fit(tmp_path, "--trainer.max_epochs=2", "--ckpt_path=last")
    assert resumed["earlier_s"] == 50.0 and resumed["earlier_s_by_device"] == earlier
    carried = torch.load(resumed["last_ckpt"], map_location="cpu", weights_only=False)
    by_device = carried["callbacks"]["RunSummary"]["fit_s_by_device"]
    here = device_description("cpu")
    assert set(by_device) == {*earlier, here} and by_device[here] > 0
    assert {k: v for k, v in by_device.items() if k != here} == earlier
    # CPU seconds: the other machine's were carried; an older checkpoint's are unknown, so the
    # run has no CPU total and its next checkpoint none either (never a total short of a piece)
    cpu = carried["callbacks"]["RunSummary"].get("fit_cpu_s_by_device")
    if recorded == "another machine":
        assert resumed["earlier_cpu_s_by_device"] == {"Other CPU (avx512f)": 40.0}
        assert set(cpu) == {*earlier, here} and cpu["Other CPU (avx512f)"] == 40.0
        assert resumed["cpu_s"] > 40.0
    else:
        assert resumed["earlier_cpu_s_by_device"] is None and resumed["cpu_s"] is None
        assert cpu is None


def test_a_processors_name_tells_host_kinds_of_one_name_apart() -> None:
    """Markers of an AMD EPYC Zen 2 and a Zen 3 host both read "AMD EPYC (avx2)"; the family
    and model numbers /proc/cpuinfo gives tell them apart (the thread-hours go by host kind)."""
    try:
        info = Path("/proc/cpuinfo").read_text().splitlines()
    except OSError:
        pytest.skip("no /proc/cpuinfo")
    fields: dict[str, str] = {}
    for line in info:
        key, _, value = line.partition(":")
        fields.setdefault(key.strip(), value.strip())
    if "cpu family" not in fields or "model" not in fields:
        pytest.skip("/proc/cpuinfo names no family and model")
    described = device_description("cpu")
    assert described.startswith(fields.get("model name", ""))
    assert f", family {fields['cpu family']} model {fields['model']}" in described
