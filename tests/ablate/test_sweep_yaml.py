"""Sweep files read as written: merge keys work, YAML 1.1's conversions of words and numbers
do not rename variants or options, and names too long for a file are refused when the sweep
loads."""

from __future__ import annotations

from pathlib import Path

import pytest

from visattn.ablate.sweep import MAX_NAME, load_sweep
from visattn.files import load_yaml


def test_merge_keys_work_and_their_keys_may_be_overridden() -> None:
    text = "common: &c {a: 1, b: 2}\nrun:\n  <<: *c\n  b: 3\n"
    assert load_yaml(text)["run"] == {"a": 1, "b": 3}


def test_a_key_repeated_in_one_mapping_is_still_refused() -> None:
    import yaml

    with pytest.raises(yaml.YAMLError, match="appears twice"):
        load_yaml("a: 1\na: 2\n")


@pytest.mark.parametrize("word", ["off", "on", "yes", "no", "Off", "YES"])
def test_yaml_1_1_boolean_words_stay_words(word: str) -> None:
    assert load_yaml(f"verify_images: {word}\n") == {"verify_images": word}
    assert load_yaml("x: true\ny: False\n") == {"x": True, "y": False}


@pytest.mark.parametrize(
    "name, said",
    [
        ("010", r"'010' is ambiguous: YAML 1.1 reads it as the octal number 8, YAML 1.2 as 10"),
        ("12:30", r"read as int .* quote it"),
        ("0x1F", r"read as int .* quote it"),
    ],
)
def test_a_variant_name_yaml_reads_as_a_number_is_refused(
    tmp_path: Path, name: str, said: str
) -> None:
    path = tmp_path / "sweep.yaml"
    path.write_text(f"name: s\nseeds: [0]\nvariants:\n  - {{name: {name}}}\n")
    with pytest.raises(ValueError, match=said):
        load_sweep(path)


def test_a_variant_name_too_long_for_a_file_is_refused_when_the_sweep_loads(
    tmp_path: Path,
) -> None:
    path = tmp_path / "sweep.yaml"
    long = "v" * (MAX_NAME + 1)
    path.write_text(f"name: s\nseeds: [0]\nvariants:\n  - {{name: {long}}}\n")
    with pytest.raises(ValueError, match=rf"is {MAX_NAME + 1} characters; at most {MAX_NAME}"):
        load_sweep(path)
    path.write_text(f"name: s\nseeds: [0]\nvariants:\n  - {{name: {'v' * MAX_NAME}}}\n")
    assert load_sweep(path).variants[0].name == "v" * MAX_NAME


def test_a_sweep_travels_to_its_workers_as_json_and_nothing_is_pickled() -> None:
    from helpers.paths import REPO

    for name in ("cifar10_cpu", "imagenette112_cpu", "families_cpu"):
        sweep = load_sweep(REPO / "configs" / "ablations" / f"{name}.yaml")
        assert type(sweep).from_json(sweep.to_json()) == sweep
    sources = (REPO / "visattn" / "ablate").glob("*.py")
    assert not [p.name for p in sources if "pickle" in p.read_text()]
