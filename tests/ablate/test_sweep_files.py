"""Sweep files as data: ``Sweep`` and ``Variant`` validate themselves when built, and a sweep may
``extends:`` another (keys replaced, variants merged by name)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from helpers.ablate import write_sweep
from helpers.paths import REPO

from visattn.ablate import Sweep, Variant, load_sweep


def _write(path: Path, data: dict) -> Path:
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def test_a_sweep_built_in_python_is_validated_like_a_file(tmp_path: Path) -> None:
    sweep = Sweep("s", tmp_path / "s.yaml", (), [0, 1], {"trainer.max_epochs": 1}, [Variant("a")])
    assert sweep.seeds == (0, 1) and sweep.baseline == "a"
    assert sweep.profile["device"] == "cpu" and sweep.localization["max_images"] == 512
    with pytest.raises(ValueError, match=r"sweep .*s\.yaml: seeds must be between 0 and"):
        Sweep("s", tmp_path / "s.yaml", (), [-1], {}, [Variant("a")])
    with pytest.raises(ValueError, match=r"duplicate variant name\(s\) \['a'\]"):
        Sweep("s", tmp_path / "s.yaml", (), [0], {}, [Variant("a"), Variant("a")])
    with pytest.raises(ValueError, match="match must be"):
        Variant("w", match={"flops": "a"})
    assert Variant("w", match={"params": "a"}).match == ("params", "a")


def test_extends_inherits_replaces_keys_and_merges_variants_by_name(tmp_path: Path) -> None:
    base = tmp_path / "base.yaml"
    base.write_text("trainer:\n  max_epochs: 1\n")
    _write(
        tmp_path / "parent.yaml",
        {
            "name": "p",
            "base": ["base.yaml"],
            "seeds": [0, 1],
            "set": {"trainer.max_epochs": 2, "data.num_train": 64},
            "localization": {"max_images": 8},
            "variants": [
                {"name": "none", "set": {"model.attention": None}},
                {"name": "se", "set": {"model.attention": {"name": "se"}}},
            ],
        },
    )
    (tmp_path / "sub").mkdir()
    child = _write(
        tmp_path / "sub" / "child.yaml",
        {
            "extends": "../parent.yaml",
            "name": "c",
            "set": {"trainer.max_epochs": 5},
            "variants": [
                {
                    "name": "se",
                    "set": {"model.attention": {"name": "se", "args": {"reduction": 8}}},
                },
                {"name": "eca", "set": {"model.attention": {"name": "eca"}}},
            ],
        },
    )
    sweep = load_sweep(child)
    assert sweep.name == "c" and sweep.seeds == (0, 1)
    assert sweep.base == (base.resolve(),)  # resolved against the parent, which wrote it
    assert sweep.overrides == {"trainer.max_epochs": 5}  # a key given replaces the parent's
    assert sweep.localization["max_images"] == 8
    assert [v.name for v in sweep.variants] == ["none", "se", "eca"]
    assert sweep.variants[1].overrides["model.attention"]["args"] == {"reduction": 8}


def test_extends_errors_name_the_file(tmp_path: Path) -> None:
    a = _write(tmp_path / "a.yaml", {"extends": "b.yaml", "name": "a"})
    _write(tmp_path / "b.yaml", {"extends": "a.yaml", "name": "b"})
    with pytest.raises(ValueError, match=r"extends cycle: .*a\.yaml -> .*b\.yaml -> .*a\.yaml"):
        load_sweep(a)
    c = _write(tmp_path / "c.yaml", {"extends": "missing.yaml", "name": "c"})
    with pytest.raises(FileNotFoundError, match=r"c\.yaml: extends 'missing\.yaml'"):
        load_sweep(c)


@pytest.mark.parametrize(
    "stem",
    ["cbam_design", "equal_budget", "nonlocal_taxonomy", "residual_attention", "se_integration"],
)
def test_full_sweeps_extend_their_quick_form_and_keep_every_quick_variant(
    stem: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(REPO)
    path = REPO / "configs" / "ablations" / f"{stem}_full.yaml"
    assert yaml.safe_load(path.read_text())["extends"] == f"{stem}_quick.yaml"
    quick, full = load_sweep(path.with_name(f"{stem}_quick.yaml")), load_sweep(path)
    assert full.variants[: len(quick.variants)] == quick.variants
    assert full.base != quick.base and full.name == f"{stem}_full"
    assert full.localization == {"max_images": 512, "tolerance": 0.0}  # not the quick subset


def test_order_seed_runs_every_variant_of_a_seed_before_the_next_seed(tmp_path: Path) -> None:
    variants = [{"name": "a"}, {"name": "b"}, {"name": "c"}]
    by_variant = load_sweep(write_sweep(tmp_path, variants, seeds=(3, 1))).runs(tmp_path / "o")
    path = write_sweep(tmp_path, variants, seeds=(3, 1), order="seed")
    by_seed = load_sweep(path).runs(tmp_path / "o")
    keys = ["a/seed3", "b/seed3", "c/seed3", "a/seed1", "b/seed1", "c/seed1"]
    assert [r.key for r in by_seed] == keys
    assert sorted(by_seed, key=str) == sorted(by_variant, key=str)  # same runs
    with pytest.raises(ValueError, match=r"order must be one of \['variant', 'seed'\]"):
        load_sweep(write_sweep(tmp_path, variants, order="random"))


def test_base_and_extends_follow_one_inheritance_rule(tmp_path: Path) -> None:
    """``_base_`` (training configs) and ``extends`` (sweeps) are one resolver,
    :func:`visattn.files.inheritance_chain`: parents first, depth first, the file last, one
    cycle check, paths relative to the file that names them."""
    import visattn.ablate.sweep as sweep_module
    import visattn.training.options as options_module
    from visattn.files import inheritance_chain

    (tmp_path / "sub").mkdir()
    _write(tmp_path / "sub" / "root.yaml", {"a": 1})
    _write(tmp_path / "left.yaml", {"_base_": "sub/root.yaml", "b": 2})
    _write(tmp_path / "right.yaml", {"c": 3})
    top = _write(tmp_path / "top.yaml", {"_base_": ["left.yaml", "right.yaml"], "d": 4})
    chain = inheritance_chain(top, "_base_", lambda p: yaml.safe_load(p.read_text()), what="t")
    assert [p.path.name for p in chain] == ["root.yaml", "left.yaml", "right.yaml", "top.yaml"]
    assert [p.content for p in chain] == [{"a": 1}, {"b": 2}, {"c": 3}, {"d": 4}]
    assert [p.inherits for p in chain] == [False, True, False, True]
    # both spellings go through it, not through code of their own
    for module in (sweep_module, options_module):
        assert module.inheritance_chain is inheritance_chain
    _write(tmp_path / "x.yaml", {"_base_": "y.yaml"})
    _write(tmp_path / "y.yaml", {"_base_": "x.yaml"})
    with pytest.raises(ValueError, match=r"_base_ cycle: .*x\.yaml -> .*y\.yaml -> .*x\.yaml"):
        options_module.expand_config_args(["--config", str(tmp_path / "x.yaml")])
