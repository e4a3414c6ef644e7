"""Shared pytest fixtures."""

from __future__ import annotations

import pytest
import torch


@pytest.fixture(autouse=True)
def _seed() -> None:
    """Every test starts from the same random state, so failures reproduce."""
    torch.manual_seed(0)


@pytest.fixture(autouse=True)
def _one_torch_thread():
    """One intra-op thread: on 2 CPU cores shared with other jobs, OpenMP threads spinning against
    other processes make small forward passes many times slower. Results do not depend on it."""
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


# The full model- and registry-wide matrices of the slowest checks (every named model through
# the ONNX exporter, TorchScript and fx; identity insertion of every block at every position of
# a timm ResNet; inductor compilation of every block) take well over an hour on 2 CPU cores.
# The default run keeps a representative case of each (below) and marks the rest `heavy`, which
# pyproject's addopts deselect; `pytest -m heavy` runs them (before a release, or on a bigger
# machine).
HEAVY_MATRICES = {
    "test_every_named_model_exports_and_matches_in_onnxruntime",
    "test_named_model_compiles_with_torchscript_and_matches_eager",
    "test_named_model_traces_and_feature_extraction_works",
    "test_identity_insertion_at_every_position_keeps_the_logits",
    "test_torch_compile_inductor_fullgraph_every_block",
}
REPRESENTATIVE = {
    # models: a plain, a channel-, a hybrid-attention CIFAR ResNet, a Residual Attention
    # Network, an ImageNet ResNet with attention and one with a conv-replacing block
    "resnet20_cifar",
    "se_resnet56_cifar",
    "cbam_resnet56_cifar",
    "attention56_cifar",
    "se_resnet50",
    "botnet50",
    # blocks: a channel gate, a hybrid, a stage block, a pairwise block, a conv-replacing one
    "se",
    "cbam",
    "bam",
    "nonlocal",
    "sk",
}


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        if item.originalname not in HEAVY_MATRICES:
            continue
        params = getattr(getattr(item, "callspec", None), "params", {})
        if not REPRESENTATIVE & {str(v) for v in params.values()}:
            item.add_marker(pytest.mark.heavy)
