"""A model of the test's own, registered for one test: ResNet-20 for CIFAR with ECA in every
block, under a name no shipped model has."""

from __future__ import annotations

from visattn.models.registry import ModelSpec, get_model_spec


def eca_resnet20_spec(name: str) -> ModelSpec:
    """A ``ModelSpec`` named ``name``: ``resnet20_cifar``'s builder with ECA placed, for
    ``registered_model``."""
    base = get_model_spec("resnet20_cifar")
    return ModelSpec(
        name=name,
        builder=base.builder,
        placeable=True,
        dataset="cifar",
        fixed=base.fixed,
        attention=({"name": "eca"},),
        meta={"paper": "Test, 2026"},
    )
