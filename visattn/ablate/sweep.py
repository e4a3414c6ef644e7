"""Sweep files: parsing, validation and expansion into runs (variants x seeds).

A sweep file (its format is described in the README) is a YAML mapping::

    name: se_positions
    base: [configs/quickstart.yaml]          # config files stacked as with --config
    seeds: [0, 1, 2]
    set: {trainer.max_epochs: 5}             # dotted overrides applied to every run
    variants:                                # a name + its own dotted overrides
      - {name: none, set: {model.attention: null}}
      - {name: se_standard, set: {model.attention: {name: se, position: standard}}}

Optional keys: ``extends`` (another sweep file, relative to this one: its keys are inherited,
each key given here replaces the parent's, except ``variants``, which are merged by name: a
variant named as one of the parent's replaces it in place, a new name is appended; so a
``_full`` sweep is its ``_quick`` form plus what differs),
``baseline`` (the variant differences are measured against; default the first;
a variant may name its own ``baseline``, e.g. to compare each backbone's attention variants with
that backbone's plain version in one sweep), a variant's ``match`` (an equal-budget baseline:
``{name: resnet20_wide, match: {params: resnet20_gsop}}`` trains the variant's baseline with its
channels widened until it has as many parameters, or ``macs``, as ``resnet20_gsop``, within 2%;
see :func:`visattn.ablate.resolve.match_width`),
``test`` (test each run's network when its fit ends, in the same process: ``true`` or ``best``
on the best checkpoint by val/acc, ``last`` on the final network, so that nothing is chosen on
the data that val/acc is measured on),
``profile`` (``{device, batch, warmup, repeats}`` of the latency measurement), ``localization``
(``{max_images, tolerance}`` or ``false``), ``order`` (``variant``, the default: every seed of
a variant, then the next variant; ``seed``: every variant of a seed, then the next seed, so that
a long sweep run in pieces has whole pairs as it goes), ``metric`` (the report's headline:
``val/acc``, the default, or ``test/acc`` with ``test``, for data whose validation split is the
test set) and ``description``.

Each run becomes the argument list of one ``train_cls.py`` call: ``fit``, one ``--config`` per
base file, the shared ``set`` then the variant's ``set`` as ``--key=value`` (one value per key,
the variant's winning; see :func:`overrides_to_args` for the encoding; ``null`` turns an option
off, e.g. ``model.attention: null`` trains without attention), then the run's seed and log
directory.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from .._safe_path import IMPORTED, import_named
from .._values import is_int
from ..files import inheritance_chain, load_yaml
from ..training import config as run_config
from ..training.options import to_flag
from .resolve import BudgetMatch, match_width, resolve_run

__all__ = ["SEED_RANGE", "Run", "Sweep", "Variant", "load_sweep", "overrides_to_args"]

_TOP_KEYS = (
    "extends",
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
    "order",
    "metric",
    "imports",
)
#: ``order``'s values: every seed of a variant before the next variant, or every variant of a
#: seed before the next seed (a long sweep run in pieces then has whole pairs as it goes)
ORDERS = ("variant", "seed")
#: ``test``'s values once normalised: no test, the best checkpoint by val/acc, the final network.
TEST_CHECKPOINTS = (None, "best", "last")
_PROFILE_KEYS = {"device": "cpu", "batch": 32, "warmup": 3, "repeats": 10}
_LOCALIZATION_KEYS = {"max_images": 512, "tolerance": 0.0}
#: Seeds ``seed_everything`` takes as given (outside it Lightning silently draws another).
SEED_RANGE = (0, 2**32 - 1)
_VARIANT_KEYS = ("name", "set", "baseline", "match")
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.+-]*$")
_KEY = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*$")


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


#: the longest sweep or variant name: it names folders and files (``<variant>_seed<k>.log``,
#: ``.seed<k>.attempts``) that must stay under the file systems' 255 bytes
MAX_NAME = 100


def _check_name(name: Any, what: str) -> str:
    if not isinstance(name, str) or not _NAME.match(name):
        raise ValueError(
            f"{what} {name!r} must be letters, digits, '_', '.', '-', '+' (it names a folder)"
        )
    if len(name) > MAX_NAME:
        raise ValueError(
            f"{what} {name[:40]}... is {len(name)} characters; at most {MAX_NAME} (it names "
            "folders and files)"
        )
    return name


def _refuse_seed(overrides: Mapping[str, Any], what: str) -> None:
    """A ``set`` may not give ``seed_everything``: the sweep's ``seeds`` give every run its
    own, and a set value would be silently replaced."""
    if "seed_everything" in overrides:
        raise ValueError(
            f"{what}: 'set' gives seed_everything, which the sweep's 'seeds' set for each run "
            "(it would be replaced); list the seeds under 'seeds:'"
        )


@dataclass(frozen=True)
class Variant:
    """One row of the report: a name and its dotted overrides (the YAML key ``set``).

    ``baseline``: the variant its differences are measured against (``None``: the sweep's);
    ``match``: an equal-budget baseline, ``("params" | "macs", the variant to match)`` (a
    one-key mapping ``{params: VARIANT}`` is accepted and normalised).

    Raises:
        ValueError: a malformed field, naming the variant and the field.
    """

    name: str
    overrides: dict[str, Any] = field(default_factory=dict)
    baseline: str | None = None
    match: tuple[str, str] | Mapping[str, str] | None = None

    def __post_init__(self) -> None:
        what = f"variant {self.name!r}"
        _check_name(self.name, "variant name")
        overrides = _mapping(self.overrides, f"{what}: 'set'")
        _refuse_seed(overrides, what)
        overrides_to_args(overrides)  # validates keys and values early
        object.__setattr__(self, "overrides", overrides)
        if self.baseline is not None:
            object.__setattr__(self, "baseline", str(self.baseline))
        match = self.match
        if isinstance(match, Mapping):
            match = tuple(next(iter(match.items()))) if len(match) == 1 else None
        if self.match is not None and (
            not isinstance(match, tuple) or len(match) != 2 or match[0] not in ("params", "macs")
        ):
            raise ValueError(
                f"{what}: match must be {{params: VARIANT}} or {{macs: VARIANT}}, "
                f"got {self.match!r}"
            )
        if match is not None:
            object.__setattr__(self, "match", (match[0], str(match[1])))

    @classmethod
    def from_config(cls, data: Any, index: int) -> Variant:
        """A variant from its YAML mapping (``name``, ``set``, ``baseline``, ``match``)."""
        if not isinstance(data, Mapping) or "name" not in data:
            raise ValueError(f"variant #{index} must be a mapping with a 'name'")
        extra = sorted(set(data) - set(_VARIANT_KEYS))
        if extra:
            raise ValueError(
                f"variant {data['name']!r}: unknown key(s) {extra}; valid: "
                + ", ".join(_VARIANT_KEYS)
            )
        name = data["name"]
        if not isinstance(name, str):  # YAML read `010` as 8, `12:30` as 750
            raise ValueError(
                f"variant #{index}: its name was read as {type(name).__name__} {name!r}, not as "
                "written; quote it (name: '010')"
            )
        return cls(name, data.get("set"), data.get("baseline"), data.get("match"))


class _VariantParse:
    """One variant's options, parsed once for all its seeds. A sweep's runs of one variant
    have the same arguments but the two that end them, ``--seed_everything`` and
    ``--trainer.default_root_dir`` (:meth:`Sweep.runs`), so the first run asked is parsed and
    every other is that parse with those two set (:meth:`RunConfig.but
    <visattn.training.config.RunConfig.but>`); arguments that differ anywhere else are parsed
    in full. A parse costs about a tenth of a second, and a report of 70 finished runs reads
    every run's settings."""

    def __init__(self) -> None:
        self._first: run_config.RunConfig | None = None

    def resolve(self, args: tuple[str, ...], seed: int, root: Path) -> run_config.RunConfig:
        first = self._first
        if first is not None and tuple(first[:-2]) == tuple(args[:-2]):
            options = {"seed_everything": seed, "trainer.default_root_dir": str(root)}
            derived = first.but(options=options)
            if tuple(derived) == tuple(args):
                return derived
        parsed = run_config.RunConfig.parse(args)
        if first is None:
            self._first = parsed
        return parsed


@dataclass(frozen=True)
class Run:
    """One training run: a variant trained with one seed.

    ``args`` are its ``train_cls.py`` arguments (log directory included); :attr:`resolved`
    parses them once (or is them, when they came resolved: a worker's run; or its variant's
    parse with this run's seed and folder set, through ``shared``: :class:`_VariantParse`) and
    :attr:`settings` is their canonical form (:attr:`visattn.training.config.RunConfig.settings`).
    """

    variant: str
    seed: int
    args: tuple[str, ...]
    root: Path  # trainer.default_root_dir: <out>/runs/<variant>/seed<k>
    shared: _VariantParse | None = field(default=None, compare=False, repr=False)

    @property
    def key(self) -> str:
        return f"{self.variant}/seed{self.seed}"

    @functools.cached_property
    def resolved(self) -> run_config.RunConfig:
        if self.shared is None or isinstance(self.args, run_config.RunConfig):
            return run_config.RunConfig.parse(self.args)
        return self.shared.resolve(tuple(self.args), self.seed, self.root)

    @functools.cached_property
    def settings(self) -> dict[str, str]:
        return self.resolved.settings

    @property
    def execution(self) -> dict[str, str]:
        """How the run executes (:func:`visattn.training.config.execution_options`): recorded
        in its marker beside its settings."""
        return run_config.execution_options(self.resolved.config)


@dataclass(frozen=True)
class Sweep:
    """A validated sweep: every field is checked and normalised at construction, as a
    :class:`~visattn.models.placement.Placement` is, so a ``Sweep`` that exists is runnable.

    ``seeds``: distinct ints in :data:`SEED_RANGE`; ``variants``: :class:`Variant` objects (or
    their YAML mappings) with distinct names; ``baseline``: a variant name (``None``: the
    first); ``profile``: the latency measurement's ``{device, batch, warmup, repeats}`` (missing
    keys take their defaults); ``localization``: ``{max_images, tolerance}``, ``True`` for the
    defaults, or ``False``/``None`` for none.

    Raises:
        ValueError: a malformed field, prefixed with ``sweep <path>:`` and naming it.
    """

    name: str
    path: Path
    base: tuple[Path, ...]
    seeds: tuple[int, ...]
    overrides: dict[str, Any]
    variants: tuple[Variant, ...]
    baseline: str | None = None
    test: bool | str = False
    profile: dict[str, Any] | None = None
    localization: dict[str, Any] | bool | None = True
    description: str = ""
    order: str = "variant"
    metric: str = "val/acc"
    #: the user's own modules (their blocks), imported before anything else is read: the
    #: file's ``imports:`` and the command line's ``--import``; every worker imports them too
    imports: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        try:
            self._normalise()
        except ValueError as e:
            raise ValueError(f"sweep {self.path}: {e}") from None

    def to_json(self) -> str:
        """The sweep as JSON (what a ``--jobs`` worker receives): :meth:`from_json` gives an
        equal sweep without reading its file again."""
        data = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        data["path"] = str(self.path)
        data["base"] = [str(b) for b in self.base]
        data["variants"] = [
            {"name": v.name, "set": v.overrides, "baseline": v.baseline}
            | ({"match": {v.match[0]: v.match[1]}} if v.match else {})
            for v in self.variants
        ]
        return json.dumps(data)

    @classmethod
    def from_json(cls, text: str) -> Sweep:
        """The sweep :meth:`to_json` wrote."""
        return cls(**json.loads(text))

    def _normalise(self) -> None:
        set_ = object.__setattr__  # frozen: normalise in place, once, at construction
        set_(self, "imports", _imports(self.imports))  # first: the variants may name their blocks
        set_(self, "name", _check_name(str(self.name), "name"))
        set_(self, "path", Path(self.path).resolve())
        set_(self, "base", tuple(Path(b) for b in self.base))
        set_(self, "seeds", _seeds(self.seeds))
        overrides = _mapping(self.overrides, "'set'")
        _refuse_seed(overrides, f"sweep {self.name!r}")
        overrides_to_args(overrides)  # validates keys and values early
        set_(self, "overrides", overrides)
        set_(self, "variants", _variants(self.variants))
        names = [v.name for v in self.variants]
        set_(self, "baseline", str(names[0] if self.baseline is None else self.baseline))
        _check_baselines(self.variants, self.baseline)
        test = (
            {True: "best", False: None}.get(self.test, self.test)
            if isinstance(self.test, bool)
            else self.test
        )
        if test not in TEST_CHECKPOINTS:
            raise ValueError(
                f"test must be false, true (= 'best') or one of {list(TEST_CHECKPOINTS[1:])}, "
                f"got {self.test!r}"
            )
        set_(self, "test", test)
        set_(self, "profile", _options(self.profile, _PROFILE_KEYS, "profile"))
        loc = self.localization
        if loc is False or loc is None:
            set_(self, "localization", None)
        else:
            value = None if loc is True else loc
            set_(self, "localization", _options(value, _LOCALIZATION_KEYS, "localization"))
        set_(self, "description", str(self.description or ""))
        if self.order not in ORDERS:
            raise ValueError(f"order must be one of {list(ORDERS)}, got {self.order!r}")
        if self.metric not in ("val/acc", "test/acc"):
            raise ValueError(f"metric must be 'val/acc' or 'test/acc', got {self.metric!r}")
        if self.metric == "test/acc" and self.test is None:
            raise ValueError("metric 'test/acc' needs test: last (or best): no run would test")

    @classmethod
    def from_config(cls, data: Mapping[str, Any], path: str | Path) -> Sweep:
        """A sweep from the mapping of a sweep file at ``path`` (``extends`` already merged;
        ``base`` entries resolved as :func:`load_sweep` describes)."""
        path = Path(path)
        unknown = sorted(set(data) - set(_TOP_KEYS))
        if unknown:
            raise ValueError(
                f"sweep {path}: unknown key(s) {unknown}; valid keys: {list(_TOP_KEYS)}"
            )
        missing = [k for k in ("name", "seeds", "variants") if k not in data]
        if missing:
            raise ValueError(f"sweep {path}: missing key(s) {missing}")
        base = data.get("base") or []
        base = [base] if isinstance(base, str | Path) else base
        try:  # before the variants, which may name the blocks these modules register
            imports = _imports([*(data.get("imports") or []), *IMPORTED])
        except ValueError as e:
            raise ValueError(f"sweep {path}: {e}") from None
        raw = data["variants"]
        if not isinstance(raw, list) or not raw:
            raise ValueError(f"sweep {path}: variants must be a non-empty list")
        try:
            variants = tuple(Variant.from_config(v, i) for i, v in enumerate(raw))
        except ValueError as e:
            raise ValueError(f"sweep {path}: {e}") from None
        return cls(
            name=data["name"],
            path=path,
            base=tuple(_resolve_base(b, path) for b in base),
            seeds=data["seeds"],
            overrides=data.get("set"),
            variants=variants,
            baseline=data.get("baseline"),
            test=data.get("test", False),
            profile=data.get("profile"),
            localization=data.get("localization", True),
            description=data.get("description", ""),
            order=data.get("order", "variant"),
            metric=data.get("metric", "val/acc"),
            imports=imports,
        )

    @property
    def baselines(self) -> dict[str, str]:
        """``{variant: the variant its differences are measured against}``."""
        return {v.name: v.baseline or self.baseline for v in self.variants}

    def _args(self, overrides: Mapping[str, Any], seed: int, root: Path) -> tuple[str, ...]:
        args = ["fit"]
        for b in self.base:
            args += ["--config", str(b)]
        args += overrides_to_args({**self.overrides, **overrides})
        # the two that differ between a variant's runs, last (what _VariantParse relies on)
        args += [f"--seed_everything={seed}", f"--trainer.default_root_dir={root}"]
        return tuple(args)

    def budget(self, extra: Mapping[str, Any] | None = None) -> dict[str, Any]:
        """``{variant: BudgetMatch}`` for the variants with ``match`` (their width is found by
        building the networks: :func:`visattn.ablate.resolve.match_width`). Cached per
        ``extra``."""
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
        """All runs, variant-major (every seed of the first variant, then the next) or, with
        ``order: seed``, seed-major (every variant of the first seed, then the next), each with
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
            shared = _VariantParse()
            for seed in self.seeds:
                root = out / "runs" / v.name / f"seed{seed}"
                args = self._args({**overrides, **extra}, seed, root)
                runs.append(Run(v.name, seed, args, root, shared))
        if self.order == "seed":
            runs.sort(key=lambda r: self.seeds.index(r.seed))  # stable: variants keep their order
        return runs


def parse_set(items: Sequence[str]) -> dict[str, Any]:
    """``{key: value}`` from command-line ``--set KEY=VALUE`` items, each value read as YAML
    (an empty one is ``""``); a later item for the same key wins.

    Raises:
        ValueError: an item without ``=`` or a key, or a value that is not valid YAML (naming
            the item).
    """
    overrides: dict[str, Any] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise ValueError(f"--set expects KEY=VALUE, got {item!r}")
        try:
            overrides[key] = load_yaml(value, f"--set {key}") if value else ""
        except yaml.YAMLError as e:
            raise ValueError(f"--set {item}: {e}") from None
    return overrides


def overrides_to_args(overrides: Mapping[str, Any]) -> list[str]:
    """Dotted overrides -> ``--key=value`` arguments, in the given order.

    Each value is encoded as :func:`visattn.training.options.to_flag` does (strings as written,
    the rest JSON).

    >>> overrides_to_args({"trainer.max_epochs": 5, "model.attention": None})
    ['--trainer.max_epochs=5', '--model.attention=null']
    """
    args = []
    for key, value in overrides.items():
        if not isinstance(key, str) or not _KEY.match(key):
            raise ValueError(
                f"override key {key!r} is not a dotted option name such as 'trainer.max_epochs'"
            )
        args.append(to_flag(key, value))
    return args


def _seeds(seeds: Any) -> tuple[int, ...]:
    if is_int(seeds):
        raise ValueError(f"seeds must be a list such as [0, 1, 2], got {seeds!r}")
    if isinstance(seeds, str | bytes) or not isinstance(seeds, Sequence) or not seeds:
        raise ValueError(f"seeds must be a non-empty list of ints, got {seeds!r}")
    not_int = [s for s in seeds if not is_int(s)]
    if not_int:
        raise ValueError(f"seeds must be ints, got {not_int} in {list(seeds)}")
    lo, hi = SEED_RANGE
    out = [s for s in seeds if not lo <= s <= hi]
    if out:
        raise ValueError(
            f"seeds must be between {lo} and {hi} (the range seed_everything takes), got {out}"
        )
    if len(set(seeds)) != len(seeds):
        raise ValueError(f"seeds repeat: {list(seeds)}")
    return tuple(seeds)


def _variants(variants: Any) -> tuple[Variant, ...]:
    if isinstance(variants, str | bytes) or not isinstance(variants, Sequence) or not variants:
        raise ValueError("variants must be a non-empty list")
    out = tuple(
        v if isinstance(v, Variant) else Variant.from_config(v, i) for i, v in enumerate(variants)
    )
    names = [v.name for v in out]
    dupes = sorted({n for n in names if names.count(n) > 1})
    if dupes:
        raise ValueError(f"duplicate variant name(s) {dupes}")
    return out


def _check_baselines(variants: Sequence[Variant], baseline: str) -> None:
    """Every baseline names a variant; a ``match`` names another plain variant and widens a
    plain baseline."""
    names = [v.name for v in variants]
    for b in [baseline, *(v.baseline for v in variants if v.baseline is not None)]:
        if b not in names:
            raise ValueError(f"baseline {b!r} is not a variant; variants: {names}")
    matched = {v.name for v in variants if v.match}
    for v in variants:
        if v.match is None:
            continue
        of, widened = v.match[1], v.baseline or baseline
        if of not in names or of in matched or of == v.name:
            raise ValueError(
                f"variant {v.name!r}: match names {of!r}, which must be another variant without "
                f"match; variants: {names}"
            )
        if widened in matched or widened == v.name:
            raise ValueError(
                f"variant {v.name!r}: its baseline {widened!r} must be a plain variant (the one "
                "that is widened)"
            )


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


def _read_yaml(path: Path) -> dict[str, Any]:
    """The mapping in a sweep file; a syntax error names the file, line and column."""
    if not path.is_file():
        raise FileNotFoundError(f"sweep file {path} does not exist")
    try:
        with open(path, encoding="utf-8") as f:
            data = load_yaml(f, f"sweep {path}")
    except yaml.MarkedYAMLError as e:
        mark = e.problem_mark or e.context_mark
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = e.problem or e.context or "malformed"
        raise ValueError(f"sweep {path}: not valid YAML{where}: {problem}") from None
    except (yaml.YAMLError, UnicodeDecodeError) as e:
        raise ValueError(f"sweep {path}: not valid YAML: {e}") from None
    if not isinstance(data, Mapping):
        raise ValueError(f"sweep {path}: the file must hold a mapping (name, base, seeds, ...)")
    return dict(data)


def _extended_variants(parent: Any, child: Any) -> Any:
    """The parent's variants with the child's merged in by name (replaced in place or appended);
    anything malformed is passed on for :class:`Sweep` to report."""
    if not isinstance(parent, list) or not isinstance(child, list):
        return child
    merged = list(parent)
    index = {v["name"]: i for i, v in enumerate(merged) if isinstance(v, Mapping) and "name" in v}
    for v in child:
        name = v.get("name") if isinstance(v, Mapping) else None
        if name is not None and name in index:
            merged[index[name]] = v
        else:
            merged.append(v)
    return merged


def _read_extended(path: Path) -> dict[str, Any]:
    """A sweep file's mapping with its ``extends`` chain merged in (the one inheritance rule,
    :func:`~visattn.files.inheritance_chain`: a key given replaces the parent's, variants merge
    by name) and every ``base`` entry resolved against the file that wrote it."""
    merged: dict[str, Any] = {}
    for piece in inheritance_chain(path, "extends", _read_yaml, what="sweep", single=True):
        data = dict(piece.content)
        if piece.inherits and "name" not in data:
            raise ValueError(
                f"sweep {piece.path}: extends another sweep but has no name of its own; a "
                "sweep's name is whose runs an output folder holds, so it would take over the "
                "parent's folder and its finished runs: give this sweep a 'name:'"
            )
        if data.get("base"):
            base = data["base"]
            entries = [base] if isinstance(base, str) else base
            data["base"] = [_resolve_base(b, piece.path.resolve()) for b in entries]
        if "variants" in data:
            data["variants"] = _extended_variants(merged.get("variants"), data["variants"])
        merged = {**merged, **data}
    return merged


def _imports(names: Any) -> tuple[str, ...]:
    """``imports``: module names, each imported now (:func:`~visattn._safe_path.import_named`)."""
    if isinstance(names, str) or not isinstance(names, (list, tuple)):
        raise ValueError(f"imports must be a list of module names, got {names!r}")
    unique = tuple(dict.fromkeys(str(n) for n in names))
    for name in unique:
        import_named(name)
    return unique


def load_sweep(path: str | Path) -> Sweep:
    """Read and validate a sweep file (``extends`` followed).

    Raises:
        FileNotFoundError: the sweep file, the file it extends or a base config does not exist.
        ValueError: the file is not valid YAML (naming the line), a missing or unknown key, a
            malformed value, duplicate or unsafe variant names, seeds out of range, or a
            baseline that names no variant.
    """
    path = Path(path)
    return Sweep.from_config(_read_extended(path), path)
