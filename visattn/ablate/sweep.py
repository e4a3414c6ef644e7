"""Sweep files: parsing, validation and expansion into runs (variants x seeds).

A sweep file (its format is described in the README) is a YAML mapping::

    name: se_positions
    base: [configs/quickstart.yaml]          # config files stacked as with --config
    seeds: [0, 1, 2]
    set: {trainer.max_epochs: 5}             # dotted overrides applied to every run
    variants:                                # a name + its own dotted overrides
      - {name: none, set: {model.attention: null}}
      - {name: se_standard, set: {model.attention: {name: se, position: standard}}}

Optional keys: ``baseline`` (the variant differences are measured against; default the first;
a variant may name its own ``baseline``, e.g. to compare each backbone's attention variants with
that backbone's plain version in one sweep), a variant's ``match`` (an equal-budget baseline:
``{name: resnet20_wide, match: {params: resnet20_gsop}}`` trains the variant's baseline with its
channels widened until it has as many parameters, or ``macs``, as ``resnet20_gsop``, within 2%;
see :func:`visattn.ablate.resolve.match_width`),
``test`` (also run the ``test`` subcommand on the best checkpoint when ``fit`` did not test),
``profile`` (``{device, batch, warmup, repeats}`` of the latency measurement), ``localization``
(``{max_images, tolerance}`` or ``false``) and ``description``.

Each run becomes the argument list of one ``train_cls.py`` call: ``fit``, one ``--config`` per
base file, the shared ``set`` then the variant's ``set`` as ``--key=value`` (one value per key,
the variant's winning; see :func:`overrides_to_args` for the encoding; ``null`` turns an option
off, e.g. ``model.attention: null`` trains without attention), then the run's seed and log
directory.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

__all__ = ["Run", "Sweep", "Variant", "load_sweep", "overrides_to_args"]

_TOP_KEYS = (
    "name",
    "description",
    "base",
    "seeds",
    "set",
    "variants",
    "baseline",
    "test",
    "profile",
    "localization",
)
_PROFILE_KEYS = {"device": "cpu", "batch": 32, "warmup": 3, "repeats": 10}
_LOCALIZATION_KEYS = {"max_images": 512, "tolerance": 0.0}
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.+-]*$")
_KEY = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*$")


@dataclass(frozen=True)
class Variant:
    """One row of the report: a name and its dotted overrides."""

    name: str
    overrides: dict[str, Any] = field(default_factory=dict)
    baseline: str | None = None  # None: the sweep's baseline
    match: tuple[str, str] | None = None  # ("params" | "macs", the variant to match)


@dataclass(frozen=True)
class Run:
    """One training run: a variant trained with one seed."""

    variant: str
    seed: int
    args: tuple[str, ...]  # the train_cls.py arguments, log directory included
    root: Path  # trainer.default_root_dir: <out>/runs/<variant>/seed<k>

    @property
    def key(self) -> str:
        return f"{self.variant}/seed{self.seed}"


@dataclass(frozen=True)
class Sweep:
    """A validated sweep file."""

    name: str
    path: Path
    base: tuple[Path, ...]
    seeds: tuple[int, ...]
    overrides: dict[str, Any]
    variants: tuple[Variant, ...]
    baseline: str
    test: bool = False
    profile: dict[str, Any] = field(default_factory=lambda: dict(_PROFILE_KEYS))
    localization: dict[str, Any] | None = field(default_factory=lambda: dict(_LOCALIZATION_KEYS))
    description: str = ""

    @property
    def baselines(self) -> dict[str, str]:
        """``{variant: the variant its differences are measured against}``."""
        return {v.name: v.baseline or self.baseline for v in self.variants}

    def _args(self, overrides: Mapping[str, Any], seed: int, root: Path) -> tuple[str, ...]:
        args = ["fit"]
        for b in self.base:
            args += ["--config", str(b)]
        args += overrides_to_args({**self.overrides, **overrides})
        args += [f"--seed_everything={seed}", f"--trainer.default_root_dir={root}"]
        return tuple(args)

    def budget(self, extra: Mapping[str, Any] | None = None) -> dict[str, Any]:
        """``{variant: BudgetMatch}`` for the variants with ``match`` (their width is found by
        building the networks: :func:`visattn.ablate.resolve.match_width`). Cached per
        ``extra``."""
        from .resolve import BudgetMatch, match_width, resolve_run

        extra = dict(extra or {})
        key = json.dumps(extra, sort_keys=True, default=str)
        cache = self.__dict__.setdefault("_budget_cache", {})
        if key in cache:
            return cache[key]
        by_name = {v.name: v for v in self.variants}
        out = {}
        for v in self.variants:
            if v.match is None:
                continue
            quantity, of = v.match
            base = v.baseline or self.baseline
            seed, root = self.seeds[0], Path("runs") / "resolve"
            base_run = resolve_run(self._args({**by_name[base].overrides, **extra}, seed, root))
            target = resolve_run(self._args({**by_name[of].overrides, **extra}, seed, root))
            width, achieved, goal = match_width(
                base_run, target, quantity, names=(f"variant {base!r}", f"variant {of!r}")
            )
            out[v.name] = BudgetMatch(
                quantity, of, base, width, achieved, goal, {**base_run.model_kwargs, "width": width}
            )
        cache[key] = out
        return out

    def runs(self, out_dir: str | Path, extra: Mapping[str, Any] | None = None) -> list[Run]:
        """All runs, variant-major (every seed of the first variant, then the next), each with
        its ``train_cls.py`` arguments and log directory under ``out_dir/runs``.

        ``extra``: dotted overrides applied after the sweep's (the command line's ``--set``).
        A variant with ``match`` trains its baseline's overrides, then its own, then
        ``model.model_kwargs`` with the matched ``width`` (see :meth:`budget`).
        """
        out = Path(out_dir).resolve()
        extra = dict(extra or {})
        overrides_to_args(extra)
        by_name = {v.name: v for v in self.variants}
        budget = self.budget(extra) if any(v.match for v in self.variants) else {}
        runs = []
        for v in self.variants:
            overrides = dict(v.overrides)
            if v.name in budget:
                base = by_name[v.baseline or self.baseline]
                overrides = {
                    **base.overrides,
                    **v.overrides,
                    "model.model_kwargs": budget[v.name].model_kwargs,
                }
            for seed in self.seeds:
                root = out / "runs" / v.name / f"seed{seed}"
                runs.append(Run(v.name, seed, self._args({**overrides, **extra}, seed, root), root))
        return runs


def overrides_to_args(overrides: Mapping[str, Any]) -> list[str]:
    """Dotted overrides -> ``--key=value`` arguments, in the given order.

    Strings are passed as written (LightningCLI reads a ``str`` option verbatim, so JSON quotes
    would stay in the value); every other value (numbers, booleans, ``null``, lists, mappings) is
    JSON-encoded, which the CLI's YAML parser reads back unchanged.

    >>> overrides_to_args({"trainer.max_epochs": 5, "model.attention": None})
    ['--trainer.max_epochs=5', '--model.attention=null']
    """
    args = []
    for key, value in overrides.items():
        if not isinstance(key, str) or not _KEY.match(key):
            raise ValueError(
                f"override key {key!r} is not a dotted option name such as 'trainer.max_epochs'"
            )
        if isinstance(value, str):  # as typed: a str option would keep JSON's quotes
            args.append(f"--{key}={value}")
            continue
        try:
            encoded = json.dumps(value, ensure_ascii=False)
        except TypeError as e:
            raise ValueError(f"override {key}: value {value!r} is not JSON/YAML data ({e})") from e
        args.append(f"--{key}={encoded}")
    return args


def _mapping(value: Any, what: str) -> dict[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise ValueError(
            f"{what} must be a mapping of dotted overrides, got {type(value).__name__}"
        )
    return dict(value)


def _options(value: Any, defaults: dict[str, Any], what: str) -> dict[str, Any]:
    value = _mapping(value, what)
    unknown = sorted(set(value) - set(defaults))
    if unknown:
        raise ValueError(f"{what}: unknown key(s) {unknown}; valid keys: {sorted(defaults)}")
    return {**defaults, **value}


def _resolve_base(entry: Any, sweep_path: Path) -> Path:
    if not isinstance(entry, str | Path):
        raise ValueError(f"base entries must be paths, got {entry!r}")
    p = Path(entry).expanduser()
    if p.is_absolute():
        candidates = [p]
    else:  # the current directory first, then the sweep file's folder and its parents
        candidates = [Path.cwd() / p] + [d / p for d in sweep_path.resolve().parents]
    for c in candidates:
        if c.is_file():
            return c.resolve()
    looked = ", ".join(str(c) for c in candidates[:4]) + (", ..." if len(candidates) > 4 else "")
    raise FileNotFoundError(
        f"sweep {sweep_path}: base config {entry!r} not found (looked at {looked}); give a path "
        "relative to the current directory or to the sweep file's folder or one of its parents"
    )


def load_sweep(path: str | Path) -> Sweep:
    """Read and validate a sweep file.

    Raises:
        FileNotFoundError: the sweep file or a base config does not exist.
        ValueError: a missing or unknown key, a malformed value, duplicate or unsafe variant
            names, or a baseline that names no variant.
    """
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"sweep file {path} does not exist")
    data = yaml.safe_load(path.read_text())
    if not isinstance(data, Mapping):
        raise ValueError(f"sweep {path}: the file must hold a mapping (name, base, seeds, ...)")
    unknown = sorted(set(data) - set(_TOP_KEYS))
    if unknown:
        raise ValueError(f"sweep {path}: unknown key(s) {unknown}; valid keys: {list(_TOP_KEYS)}")
    missing = [k for k in ("name", "seeds", "variants") if k not in data]
    if missing:
        raise ValueError(f"sweep {path}: missing key(s) {missing}")

    name = str(data["name"])
    if not _NAME.match(name):
        raise ValueError(f"sweep {path}: name {name!r} must be letters, digits, '_', '.', '-', '+'")
    base = data.get("base") or []
    if isinstance(base, str):
        base = [base]
    base = tuple(_resolve_base(b, path) for b in base)

    seeds = data["seeds"]
    if isinstance(seeds, int) and not isinstance(seeds, bool):
        raise ValueError(f"sweep {path}: seeds must be a list such as [0, 1, 2], got {seeds!r}")
    if (
        not isinstance(seeds, list)
        or not seeds
        or any(isinstance(s, bool) or not isinstance(s, int) for s in seeds)
    ):
        raise ValueError(f"sweep {path}: seeds must be a non-empty list of ints, got {seeds!r}")
    if len(set(seeds)) != len(seeds):
        raise ValueError(f"sweep {path}: seeds repeat: {seeds}")

    overrides = _mapping(data.get("set"), f"sweep {path}: 'set'")
    overrides_to_args(overrides)  # validates keys and values early

    raw_variants = data["variants"]
    if not isinstance(raw_variants, list) or not raw_variants:
        raise ValueError(f"sweep {path}: variants must be a non-empty list")
    variants = []
    for i, v in enumerate(raw_variants):
        if not isinstance(v, Mapping) or "name" not in v:
            raise ValueError(f"sweep {path}: variant #{i} must be a mapping with a 'name'")
        extra = sorted(set(v) - {"name", "set", "baseline", "match"})
        if extra:
            raise ValueError(
                f"sweep {path}: variant {v['name']!r}: unknown key(s) {extra}; "
                "valid: name, set, baseline, match"
            )
        vname = str(v["name"])
        if not _NAME.match(vname):
            raise ValueError(
                f"sweep {path}: variant name {vname!r} must be letters, digits, '_', '.', '-', '+'"
                " (it names a folder)"
            )
        vset = _mapping(v.get("set"), f"sweep {path}: variant {vname!r}: 'set'")
        overrides_to_args(vset)
        vbase = v.get("baseline")
        match = v.get("match")
        if match is not None:
            if (
                not isinstance(match, Mapping)
                or len(match) != 1
                or next(iter(match)) not in ("params", "macs")
            ):
                raise ValueError(
                    f"sweep {path}: variant {vname!r}: match must be {{params: VARIANT}} or "
                    f"{{macs: VARIANT}}, got {match!r}"
                )
            match = (next(iter(match)), str(next(iter(match.values()))))
        variants.append(Variant(vname, vset, None if vbase is None else str(vbase), match))
    names = [v.name for v in variants]
    dupes = sorted({n for n in names if names.count(n) > 1})
    if dupes:
        raise ValueError(f"sweep {path}: duplicate variant name(s) {dupes}")

    baseline = str(data.get("baseline", names[0]))
    for b in [baseline, *(v.baseline for v in variants if v.baseline is not None)]:
        if b not in names:
            raise ValueError(f"sweep {path}: baseline {b!r} is not a variant; variants: {names}")
    matched = {v.name for v in variants if v.match}
    for v in variants:
        if v.match is None:
            continue
        of, widened = v.match[1], v.baseline or baseline
        if of not in names or of in matched or of == v.name:
            raise ValueError(
                f"sweep {path}: variant {v.name!r}: match names {of!r}, which must be another "
                f"variant without match; variants: {names}"
            )
        if widened in matched or widened == v.name:
            raise ValueError(
                f"sweep {path}: variant {v.name!r}: its baseline {widened!r} must be a plain "
                "variant (the one that is widened)"
            )

    test = data.get("test", False)
    if not isinstance(test, bool):
        raise ValueError(f"sweep {path}: test must be true or false, got {test!r}")
    profile = _options(data.get("profile"), _PROFILE_KEYS, f"sweep {path}: profile")
    loc = data.get("localization", True)
    if loc is False:
        localization = None
    else:
        localization = _options(
            None if loc is True else loc, _LOCALIZATION_KEYS, f"sweep {path}: localization"
        )

    return Sweep(
        name=name,
        path=path.resolve(),
        base=base,
        seeds=tuple(seeds),
        overrides=overrides,
        variants=tuple(variants),
        baseline=baseline,
        test=test,
        profile=profile,
        localization=localization,
        description=str(data.get("description", "")),
    )
