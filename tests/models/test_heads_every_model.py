"""timm's head conventions on every named model: ``create_model(name, num_classes=0,
global_pool="")`` and ``reset_classifier(0, "")`` leave the feature map unpooled (the output is
``forward_features``), and every pooling type timm names gives ``num_features`` (twice for
``catavgmax``) pooled features. Representative models run by default, the rest in ``heavy``."""

from __future__ import annotations

import pytest
import torch
from helpers.tiers import REPRESENTATIVE_MODELS, tiered

import visattn

#: ge_resnet50's gather blocks are built for its 224x224 maps (feat_size)
FULL_SIZE = {"ge_resnet50"}
#: an untrained lambda ResNet-56 overflows in eval mode by layer1 (activations 1e8 at its third
#: block, NaN later) unless each block's last BN starts at zero, as lambda_resnet50 does
OPTIONS = {"lambda_resnet56_cifar": {"zero_init_residual": True}}


def _input(name: str, model: torch.nn.Module) -> torch.Tensor:
    c, h, _ = model.default_input_size
    small = 32 if h <= 32 else 64  # ImageNet models at 64x64: every stage still has a map
    small = h if name in FULL_SIZE else small
    return torch.randn(2, c, small, small, generator=torch.Generator().manual_seed(0))


@pytest.mark.parametrize("name", tiered(visattn.list_models(), keep=REPRESENTATIVE_MODELS))
def test_no_classifier_and_no_pool_gives_the_feature_map(name: str) -> None:
    options = OPTIONS.get(name, {})
    model = visattn.create_model(name, num_classes=0, global_pool="", **options).eval()
    assert (model.num_classes, model.global_pool) == (0, "")
    x = _input(name, model)
    with torch.no_grad():
        out = model(x)
        torch.testing.assert_close(out, model.forward_features(x))
    assert out.dim() == 4 and out.shape[1] == model.num_features

    assert torch.isfinite(out).all()
    other = visattn.create_model(name, **options).eval()
    other.reset_classifier(0, "")
    with torch.no_grad():
        assert other(x).shape == out.shape
    other.reset_classifier(0, "catavgmax")
    with torch.no_grad():
        assert other(x).shape == (2, 2 * model.num_features)
