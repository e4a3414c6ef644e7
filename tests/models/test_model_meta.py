"""``ModelSpec.meta``: every named model's provenance as data (paper, the official code it
follows, where it differs, the parameter count its paper prints), checked against the built
models, and refused when malformed."""

from __future__ import annotations

import re

import pytest

import visattn
from visattn.models import ModelSpec, get_model_spec
from visattn.models.builders import resnet_cifar
from visattn.models.registry import META_KEYS, registered_models
from visattn.profile import count_params

PUBLISHED = [n for n in registered_models() if "published_params" in get_model_spec(n).meta]


def _printed(figure: str) -> tuple[float, float]:
    """``"28.09M"`` -> (28.09e6, 0.01e6): the value and one unit of its last printed digit."""
    m = re.fullmatch(r"(\d+)(?:\.(\d+))?M", figure)
    assert m, f"published_params must be printed millions like '28.09M', got {figure!r}"
    decimals = len(m.group(2) or "")
    return float(figure[:-1]) * 1e6, 10.0 ** (6 - decimals)


@pytest.mark.parametrize("name", registered_models())
def test_every_named_model_cites_its_paper(name: str) -> None:
    meta = get_model_spec(name).meta
    assert set(meta) <= set(META_KEYS)
    assert re.match(r"[A-Z][\w-]+( et al\.)?, [A-Za-z ]+ (19|20)\d\d$", meta["paper"]), meta
    assert get_model_spec(name).paper == meta["paper"]


def test_published_figures_cover_the_papers_that_print_one() -> None:
    assert {"se_resnet50", "cbam_resnet50", "bam_resnet50", "srm_resnet50"} <= set(PUBLISHED)
    assert "gct_resnet50" not in PUBLISHED  # its meta gives the official model's exact count


@pytest.mark.parametrize("name", PUBLISHED)
def test_parameter_count_is_the_published_one_to_its_last_printed_digit(name: str) -> None:
    """Within one unit of the last digit the paper prints (rounded or truncated)."""
    value, unit = _printed(get_model_spec(name).meta["published_params"])
    n = count_params(visattn.create_model(name))
    assert abs(n - value) < unit, f"{name}: {n:,} vs printed {value:,.0f}"


def test_composed_models_cite_the_block_and_the_backbone() -> None:
    assert get_model_spec("cbam_resnet18").meta == {"paper": "Woo et al., ECCV 2018 on resnet18"}


def test_malformed_meta_is_refused() -> None:
    kw = {"name": "x", "builder": resnet_cifar, "placeable": True, "dataset": "cifar"}
    with pytest.raises(ValueError, match=r"unknown meta key 'papr'.*'paper'"):
        ModelSpec(**kw, meta={"papr": "Me, 2027"})
    with pytest.raises(TypeError, match=r"meta\['official_params'\] must be int"):
        ModelSpec(**kw, meta={"official_params": "25.6M"})
    with pytest.raises(TypeError, match=r"meta\['paper'\] must be str"):
        ModelSpec(**kw, meta={"paper": 2027})
