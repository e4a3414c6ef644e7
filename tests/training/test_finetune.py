"""Fine-tuning a trained network with new attention blocks: parameter groups with learning-rate
multipliers, a frozen-backbone warm-up, and the shipped finetune configs."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from helpers.training import TINY

from visattn.training import ClassificationModule, run
from visattn.training.parameters import split_parameters


def _module(**kw) -> ClassificationModule:
    kw.setdefault("attention", {"name": "se"})
    return ClassificationModule("resnet20_cifar", num_classes=9, **kw)


class _FakeTrainer:
    max_epochs = 2
    num_training_batches = 4
    accumulate_grad_batches = 1
    estimated_stepping_batches = 8


def _groups(m: ClassificationModule) -> list[dict]:
    m.__dict__["_trainer"] = _FakeTrainer()  # configure_optimizers reads the loader length
    try:
        return ClassificationModule._param_groups(m)
    finally:
        m.__dict__.pop("_trainer")


@pytest.mark.parametrize("no_wd", (False, True))
def test_parameter_groups_hold_every_parameter_exactly_once(no_wd: bool) -> None:
    m = _module(no_weight_decay_norm_bias=no_wd, lr_mult={"backbone": 0.1})
    groups = _groups(m)
    ids = [id(p) for g in groups for p in g["params"]]
    assert len(ids) == len(set(ids)) == len(list(m.net.parameters()))
    names = {g["name"] for g in groups}
    assert {"backbone/decay", "attention/decay", "head/decay"} <= names
    for g in groups:
        kind = g["name"].split("/")[0]
        assert g["lr"] == pytest.approx(0.1 * (0.1 if kind == "backbone" else 1.0))
        if no_wd and g["name"].endswith("no_decay"):
            assert g["weight_decay"] == 0 and all(p.ndim <= 1 for p in g["params"])


def test_split_parameters_finds_attention_and_head() -> None:
    m = _module()
    kinds = split_parameters(m.net)
    assert all(".attn_" in n for n, _ in kinds["attention"]) and kinds["attention"]
    assert {n for n, _ in kinds["head"]} == {"fc.weight", "fc.bias"}
    assert not any(".attn_" in n or n.startswith("fc.") for n, _ in kinds["backbone"])


def test_unknown_lr_mult_kind_is_an_error() -> None:
    with pytest.raises(ValueError, match="lr_mult: unknown parameter kind"):
        _module(lr_mult={"neck": 0.1})


def _snapshot(m: ClassificationModule) -> dict[str, dict[str, torch.Tensor]]:
    kinds = split_parameters(m.net)
    out = {k: {n: p.detach().clone() for n, p in v} for k, v in kinds.items()}
    out["bn_stats"] = {
        n: b.detach().clone() for n, b in m.net.named_buffers() if n.endswith("running_mean")
    }
    return out


def _changed(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> bool:
    return any(not torch.equal(a[k], b[k]) for k in a)


def test_frozen_backbone_stays_fixed_then_is_released(tmp_path: Path) -> None:
    """freeze_backbone_epochs=1: the backbone (weights and BN statistics) does not move in
    epoch 0 while attention and head do; in epoch 1 it moves."""
    seen: list[dict] = []

    from lightning.pytorch.callbacks import Callback

    class Snap(Callback):
        def on_train_epoch_start(self, trainer, pl_module):
            seen.append(_snapshot(pl_module))

        def on_train_end(self, trainer, pl_module):
            seen.append(_snapshot(pl_module))

    import visattn.training.cli as cli

    orig = cli.VisattnCLI._instantiate_trainer

    def patched(self, config, callbacks):
        return orig(self, config, [*callbacks, Snap()])

    cli.VisattnCLI._instantiate_trainer = patched
    try:
        run(
            [
                "fit",
                *TINY,
                "--model.freeze_backbone_epochs=1",
                "--trainer.max_epochs=2",
                f"--trainer.default_root_dir={tmp_path}",
            ]
        )
    finally:
        cli.VisattnCLI._instantiate_trainer = orig
    start0, start1, end = seen
    assert not _changed(start0["backbone"], start1["backbone"])
    assert not _changed(start0["bn_stats"], start1["bn_stats"])
    assert _changed(start0["attention"], start1["attention"])
    assert _changed(start0["head"], start1["head"])
    assert _changed(start1["backbone"], end["backbone"])
    assert _changed(start1["bn_stats"], end["bn_stats"])


# ---------------------------------------------------------------------------- memory format


def test_channels_last_is_the_default_and_can_be_turned_off() -> None:
    assert _module().memory_format == "channels_last"
    assert _module(channels_last=False).memory_format == "NCHW"


@pytest.mark.parametrize("attention", ({"name": "cbam"}, {"name": "nonlocal", "stages": [3]}))
def test_one_training_step_gives_the_same_loss_in_both_formats(attention: dict) -> None:
    """The loss in float32 within 1e-5 relative; the gradients in float64, where rounding does
    not hide a real difference (in float32, BN over nearly dead channels amplifies the
    formats' different summation orders to ~1e-3 relative, identically with no attention)."""
    torch.manual_seed(0)
    x, y = torch.randn(8, 3, 32, 32), torch.randint(0, 9, (8,))
    for dtype in (torch.float32, torch.float64):
        losses, grads = [], []
        for cl in (False, True):
            torch.manual_seed(1)
            m = _module(channels_last=cl, attention=attention).to(dtype).train()
            loss = m._loss(m(x.to(dtype)), y)
            loss.backward()
            losses.append(loss.item())
            grads.append([p.grad for p in m.net.parameters()])
        assert losses[1] == pytest.approx(losses[0], rel=1e-5)
        if dtype == torch.float64:
            for g0, g1 in zip(*grads):
                torch.testing.assert_close(g1, g0, rtol=1e-9, atol=1e-12)
