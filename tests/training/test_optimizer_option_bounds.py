"""Optimizer options that would train silently wrong are refused when the module is built, and
any torch optimizer class can be named (visattn/training/optimizers.py)."""

from __future__ import annotations

import math

import pytest
import torch

pytest.importorskip("lightning")

from visattn.training.module import ClassificationModule
from visattn.training.optimizers import optimizer_spec


@pytest.mark.parametrize("weight_decay", [-1.0, -1e-8, math.nan, math.inf])
def test_negative_nan_or_infinite_weight_decay_is_refused_naming_the_option(
    weight_decay: float,
) -> None:
    with pytest.raises(ValueError, match=r"weight_decay must be a finite number >= 0 \(model\."):
        ClassificationModule(model="resnet20_cifar", num_classes=4, weight_decay=weight_decay)


def test_zero_weight_decay_is_allowed() -> None:
    module = ClassificationModule(model="resnet20_cifar", num_classes=4, weight_decay=0.0)
    assert module.hparams.weight_decay == 0.0


@pytest.mark.parametrize("lr", [0.0, -0.1, math.nan, math.inf])
def test_a_learning_rate_that_trains_nothing_or_diverges_at_once_is_refused(lr: float) -> None:
    with pytest.raises(ValueError, match=r"--model\.lr must be a finite number > 0"):
        ClassificationModule(model="resnet20_cifar", num_classes=4, lr=lr)


@pytest.mark.parametrize("mult", [math.nan, math.inf, -1.0])
def test_a_non_finite_or_negative_lr_mult_is_refused(mult: float) -> None:
    with pytest.raises(ValueError, match=r"lr_mult values must be finite numbers >= 0"):
        ClassificationModule(model="resnet20_cifar", num_classes=4, lr_mult={"attention": mult})


def test_a_warm_up_as_long_as_the_run_is_warned_about(tmp_path) -> None:
    from helpers.training import tiny_fit

    with pytest.warns(UserWarning, match=r"warmup_epochs 2\.0 is not shorter than the run"):
        tiny_fit(
            tmp_path,
            "--trainer.max_epochs=2",
            "--model.schedule=cosine",
            "--model.warmup_epochs=2",
        )


# --------------------------------------------------------------------------- any optimizer class

RADAM = {"class_path": "torch.optim.RAdam", "init_args": {"decoupled_weight_decay": True}}


def test_any_optimizer_class_in_lightnings_spelling_gets_visattns_groups_and_lr() -> None:
    module = ClassificationModule(
        model="resnet20_cifar",
        num_classes=4,
        optimizer=RADAM,
        lr=0.003,
        weight_decay=0.05,
        no_weight_decay_norm_bias=True,
        lr_mult={"head": 2.0},
    )
    module.trainer = type("T", (), {"max_epochs": 2, "estimated_stepping_batches": 10})()
    module._steps_per_epoch = lambda: 5  # no trainer loop here: the schedule's length
    opt = module.configure_optimizers()["optimizer"]
    assert type(opt) is torch.optim.RAdam and opt.defaults["decoupled_weight_decay"] is True
    by_name = {g["name"]: g for g in opt.param_groups}
    assert by_name["head/decay"]["initial_lr"] == pytest.approx(0.006)  # lr x lr_mult
    assert by_name["backbone/no_decay"]["weight_decay"] == 0.0
    assert by_name["backbone/decay"]["weight_decay"] == 0.05


def test_a_bare_class_path_is_the_class_with_its_defaults() -> None:
    spec = optimizer_spec("torch.optim.Adagrad")
    assert spec.cls is torch.optim.Adagrad and spec.init_args == {}


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("adam", r"neither a named optimizer \(sgd, adamw\) nor a class path.*'adamw'"),
        ("torch.optim.Radam", r"cannot import 'torch.optim.Radam'.*did you mean 'RAdam'"),
        ("torch.nn.Linear", r"'torch.nn.Linear' is not a torch.optim.Optimizer class"),
        ({"class_path": "torch.optim.RAdam", "init_args": {"lr": 0.1}}, r"lr: set model\.lr"),
        (
            {"class_path": "torch.optim.RAdam", "init_args": {"decoupled_wd": True}},
            r"RAdam takes no 'decoupled_wd' \(did you mean 'decoupled_weight_decay'\?\)",
        ),
        ({"class_path": "torch.optim.RAdam", "init_arg": {}}, r"unknown key 'init_arg'"),
        ({"init_args": {}}, r"a mapping with class_path"),
    ],
)
def test_a_wrong_optimizer_is_refused_when_the_module_is_built(value, message) -> None:
    with pytest.raises(ValueError, match=message):
        ClassificationModule(model="resnet20_cifar", num_classes=4, optimizer=value)


def test_a_named_optimizers_option_is_refused_for_a_class_it_does_not_reach() -> None:
    with pytest.raises(
        ValueError, match=r"model\.momentum .*put it in model\.optimizer\.init_args"
    ):
        ClassificationModule(model="resnet20_cifar", num_classes=4, optimizer=RADAM, momentum=0.5)
    ClassificationModule(model="resnet20_cifar", num_classes=4, optimizer=RADAM, momentum=0.9)


def test_yaml_and_flags_resolve_the_class_path_to_the_same_settings(tmp_path) -> None:
    from visattn.training.config import RunConfig

    def canonical_dump(args: list[str]) -> str:
        return RunConfig.parse(args).canonical_dump()

    config = tmp_path / "opt.yaml"
    config.write_text(
        "model:\n  optimizer:\n    class_path: torch.optim.RAdam\n"
        "    init_args: {decoupled_weight_decay: true}\n  lr: 0.003\n"
    )
    by_file = canonical_dump(["fit", "--config", str(config)])
    by_flags = canonical_dump(
        [
            "fit",
            "--model.optimizer={class_path: torch.optim.RAdam, "
            "init_args: {decoupled_weight_decay: true}}",
            "--model.lr=0.003",
        ]
    )
    assert by_file == by_flags and "model.optimizer.class_path" in by_file
    # a run that keeps the named recipe has no new key: finished sweeps' markers stay valid
    assert "optimizer" not in canonical_dump(["fit", "--model.lr=0.003"])


def test_a_class_path_optimizer_trains(tmp_path) -> None:
    from helpers.training import tiny_fit

    tiny_fit(tmp_path, "--model.optimizer=torch.optim.RAdam", "--trainer.max_epochs=1")
    assert list(tmp_path.rglob("metrics.csv"))


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("gamma", -1.0),
        ("gamma", 0.0),
        ("gamma", math.nan),
        ("min_lr_ratio", -1.0),
        ("min_lr_ratio", 1.5),
        ("warmup_start", -0.1),
        ("warmup_epochs", -1.0),
        ("milestones", [5, -1]),
    ],
)
def test_schedule_factors_that_would_make_the_learning_rate_negative_are_refused(key, value):
    """P8: ``multistep`` with gamma -1 and cosine with min_lr_ratio -1 trained with negative
    learning rates."""
    with pytest.raises(ValueError, match=rf"{key} must be"):
        ClassificationModule(model="resnet20_cifar", num_classes=4, **{key: value})


def test_the_schedule_factors_edges_are_allowed() -> None:
    ClassificationModule(
        model="resnet20_cifar",
        num_classes=4,
        gamma=1.0,
        min_lr_ratio=0.0,
        warmup_start=0.0,
        warmup_epochs=0.0,
        milestones=[0, 3],
    )
