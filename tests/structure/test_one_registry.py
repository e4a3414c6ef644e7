"""One registry type serves blocks, models, data sources and released weights, and every
"unknown name" error is worded by it: ``difflib`` is imported in one module."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from visattn._registry import Registry, did_you_mean, unknown_options
from visattn.blocks import registry as blocks
from visattn.data import sources
from visattn.models import pretrained
from visattn.models import registry as models

PACKAGE = Path(__file__).resolve().parents[2] / "visattn"


def test_blocks_models_data_sources_and_weights_are_registries() -> None:
    held = [blocks._REGISTRY, models._MODELS, sources._SOURCES, pretrained._TAGS]
    assert all(isinstance(r, Registry) for r in [*held, pretrained._CONVERTERS])
    assert [r.kind for r in held] == ["block", "model", "dataset", "pretrained tag"]


def test_difflib_is_imported_in_one_module() -> None:
    users = sorted(
        str(p.relative_to(PACKAGE))
        for p in PACKAGE.rglob("*.py")
        if re.search(r"^\s*(import difflib|from difflib import)", p.read_text(), flags=re.M)
    )
    assert users == ["_registry.py"]


def test_registration_stores_the_entry_and_changes_nothing_else() -> None:
    reg: Registry[type] = Registry("widget")

    class Widget:
        def __init__(self, n: int) -> None:
            self.n = n

    before = dict(vars(Widget))
    assert reg.register("widget")(Widget) is Widget
    assert dict(vars(Widget)) == before  # no attribute added, no method rewritten
    assert reg["widget"] is Widget and list(reg) == ["widget"] and len(reg) == 1
    with pytest.raises(ValueError, match="widget 'widget' is already registered"):
        reg.add("widget", int)


def test_lookup_resolves_aliases_and_names_close_matches_in_one_wording() -> None:
    reg: Registry[int] = Registry("colour", error=LookupError, hint=lambda n: f"{len(n)} letters")
    reg.add("red", 1)
    reg.add("green", 2)
    reg.alias("verde", "green")
    assert reg.lookup("verde") == 2 and "verde" not in reg  # an alias is not a listed name
    with pytest.raises(LookupError) as err:
        reg.lookup("gren")
    assert str(err.value) == "unknown colour 'gren'; did you mean 'green'? (4 letters)"
    with pytest.raises(LookupError, match=r"unknown colour 'blue' \(4 letters\)$"):
        reg.lookup("blue")
    with pytest.raises(LookupError, match="did you mean 'ruby'"):
        reg.lookup("rubi", choices=["ruby"])  # names the caller accepts besides the entries
    with pytest.raises(LookupError, match="unknown colour 'teal'"):
        reg.remove("teal")


def test_listing_filters_by_pattern_and_entry_and_temporarily_cleans_up() -> None:
    reg: Registry[int] = Registry("number")
    for i, name in enumerate(["one", "two", "three", "ten"]):
        reg.add(name, i)
    assert reg.names() == ["one", "ten", "three", "two"]
    assert reg.names("t*", where=lambda v: v > 1) == ["ten", "three"]
    with reg.temporarily("four", 4) as entry:
        assert entry == 4 and "four" in reg
    assert "four" not in reg


def test_the_shared_wording_of_options_and_names() -> None:
    assert unknown_options(["reductio", "zzz"], ["reduction", "act_layer"]) == (
        "'reductio' (did you mean 'reduction'?), 'zzz'"
    )
    assert (
        did_you_mean("sse", ["se", "scse", "sge", "eca"]) == "; did you mean 'scse', 'se', 'sge'?"
    )
    assert did_you_mean("xyz", ["se"]) == ""


def test_a_suggestion_is_named_once() -> None:
    """A model's registry offers its names and the listed names again: each close one once."""
    import visattn

    assert did_you_mean("se", ["sse", "sse", "scse"]) == "; did you mean 'sse', 'scse'?"
    with pytest.raises(KeyError) as err:
        visattn.models.get_model_spec("resnet20_cifarr")
    said = str(err.value).split("did you mean ")[1].split("?")[0].split(", ")
    assert "'resnet20_cifar'" in said and len(said) == len(set(said))


def test_every_registry_error_reads_the_same() -> None:
    import visattn

    for call, kind in (
        (lambda: visattn.create_block("cbma", 8), "block 'cbma'; did you mean 'cbam'"),
        (lambda: visattn.create_model("resnet56cifar"), "model 'resnet56cifar'; did you mean"),
        (lambda: sources.get_source("cifar1"), "dataset 'cifar1'; did you mean 'cifar10'"),
        (lambda: pretrained.get_pretrained("se_resnet50.ra3_in1k"), "pretrained tag"),
    ):
        with pytest.raises((KeyError, ValueError)) as err:
            call()
        assert str(err.value).startswith(f"unknown {kind}"), str(err.value)


def test_every_block_module_is_found_without_a_list() -> None:
    """The blocks package imports each of its public modules (no hand-kept list to extend for a
    new block): each registers at least one block, and the modules it names as shared hold
    none."""
    import pkgutil

    import visattn.blocks as package

    names = {m.name for m in pkgutil.iter_modules(package.__path__) if not m.name.startswith("_")}
    homes = {blocks.block_info(b).impl.__module__.rsplit(".", 1)[1] for b in blocks.list_blocks()}
    assert names >= package._SHARED, package._SHARED - names
    assert names - package._SHARED == homes
    assert not homes & package._SHARED
