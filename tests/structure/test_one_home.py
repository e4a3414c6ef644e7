"""Concepts with one home: the slot order of a residual unit, the excitation MLP of the SE
family, and the device and mode of a network."""

from __future__ import annotations

import pytest
import torch
import torch.nn as nn
from timm.models import resnet as timm_resnet

import visattn
from visattn._nets import device_of, eval_mode, factory_of
from visattn.blocks._units import PreActBottleneck as PreActUnit
from visattn.blocks._units import ResidualSlots
from visattn.blocks._utils import Excitation
from visattn.constants import BLOCK_POSITIONS
from visattn.models.inject import TimmBasicBlock, TimmBottleneck
from visattn.models.resnet import BasicBlock, Bottleneck, PreActBottleneck

UNITS = [BasicBlock, Bottleneck, PreActBottleneck, PreActUnit, TimmBasicBlock, TimmBottleneck]


@pytest.mark.parametrize("cls", UNITS, ids=lambda c: f"{c.__module__}.{c.__name__}")
def test_every_residual_unit_uses_the_one_forward(cls: type[nn.Module]) -> None:
    assert issubclass(cls, ResidualSlots)
    assert cls.forward is ResidualSlots.forward, f"{cls.__name__} writes its own forward"


def _units() -> list[tuple[str, nn.Module]]:
    tv = visattn.create_model("resnet18", num_classes=3)
    out = [("basic", tv.layer1[0]), ("bottleneck", visattn.create_model("resnet50").layer1[0])]
    out.append(("preact", PreActUnit(16, 4)))
    out.append(("timm_basic", TimmBasicBlock.adopt(timm_resnet.BasicBlock(8, 8))))
    out.append(("timm_bottleneck", TimmBottleneck.adopt(timm_resnet.Bottleneck(32, 8))))
    return out


@pytest.mark.parametrize("kind", ["basic", "bottleneck", "preact", "timm_basic", "timm_bottleneck"])
def test_slots_are_reached_in_the_documented_order(kind: str) -> None:
    unit = dict(_units())[kind].eval()
    seen: list[str] = []
    for position in BLOCK_POSITIONS:
        getattr(unit, f"attn_{position}").register_forward_hook(
            lambda *_, p=position: seen.append(p)
        )
    channels = unit.conv1.in_channels
    with torch.no_grad():
        unit(torch.randn(1, channels, 8, 8))
    order = list(BLOCK_POSITIONS)
    if kind in ("basic", "timm_basic"):  # the last 3x3 is the second conv: inner comes first
        i, j = order.index("prenorm"), order.index("inner")
        order[i], order[j] = order[j], order[i]
    # the shortcut's slot runs after the branch; both run before the sum's slots
    assert seen == order


@pytest.mark.parametrize("name", ["se", "scse", "cbam", "gam"])
def test_the_excitation_keeps_each_blocks_keys_and_parameter_order(name: str) -> None:
    blk = visattn.create_block(name, 32)
    owner = blk.channel if name == "cbam" else blk
    assert isinstance(owner, Excitation)
    keys = list(owner.state_dict())
    assert keys[:4] == ["fc1.weight", "fc1.bias", "fc2.weight", "fc2.bias"], keys
    assert [n for n, _ in owner.named_parameters()][:4] == keys[:4]


@pytest.mark.parametrize("name", ["se", "scse", "cbam", "gam"])
def test_the_excitation_identity_form_gives_the_input(name: str) -> None:
    blk = visattn.create_block(name, 32, init="identity")
    x = torch.randn(2, 32, 8, 8)
    for mode in (True, False):
        blk.train(mode)
        torch.testing.assert_close(blk(x), x, rtol=0, atol=0)


def test_eval_mode_restores_each_modules_own_mode() -> None:
    net = nn.Sequential(nn.Conv2d(3, 4, 3), nn.BatchNorm2d(4), nn.ReLU())
    net.train()
    net[1].eval()  # a frozen norm inside a network that trains
    with eval_mode(net):
        assert not any(m.training for m in net.modules())
    assert net.training and net[0].training and not net[1].training
    with pytest.raises(RuntimeError), eval_mode(net):
        raise RuntimeError("inside")
    assert net.training and not net[1].training


def test_device_and_factory_of_parameters_buffers_and_nothing() -> None:
    conv = nn.Conv2d(1, 1, 1).to(torch.float64)
    assert factory_of(conv) == {"device": torch.device("cpu"), "dtype": torch.float64}
    bn_only = nn.Module()
    bn_only.register_buffer("count", torch.zeros(2, dtype=torch.long))
    assert factory_of(bn_only) == {"device": torch.device("cpu"), "dtype": torch.float32}
    assert factory_of(nn.ReLU()) == {} and device_of(nn.ReLU()) == torch.device("cpu")
