"""Parameters and multiply-accumulates of the named models, as a table shipped with the package.

Counting them means building every model and running it once under the flop counter: about a
minute for the 95 named models on 2 CPU cores. ``python -m visattn models`` reads the counts
from ``costs.json`` instead, and measures only what the file lacks (a model registered by a
user's own code). The file is data, written by ``python -m visattn.models.costs`` after a model
changes; the tests count every entry again, so a stale figure fails them.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterable
from dataclasses import asdict, dataclass
from functools import cache
from pathlib import Path

import torch

from ..files import atomic_write_text
from ..profile import count_macs, count_params
from .factory import create_model
from .registry import get_model_spec, list_models

__all__ = ["COSTS_FILE", "ModelCost", "measure_cost", "model_costs", "write_costs"]

#: the shipped table: one entry per named model
COSTS_FILE = Path(__file__).with_name("costs.json")


@dataclass(frozen=True)
class ModelCost:
    """What one image costs a named model, built with its paper's number of classes.

    Attributes:
        params: number of parameters.
        macs: multiply-accumulates of one image at ``input_size``, in eval mode.
        input_size: ``(C, H, W)``, the model's default input size.
        num_classes: the classes it was built with (its paper's).
    """

    params: int
    macs: int
    input_size: tuple[int, int, int]
    num_classes: int


def measure_cost(name: str) -> ModelCost:
    """Build the named model with its paper's classes and count its parameters and MACs."""
    num_classes = get_model_spec(name).num_classes
    model = create_model(name, num_classes=num_classes)
    size = tuple(model.default_input_size)
    with torch.no_grad():
        macs = count_macs(model, (1, *size))
    return ModelCost(count_params(model), int(macs), size, num_classes)


@cache
def _shipped() -> dict[str, ModelCost]:
    if not COSTS_FILE.is_file():
        return {}
    table = json.loads(COSTS_FILE.read_text())
    return {
        name: ModelCost(e["params"], e["macs"], tuple(e["input_size"]), e["num_classes"])
        for name, e in table.items()
    }


def model_costs(names: Iterable[str]) -> dict[str, ModelCost]:
    """The costs of ``names``: from the shipped table, measured for a model it lacks or for one
    whose paper's class count differs from the entry's."""
    shipped = _shipped()
    out = {}
    for name in names:
        entry = shipped.get(name)
        fresh = entry is not None and entry.num_classes == get_model_spec(name).num_classes
        out[name] = entry if fresh else measure_cost(name)
    return out


def write_costs(
    path: Path = COSTS_FILE, names: Iterable[str] | None = None
) -> dict[str, ModelCost]:
    """Measure ``names`` (default: every named model) and write the table atomically."""
    names = list(list_models() if names is None else names)
    table = {}
    for i, name in enumerate(names, 1):
        print(f"[{i}/{len(names)}] {name}", file=sys.stderr, flush=True)
        table[name] = measure_cost(name)
    atomic_write_text(path, json.dumps({n: asdict(c) for n, c in table.items()}, indent=1) + "\n")
    _shipped.cache_clear()
    return table


if __name__ == "__main__":
    write_costs()
