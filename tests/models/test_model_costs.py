"""The shipped table of the named models' parameters and MACs (``visattn/models/costs.json``),
which ``python -m visattn models`` prints without building a model: every named model has an
entry, every entry is what counting the model gives now (the ImageNet models beyond the
representatives in the heavy tier), and a model the table lacks is measured."""

from __future__ import annotations

import json

import pytest
from helpers.models import eca_resnet20_spec
from helpers.tiers import REPRESENTATIVE_MODELS, kept_model, tiered

import visattn
from visattn.__main__ import models_table
from visattn.models import costs
from visattn.models.registry import get_model_spec, registered_model


def _table() -> dict:
    return json.loads(costs.COSTS_FILE.read_text())


def test_every_named_model_has_an_entry_and_nothing_else() -> None:
    assert sorted(_table()) == sorted(visattn.list_models())


def _entry(name: str) -> costs.ModelCost:
    e = _table()[name]
    return costs.ModelCost(e["params"], e["macs"], tuple(e["input_size"]), e["num_classes"])


@pytest.mark.parametrize("name", tiered(visattn.list_models(), keep=kept_model))
def test_entry_has_the_built_models_parameters(name: str) -> None:
    """A model changed without rewriting the table (``python -m visattn.models.costs``)
    fails here: parameters, input size and classes (a build, no forward)."""
    classes = get_model_spec(name).num_classes
    model = visattn.create_model(name, num_classes=classes)
    entry = _entry(name)
    assert (entry.params, entry.input_size, entry.num_classes) == (
        sum(p.numel() for p in model.parameters()),
        tuple(model.default_input_size),
        classes,
    )


@pytest.mark.parametrize("name", tiered(visattn.list_models(), keep=REPRESENTATIVE_MODELS))
def test_entry_is_what_counting_the_model_gives(name: str) -> None:
    """The MACs too (a counted forward): the representatives by default, every model heavy."""
    assert _entry(name) == costs.measure_cost(name)


def test_listing_builds_no_named_model(monkeypatch) -> None:
    def refuse(name: str) -> None:
        raise AssertionError(f"{name} was built for the listing")

    monkeypatch.setattr(costs, "measure_cost", refuse)
    text = models_table()
    se = costs.model_costs(["se_resnet50"])["se_resnet50"]
    assert "| se_resnet50 " in text and f"{se.params / 1e6:.3f}M" in text
    assert len(text.splitlines()) == 2 + len(visattn.list_models())


def test_a_model_outside_the_table_is_measured() -> None:
    spec = eca_resnet20_spec("costs_test_eca_resnet20_cifar")
    with registered_model(spec):
        got = costs.model_costs([spec.name])[spec.name]
        model = visattn.create_model(spec.name)
        assert got.params == sum(p.numel() for p in model.parameters())
        assert got.params > costs.model_costs(["resnet20_cifar"])["resnet20_cifar"].params
        assert got.input_size == (3, 32, 32) and got.num_classes == 10
