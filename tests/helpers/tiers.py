"""Tiers of a parametrised matrix: the default run, ``slow`` and ``heavy``.

The registry-wide matrices of the slowest checks (every named model through the ONNX exporter,
TorchScript and fx; identity insertion of every block at every position of a ResNet; forward and
backward of every ImageNet model at 224x224) take well over an hour on 2 CPU cores. The default
run keeps a representative case of each and :func:`tiered` marks the rest ``heavy``, which
pyproject's addopts deselect; ``pytest -m heavy`` runs them (before a release, or on a bigger
machine). ``slow`` marks the cases over ~20 s on 2 cores, deselected with ``-m "not slow"``
(which also leaves out the tests measured over ~1 s, listed in tests/slow_tests.txt).
A test outside a matrix takes a plain ``@pytest.mark.slow`` or ``@pytest.mark.heavy``.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable
from typing import Any

import pytest

#: models kept in the default run of a model-wide heavy matrix: a plain, a channel-, a
#: hybrid-attention CIFAR ResNet, a Residual Attention Network, an ImageNet ResNet with attention
#: and one with a conv-replacing block
REPRESENTATIVE_MODELS = frozenset(
    {
        "resnet20_cifar",
        "se_resnet56_cifar",
        "cbam_resnet56_cifar",
        "attention56_cifar",
        "se_resnet50",
        "botnet50",
    }
)
#: blocks kept in the default run of a block-wide heavy matrix: a channel gate, a hybrid, a stage
#: block, a pairwise block, a conv-replacing one
REPRESENTATIVE_BLOCKS = frozenset({"se", "cbam", "bam", "nonlocal", "sk"})


def kept_model(name: str) -> bool:
    """The default run's cases of a model-wide matrix whose cost is building the model: every
    CIFAR model (small) and the ImageNet representatives above. Building the other ImageNet
    ResNets (25-60M parameters each) is most of such a matrix's time on 2 cores; they differ
    from the representatives in depth, block or attention, each of which a CIFAR model or a
    block-wide test covers, so they run in the heavy tier."""
    from visattn.models import get_model_spec

    return get_model_spec(name).dataset == "cifar" or name in REPRESENTATIVE_MODELS


Cases = Collection[Any] | Callable[[Any], bool]


def _matches(cases: Cases, value: Any) -> bool:
    if callable(cases):
        return bool(cases(value))
    values = value if isinstance(value, tuple) else (value,)
    return any(v in cases for v in values)


def tiered(values: Iterable[Any], *, keep: Cases | None = None, slow: Cases = ()) -> list[Any]:
    """The cases of a matrix over ``values`` for ``pytest.mark.parametrize``, each in its tier.

    ``keep``: the cases of the default run; every other case is marked ``heavy``. None keeps all.
    ``slow``: the cases (kept or heavy) that are also marked ``slow``.
    Both are a predicate on a value or a collection of values; a tuple value is one case of
    several arguments (``parametrize(("a", "b"), ...)``), which a collection matches when it
    holds any of its items. Case ids are pytest's own.
    """
    out = []
    for value in values:
        marks = []
        if keep is not None and not _matches(keep, value):
            marks.append(pytest.mark.heavy)
        if _matches(slow, value):
            marks.append(pytest.mark.slow)
        args = value if isinstance(value, tuple) else (value,)
        out.append(pytest.param(*args, marks=marks))
    return out
