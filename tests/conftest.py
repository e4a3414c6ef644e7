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
# a timm ResNet; inductor compilation of every block; forward and backward of every ImageNet
# model at 224x224) take well over an hour on 2 CPU cores. The default run keeps a
# representative case of each (below) and marks the rest `heavy`, which pyproject's addopts
# deselect; `pytest -m heavy` runs them (before a release, or on a bigger machine).
# A case is representative when one of its parameter values is in the matrix's set (None: the
# shared REPRESENTATIVE set). In a matrix listed in SLOW_CASES_ONLY only the cases marked
# `slow` can become heavy: the cheap ones all stay.
HEAVY_MATRICES: dict[str, frozenset[str] | None] = {
    "test_every_named_model_exports_and_matches_in_onnxruntime": None,
    "test_named_model_compiles_with_torchscript_and_matches_eager": None,
    "test_named_model_traces_and_feature_extraction_works": None,
    "test_identity_insertion_at_every_position_keeps_the_logits": None,
    "test_torch_compile_inductor_fullgraph_every_block": None,
    # every model also runs forward and backward at an odd size (65x65 or 31x31) in the default
    # run, and its default_input_size is checked there; at 224x224 (2-7 s each) the default run
    # keeps a channel-attention ResNet-50, a conv-replacing one, a Residual Attention Network
    # and GE-theta-plus, whose gather weights fit 224x224 only (it runs at no other size)
    "test_forward_backward_at_default_input_size": frozenset(
        {"se_resnet50", "botnet50", "attention56", "ge_resnet50"}
    ),
}
SLOW_CASES_ONLY = {"test_forward_backward_at_default_input_size"}
REPRESENTATIVE = frozenset(
    {
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
)


def pytest_configure(config: pytest.Config) -> None:
    # pytest-xdist registers this marker itself; registered here too so that a run without
    # xdist (`-p no:xdist`) still passes --strict-markers
    config.addinivalue_line(
        "markers", "xdist_group(name): run these tests in one pytest-xdist worker"
    )


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        if item.originalname not in HEAVY_MATRICES:
            continue
        if item.originalname in SLOW_CASES_ONLY and item.get_closest_marker("slow") is None:
            continue
        keep = HEAVY_MATRICES[item.originalname] or REPRESENTATIVE
        params = getattr(getattr(item, "callspec", None), "params", {})
        if not keep & {str(v) for v in params.values()}:
            item.add_marker(pytest.mark.heavy)
    # A -m on the command line replaces addopts' -m 'not heavy', so `pytest -m "not slow"` alone
    # would select the heavy cases that are not slow: without `heavy` in the expression they
    # stay deselected (`pytest -m heavy` or `-m "heavy or not heavy"` runs them).
    if "heavy" not in (config.getoption("markexpr") or ""):
        heavy = [item for item in items if item.get_closest_marker("heavy")]
        if heavy:
            config.hook.pytest_deselected(items=heavy)
            items[:] = [item for item in items if not item.get_closest_marker("heavy")]
