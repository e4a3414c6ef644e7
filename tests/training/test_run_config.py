"""visattn.training.config: one resolution of a run's options and one canonical form of them."""

from __future__ import annotations

import dataclasses
import json
import pickle
from pathlib import Path

import pytest
import yaml
from helpers.paths import REPO

from visattn.ablate.sweep import overrides_to_args
from visattn.training import config as run_config

OPTIONS = {
    "model.model": "resnet20_cifar",
    "model.attention": {"name": "se", "args": {"reduction": 8}, "stages": [2, 3]},
    "model.lr": 0.05,
    "model.label_smoothing": 0.1,
    "trainer.max_epochs": 7,
    "data.dataset": "shapes",
    "data.batch_size": 32,
}


def _nested(flat: dict) -> dict:
    out: dict = {}
    for key, value in flat.items():
        *parents, last = key.split(".")
        node = out
        for p in parents:
            node = node.setdefault(p, {})
        node[last] = value
    return out


def test_a_yaml_flags_and_a_sweep_set_give_byte_identical_dumps(tmp_path: Path) -> None:
    as_file = tmp_path / "run.yaml"
    as_file.write_text(yaml.safe_dump(_nested(OPTIONS)))
    flags = []
    for key, value in OPTIONS.items():
        flags += [f"--{key}", value if isinstance(value, str) else json.dumps(value)]
    routes = {
        "yaml": ["fit", "--config", str(as_file)],
        "flags": ["fit", *flags],
        "sweep set": ["fit", *overrides_to_args(OPTIONS)],
    }
    dumps = {
        name: run_config.RunConfig.parse(args).canonical_dump() for name, args in routes.items()
    }
    assert len(set(dumps.values())) == 1, dumps
    specs = [run_config.RunConfig.parse(args).spec for args in routes.values()]
    assert specs[0] == specs[1] == specs[2]
    dump = dumps["yaml"]
    assert "model.lr: 0.05\n" in dump and '"args": {"reduction": 8}' in dump
    assert "data.root" not in dump and "config:" not in dump  # locations are not settings
    assert "model.momentum" not in dump  # at its default
    # over a config with other values, later sources win the same way on every route
    quick = ["fit", "--config", str(REPO / "configs/quickstart.yaml"), "--data.root=/elsewhere"]
    stacked = {
        run_config.RunConfig.parse([*quick, *route[1:]]).canonical_dump()
        for route in routes.values()
    }
    assert len(stacked) == 1 and stacked != {dump}


def test_settings_name_a_changed_option_with_the_default_it_left() -> None:
    base = run_config.RunConfig.parse(["fit", *overrides_to_args(OPTIONS)])
    changed = run_config.RunConfig.parse(
        ["fit", *overrides_to_args({**OPTIONS, "model.momentum": 0.8})]
    )
    assert base.describe_changes(changed) == "model.momentum: 0.9 -> 0.8"
    assert run_config.describe_changes(base.settings, changed.settings) == base.describe_changes(
        changed
    )


def test_a_run_spec_is_a_typed_frozen_value_compared_in_its_canonical_form() -> None:
    spec = run_config.RunConfig.parse(["fit", *overrides_to_args(OPTIONS)]).spec
    # another spelling of the same placement and a location: the same spec
    respelt = {
        **OPTIONS,
        "model.attention": [{**OPTIONS["model.attention"], "position": "standard"}],
    }
    moved = run_config.RunConfig.parse(
        ["fit", *overrides_to_args(respelt), "--data.root=/elsewhere", "--data.num_workers=3"]
    ).spec
    assert moved == spec and spec.changes(moved) == ""
    changed = run_config.RunConfig.parse(
        ["fit", *overrides_to_args({**OPTIONS, "model.lr": 0.2, "seed_everything": 4})]
    ).spec
    assert changed != spec
    assert spec.changes(changed) == "model.lr: 0.05 -> 0.2; seed_everything: 0 -> 4"
    assert (spec.seed, changed.seed) == (0, 4)
    assert spec.value("model.lr") == 0.05 and spec.value("model.momentum") == 0.9  # default
    assert spec.attention == [{"name": "se", "args": {"reduction": 8}, "stages": [2, 3]}]
    assert dict(spec.model)["model.lr"] == "0.05" and spec.value("model.model") == "resnet20_cifar"
    assert dict(spec.trainer) == {"trainer.max_epochs": "7"}
    assert run_config.RunSpec.from_json(spec.to_json()) == spec
    with pytest.raises(dataclasses.FrozenInstanceError):
        spec.model = ()  # a value


def test_a_run_config_travels_pickled_and_derives_without_parsing(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    resolved = run_config.RunConfig.parse(
        ["fit", *overrides_to_args(OPTIONS), "--trainer.default_root_dir=r"]
    )
    back = pickle.loads(pickle.dumps(resolved))
    assert tuple(back) == tuple(resolved) and back.config == resolved.config
    assert back.settings == resolved.settings
    with pytest.raises(AttributeError, match="frozen"):
        resolved.namespace = None  # a value: derive another with .but()

    def no_parse(*a, **k):
        raise AssertionError("parsed again")

    monkeypatch.setattr(run_config, "parse", no_parse)
    assert run_config.RunConfig.parse(resolved) is resolved
    test = resolved.but("test", {"trainer.default_root_dir": "r/test", "ckpt_path": "r/last.ckpt"})
    assert test[0] == "test" and test[-2:] == ("--trainer.default_root_dir=r/test",
                                                "--ckpt_path=r/last.ckpt")  # fmt: skip
    assert sum(a.startswith("--trainer.default_root_dir=") for a in test) == 1  # replaced
    assert (
        test.config.trainer.default_root_dir == "r/test" and test.config.ckpt_path == "r/last.ckpt"
    )
    assert resolved.config.trainer.default_root_dir == "r"  # the original is unchanged
    assert test.settings == resolved.settings | {"ckpt_path": '"r/last.ckpt"'}


def test_a_marker_of_the_older_format_is_resolved_for_the_comparison() -> None:
    current = run_config.RunConfig.parse(["fit", *overrides_to_args(OPTIONS)]).settings
    # the older markers recorded the options as set (defaults included, placement as written)
    legacy = {k: json.dumps(v, sort_keys=True) for k, v in OPTIONS.items()}
    legacy |= {"model.momentum": "0.9", "data.root": '"/old/place"'}
    assert run_config.changed_settings({"settings": legacy}, current) == ""
    legacy["model.lr"] = "0.1"
    assert run_config.changed_settings({"settings": legacy}, current) == "model.lr: 0.1 -> 0.05"
    assert "no longer resolve" in run_config.changed_settings(
        {"settings": {**legacy, "model.gone_option": "1"}}, current
    )
    record = {"settings_format": run_config.SETTINGS_FORMAT, "settings": current}
    assert run_config.changed_settings(record, current) == ""
