"""The suite's two tiers beyond the default run, each assigned one way:

* ``slow`` (left out of the quick pass ``-m "not slow"``, kept in the default run) is measured:
  the tests listed in ``tests/slow_tests.txt``, over the one threshold its first line states,
  written from a timed run by ``tests/helpers/slow_list.py``. No test is marked slow by hand.
* ``heavy`` (left out of the default run; ``pytest -m heavy`` runs it, before a release or on a
  bigger machine) is chosen: the registry-wide matrices of the slowest checks (every named model
  through the ONNX exporter, TorchScript and fx; identity insertion of every block at every
  position of a ResNet; forward and backward of every ImageNet model at 224x224) take well over
  an hour on 2 CPU cores, so the default run keeps representative cases and :func:`tiered`
  marks the rest ``heavy``; a single case outside such a matrix (another exporter of the same
  check, a second Ray sweep) takes ``pytest.mark.heavy`` with a comment naming what the default
  run keeps instead.

``tests/conftest.py`` applies both, in one hook.
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


def tiered(values: Iterable[Any], *, keep: Cases | None = None) -> list[Any]:
    """The cases of a matrix over ``values`` for ``pytest.mark.parametrize``: those ``keep``
    matches in the default run, every other one marked ``heavy`` (None keeps all).

    ``keep`` is a predicate on a value or a collection of values; a tuple value is one case of
    several arguments (``parametrize(("a", "b"), ...)``), which a collection matches when it
    holds any of its items. Case ids are pytest's own. (Which cases are ``slow`` is measured,
    not chosen: ``tests/slow_tests.txt``.)
    """
    out = []
    for value in values:
        marks = [pytest.mark.heavy] if keep is not None and not _matches(keep, value) else []
        args = value if isinstance(value, tuple) else (value,)
        out.append(pytest.param(*args, marks=marks))
    return out
