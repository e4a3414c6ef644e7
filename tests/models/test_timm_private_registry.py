"""timm has no public way to remove a model or to list a hand-downloaded tag as pretrained, so
``visattn.models.timm_bridge`` edits timm's registry dicts (named in docs/layout.md; timm is
pinned below 1.1 for it). This fails, naming what changed, when a timm release moves them."""

from __future__ import annotations

import timm.models._registry as timm_registry

#: the private members timm_bridge reads or edits, and what each must be
MEMBERS = {
    "_model_entrypoints": dict,
    "_model_to_module": dict,
    "_module_to_models": dict,
    "_model_with_tags": dict,
    "_model_pretrained_cfgs": dict,
    "_model_has_pretrained": set,
    "_model_default_cfgs": dict,
}


def test_timms_registry_still_has_the_members_the_bridge_edits() -> None:
    found = {name: type(getattr(timm_registry, name, None)) for name in MEMBERS}
    changed = {name: kind for name, kind in found.items() if not issubclass(kind, MEMBERS[name])}
    assert not changed, (
        f"timm {timm_registry.__name__} no longer has {sorted(changed)} as visattn's "
        "timm_bridge expects (a dict or set each): update visattn/models/timm_bridge.py for "
        "this timm release, then its pin in pyproject.toml"
    )


def test_timms_private_feature_helpers_and_block_module_are_still_there() -> None:
    """``visattn.models.features`` subclasses ``timm.models._features.FeatureGetterNet`` and calls
    its ``feature_take_indices`` (timm exports neither from a public module), and the family
    rules name EfficientNet's blocks by their module, ``timm.models._efficientnet_blocks``."""
    import importlib
    import inspect

    features = importlib.import_module("timm.models._features")
    getter = getattr(features, "FeatureGetterNet", None)
    take = getattr(features, "feature_take_indices", None)
    assert inspect.isclass(getter) and callable(take), (
        "timm.models._features no longer has FeatureGetterNet and feature_take_indices: update "
        "visattn/models/features.py for this timm release, then its pin in pyproject.toml"
    )
    assert take(4, [1, 3]) == ([1, 3], 3), "feature_take_indices changed its result"
    blocks = importlib.import_module("timm.models._efficientnet_blocks")
    assert inspect.isclass(getattr(blocks, "SqueezeExcite", None)), (
        "timm.models._efficientnet_blocks.SqueezeExcite moved: update visattn/models/families.py"
    )
