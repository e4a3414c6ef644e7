"""Every model that visattn lists is a timm model from ``import visattn`` on, and only those:
the timm bridge follows the model registry (which itself knows nothing of timm). The first two
checks run in a fresh interpreter, since in this one other tests have already imported and
listed everything."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
import timm
import torch
import torch.nn as nn
from helpers.models import eca_resnet20_spec
from helpers.paths import REPO

import visattn
from visattn.blocks.registry import registered_block
from visattn.models.registry import registered_model, subscribe


@pytest.fixture(scope="session")  # once per worker, even when other modules' tests interleave
def fresh() -> list[str]:
    """What a fresh interpreter prints after ``import visattn, timm``: how many models timm and
    visattn list and whether the names agree; then the feature shapes of
    ``timm.create_model("visattn_cbam_resnet56_cifar", features_only=True)``."""
    code = (
        "import torch, timm, visattn\n"
        "t = sorted(n[len('visattn_'):] for n in timm.list_models('visattn_*'))\n"
        "print(len(t), len(visattn.list_models()), t == visattn.list_models())\n"
        "m = timm.create_model('visattn_cbam_resnet56_cifar', features_only=True)\n"
        "print([tuple(f.shape) for f in m(torch.randn(2, 3, 32, 32))])\n"
    )
    path = os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])
    done = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": path},
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout.splitlines()


@pytest.mark.xdist_group("fresh_interpreter")  # one worker: the fixture's interpreter runs once
def test_timm_lists_every_visattn_model_right_after_import(fresh: list[str]) -> None:
    n_timm, n_visattn, same = fresh[0].split()
    assert n_timm == n_visattn and same == "True", fresh[0]
    assert int(n_timm) > 60  # the zoo and one <block>_resnet56_cifar per block


@pytest.mark.xdist_group("fresh_interpreter")
def test_timm_features_only_works_in_a_fresh_interpreter(fresh: list[str]) -> None:
    # stem and the three stages of a CIFAR ResNet-56, at strides 1, 1, 2, 4
    assert fresh[1] == "[(2, 16, 32, 32), (2, 16, 32, 32), (2, 32, 16, 16), (2, 64, 8, 8)]"


def test_list_models_has_no_side_effect_on_timm() -> None:
    before = timm.list_models("visattn_*")
    visattn.list_models()
    visattn.list_models("*cifar*")
    assert timm.list_models("visattn_*") == before


class _Gate(nn.Module):
    def __init__(self, channels: int) -> None:
        super().__init__()
        self.w = nn.Parameter(torch.full((channels, 1, 1), 0.5))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * self.w


def test_a_block_registered_later_is_listed_in_timm_until_it_is_removed() -> None:
    name = "timm_bridge_test_gate_resnet56_cifar"
    with registered_block("timm_bridge_test_gate", _Gate, family="channel", paper="Test, 2026"):
        assert name in visattn.list_models()
        assert timm.is_model(f"visattn_{name}")
        m = timm.create_model(f"visattn_{name}", num_classes=3)
        assert m.attention_paths[0] == "layer1.0.attn_standard"
        assert m(torch.randn(1, 3, 32, 32)).shape == (1, 3)
    assert name not in visattn.list_models()
    assert not timm.is_model(f"visattn_{name}")
    assert f"visattn_{name}" not in timm.list_models("visattn_*")
    with pytest.raises(RuntimeError, match="Unknown model"):
        timm.create_model(f"visattn_{name}")


def test_a_scoped_model_is_registered_in_visattn_and_timm_then_removed() -> None:
    spec = eca_resnet20_spec("scoped_test_resnet20_cifar")
    seen: list[tuple[list[str], list[str]]] = []
    unsubscribe = subscribe(lambda added, removed: seen.append((list(added), list(removed))))
    try:
        assert seen[0][0] == visattn.list_models()  # told of what is listed when subscribing
        with registered_model(spec):
            assert "scoped_test_resnet20_cifar" in visattn.list_models()
            m = timm.create_model("visattn_scoped_test_resnet20_cifar")
            assert len(m.attention_paths) == 9
        assert "scoped_test_resnet20_cifar" not in visattn.list_models()
        assert not timm.is_model("visattn_scoped_test_resnet20_cifar")
        assert seen[1:] == [
            (["scoped_test_resnet20_cifar"], []),
            ([], ["scoped_test_resnet20_cifar"]),
        ]
    finally:
        unsubscribe()
    with registered_model(spec):
        pass
    assert len(seen) == 3  # unsubscribed: told nothing more
