"""capture_attention as users write it: maps read after the context, nested and overlapping
captures, and no hooks or references left behind."""

from __future__ import annotations

import gc
import weakref

import pytest
import torch

import visattn
from visattn.blocks import capture as capture_module


def _model() -> torch.nn.Module:
    return visattn.create_model("resnet20_cifar", num_classes=10, attention={"name": "se"}).eval()


def _n_blocks(model: torch.nn.Module) -> int:
    return sum(1 for m in model.modules() if capture_module.is_block(m))


def test_maps_survive_the_context_exit() -> None:
    model = _model()
    with visattn.capture_attention(model) as maps:
        model(torch.randn(2, 3, 32, 32))
    assert len(maps) == _n_blocks(model) == 9
    assert all(m.shape[0] == 2 for m in maps.values())


def test_hooks_are_removed_on_exit_and_later_forwards_record_nothing() -> None:
    model = _model()
    with visattn.capture_attention(model) as maps:
        pass
    model(torch.randn(1, 3, 32, 32))
    assert maps == {}
    assert not any(capture_module.is_capturing(m) for m in model.modules())


def test_nothing_keeps_the_maps_once_the_caller_drops_them() -> None:
    model = _model()
    with visattn.capture_attention(model) as maps:
        model(torch.randn(1, 3, 32, 32))
    ref = weakref.ref(next(iter(maps.values())))
    del maps
    gc.collect()
    assert ref() is None


def test_nested_capture_leaves_the_outer_one_complete() -> None:
    model = _model()
    x = torch.randn(1, 3, 32, 32)
    with visattn.capture_attention(model) as outer:
        with visattn.capture_attention(model.layer2) as inner:
            model(x)
        assert len(inner) == 3 and all(not k.startswith("layer") for k in inner)
        outer.clear()
        model(x)  # after the inner context exited, the outer still sees all 9 blocks
        assert len(outer) == 9
    assert len(inner) == 3


def test_overlapping_captures_each_see_their_subtree() -> None:
    model = _model()
    x = torch.randn(1, 3, 32, 32)
    a = visattn.capture_attention(model)
    b = visattn.capture_attention(model.layer3)
    maps_a = a.__enter__()
    maps_b = b.__enter__()
    a.__exit__(None, None, None)  # exits out of order
    model(x)
    b.__exit__(None, None, None)
    assert maps_a == {} and len(maps_b) == 3
    torch.testing.assert_close(maps_b["0.attn_standard"], maps_b["0.attn_standard"])


def test_capture_on_a_model_without_blocks_is_an_error() -> None:
    with (
        pytest.raises(ValueError, match="no registered attention block"),
        visattn.capture_attention(torch.nn.Conv2d(3, 3, 1)),
    ):
        pass
