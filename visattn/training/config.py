"""A run's options as one value, :class:`RunConfig`: resolved once, compared in one canonical
form, built without training.

A run's options come from, in order (a later source wins):

1. config files (``--config``), each ``_base_`` piece first (:func:`expand_config_args`);
2. a sweep's ``set`` and its variant's ``set`` (as ``--key=value`` flags, :func:`to_flag`);
3. command-line flags;
4. for a resumed fit, the model and data options recorded in its checkpoint
   (:func:`restore_recorded`, applied by the command line before it builds anything).

:meth:`RunConfig.parse` turns sources 1-3 into one jsonargparse namespace with the command
line's own parser, parsing once; the :class:`RunConfig` holds the argument list together with
that namespace, and a sweep's workers and :func:`visattn.training.cli.run` take it as it is (no
second parse). :attr:`RunConfig.settings` is the run's canonical form: every option that
differs from the parser's default, as ``{dotted key: JSON}``, leaving out the options that only
say where files live (:data:`LOCATION_KEYS`). Any two routes to the same options (a YAML file,
the same values as flags, a sweep's ``set``) give the same settings and the same
:meth:`RunConfig.canonical_dump`, and the same :class:`RunSpec` (the settings as a typed, frozen
value: ``!=`` is "changed", :meth:`RunSpec.changes` says how); a sweep's completion marker
records them, and :func:`changed_settings` compares a marker with a run, recognising the
markers written before this module existed.
"""

from __future__ import annotations

import copy
import dataclasses
import functools
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

import yaml
from jsonargparse import ArgumentParser, Namespace

from ..models.checkpoint import UntrustedClassError, check_recorded_classes
from .cli import VisattnCLI, resolve_eval_transform
from .options import (
    FREE_ON_RESUME,
    NETWORK_OPTIONS,
    expand_config_args,
    leaves,
    parse,
    placement_normal_form,
    restore_recorded,
    to_flag,
    to_json,
)

__all__ = [
    "EXECUTION_KEYS",
    "FREE_ON_RESUME",
    "LOCATION_KEYS",
    "NETWORK_OPTIONS",
    "SETTINGS_FORMAT",
    "Built",
    "RunConfig",
    "RunSpec",
    "canonical_settings",
    "changed_settings",
    "describe_changes",
    "execution_options",
    "expand_config_args",
    "restore_recorded",
    "settings",
]

SUBCOMMANDS = ("fit", "test", "validate")

#: Options that say where files live, not what a run computes: a sweep moved to another machine
#: (its data elsewhere, the repository cloned into another folder) keeps its finished runs.
LOCATION_KEYS = ("trainer.default_root_dir", "data.root")
#: Options that say how a run executes, shows or logs its work, not what it computes: changing
#: one (a progress bar turned on, more loader workers, the network compiled) keeps finished runs
#: finished. A sweep still holds one ``model.compile`` for all its runs (the marker records these
#: values under ``execution``).
EXECUTION_KEYS = frozenset(
    {
        "trainer.enable_progress_bar",
        "trainer.enable_model_summary",
        "trainer.log_every_n_steps",
        "data.num_workers",
        "data.pin_memory",
        "data.download",
        "data.verify",
        "data.verify_images",
        "model.compile",
        "model.check_finite_every",
    }
)
#: the key whose value is a placement (or a list of them); compared in its normal form
_ATTENTION = "model.attention"
#: parser bookkeeping, not options: the paths of the ``--config`` files (their content is in
#: the options they set)
_NOT_OPTIONS = ("config",)

#: What a marker's ``settings_format`` says: 2, :func:`settings` (every non-default resolved
#: option). Markers without it were written before (the options as set, unresolved).
SETTINGS_FORMAT = 2

# --------------------------------------------------------------------------- resolving


class _ParserOnly(VisattnCLI):
    """VisattnCLI that builds its parser and nothing else, through LightningCLI's public hooks:
    ``parse_arguments`` parses nothing (no subcommand, no seed to set), and the hooks that
    would build the classes do nothing."""

    def parse_arguments(self, parser: Any, args: Any) -> None:
        self.config = Namespace(subcommand=None, seed_everything=False)

    def before_instantiate_classes(self) -> None:
        pass

    def instantiate_classes(self) -> None:
        pass


@functools.cache
def _parser() -> ArgumentParser:
    """``train_cls.py``'s parser (subcommands ``fit``, ``test``, ...), built once per process;
    it and its subcommands' parsers raise ``ArgumentError`` instead of exiting."""
    cli = _ParserOnly(
        args=[], parser_kwargs={"exit_on_error": False}, load_from_checkpoint_support=False
    )
    return cli.parser


@functools.cache
def _default_leaves(subcommand: str) -> dict[str, Any]:
    """The subcommand's defaults as :func:`~.options.leaves` (computed once per process): what the
    command line resolves the subcommand alone to."""
    return leaves(_parser().parse_args([subcommand])[subcommand])


class Built(NamedTuple):
    """A run's Lightning module and data module, untrained, and the options they came from."""

    module: Any
    datamodule: Any
    config: Namespace


class RunConfig(tuple):
    """A run's resolved options, as a value: the ``train_cls.py`` argument list (subcommand
    first), which it reads as (logs, markers), and the namespace its one parse gave
    (``namespace``: ``{subcommand, <subcommand>: options}``). Frozen, and it pickles with its
    namespace, so a sweep's driver resolves a run once and its workers and
    :func:`visattn.training.cli.run` take it as it is.

    - :meth:`parse`: the one parse (config files with their ``_base_`` pieces, then the flags);
    - :meth:`but`: the same run with options set, without parsing (a resume, a test run);
    - :attr:`settings`, :meth:`canonical_dump`, :meth:`describe_changes`: the canonical form
      and what differs between two runs;
    - :meth:`build`: the module and data module, untrained, nothing written.

    A resumed fit's checkpoint record is the one source applied later, by the command line
    (:func:`restore_recorded`), where the checkpoint is read.
    """

    namespace: Namespace

    def __new__(cls, args: Sequence[str], namespace: Namespace) -> RunConfig:
        self = super().__new__(cls, tuple(args))
        object.__setattr__(self, "namespace", namespace)
        return self

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError(f"RunConfig is frozen: use .but() for a run with {name} changed")

    def __getnewargs__(self) -> tuple[tuple[str, ...], Namespace]:  # type: ignore[override]
        return tuple(self), self.namespace

    @classmethod
    def parse(cls, args: Sequence[str]) -> RunConfig:
        """``args`` (``train_cls.py``'s, ``fit`` when no subcommand leads) resolved by the
        command line's own parser, once: base configs and their ``_base_`` pieces, then the
        overrides. A :class:`RunConfig` is returned as it is.

        Raises:
            jsonargparse.ArgumentError: an unknown key, a wrong type, a file that is not there.
        """
        if isinstance(args, RunConfig):
            return args
        items = list(args)
        if not items or items[0] not in SUBCOMMANDS:
            items = ["fit", *items]
        return cls(items, parse(_parser(), items))

    @property
    def subcommand(self) -> str:
        return str(self.namespace.subcommand)

    @property
    def config(self) -> Namespace:
        """The subcommand's options."""
        return self.namespace[self.subcommand]

    def but(
        self, subcommand: str | None = None, options: Mapping[str, Any] | None = None
    ) -> RunConfig:
        """The same run as ``subcommand`` (default: this one) with ``options`` (dotted keys:
        ``{"ckpt_path": "last"}``) set, in the arguments (an existing ``--key=`` replaced) and in
        a copy of the namespace (whole, as a parse of the new arguments gives it, when the
        subcommand stays); nothing is parsed."""
        sub = subcommand or self.subcommand
        namespace = (
            copy.deepcopy(self.namespace)
            if sub == self.subcommand
            else Namespace({"subcommand": sub, sub: copy.deepcopy(self.config)})
        )
        config = namespace[sub]
        args = [sub, *self[1:]]
        for key, value in (options or {}).items():
            config[key] = value
            flag = to_flag(key, value)
            at = [i for i, a in enumerate(args) if a.startswith(f"--{key}=")]
            if at:
                args[at[-1]] = flag
            else:
                args.append(flag)
        return RunConfig(args, namespace)

    @functools.cached_property
    def settings(self) -> dict[str, str]:
        """What decides the run's result (:func:`settings` of its options)."""
        return settings(self.config, self.subcommand)

    @property
    def spec(self) -> RunSpec:
        """What the run computes, as a :class:`RunSpec` (its :attr:`settings`, typed)."""
        return RunSpec.of(self.settings)

    def canonical_dump(self) -> str:
        """:attr:`settings` as YAML text (one ``key: JSON`` line each): equal options, equal
        bytes."""
        return "".join(f"{k}: {v}\n" for k, v in self.settings.items())

    def describe_changes(self, other: RunConfig) -> str:
        """``key: this -> other; ...`` for every setting that differs (see
        :func:`describe_changes`)."""
        return describe_changes(self.settings, other.settings)

    def build(self) -> Built:
        """The module and data module of the run, built by the command line's own parser from
        its options without a Trainer, a seed, a folder or a file written; the weights are
        untrained."""
        namespace = copy.deepcopy(self.namespace)
        sub = self.subcommand
        resolve_eval_transform(namespace[sub])
        parser = _parser()
        instantiate = getattr(parser, "instantiate", None) or parser.instantiate_classes  # renamed
        init = instantiate(namespace)[sub]  # in jsonargparse 4.49
        return Built(init.model, init.data, namespace[sub])


#: a section of a :class:`RunSpec`: ``(dotted key, JSON)`` pairs, sorted
Section = tuple[tuple[str, str], ...]


@dataclass(frozen=True)
class RunSpec:
    """What a run computes, as an immutable value: its settings (:func:`settings`: the resolved
    options that differ from the defaults, placements in their normal form, without where files
    live or how the run executes) in typed sections.

    Two specs are equal when their canonical forms are: ``a != b`` is "the settings changed",
    and :meth:`changes` says how (``key: old -> new; ...``). A YAML file, the same options as
    flags and a sweep's ``set`` give equal specs; a spec travels as JSON (:meth:`to_json`).

    - ``model``: ``model.*``, the network with its placements, the optimizer and the schedule;
    - ``data``: ``data.*``; ``trainer``: ``trainer.*``; ``checkpoint``: ``checkpoint.*``;
    - ``other``: the rest (``seed_everything``, ``ckpt_path``).
    """

    model: Section = ()
    data: Section = ()
    trainer: Section = ()
    checkpoint: Section = ()
    other: Section = ()

    @classmethod
    def of(cls, flat: Mapping[str, str]) -> RunSpec:
        """The spec of settings ``flat`` (``{dotted key: JSON}``, a run's or a marker's), put in
        :func:`canonical_settings` form first."""
        sections: dict[str, list[tuple[str, str]]] = {f.name: [] for f in dataclasses.fields(cls)}
        for key, value in canonical_settings(flat).items():
            head = key.split(".")[0]
            sections[head if head in sections and head != "other" else "other"].append((key, value))
        return cls(**{name: tuple(pairs) for name, pairs in sections.items()})

    @classmethod
    def of_record(cls, record: Mapping[str, Any]) -> RunSpec:
        """The spec a marker or a run's start record was written with (an older visattn's
        record resolved as one config, :func:`changed_settings`).

        Raises:
            UntrustedClassError: the record names a class outside the trusted packages.
            ValueError, jsonargparse.ArgumentError: the record no longer resolves.
        """
        return cls.of(_settings_of_record(record))

    @functools.cached_property
    def settings(self) -> dict[str, str]:
        """The flat canonical form, ``{dotted key: JSON}``, sorted (computed once; equality
        and hashing use the sections alone)."""
        pairs = [pair for f in dataclasses.fields(self) for pair in getattr(self, f.name)]
        return dict(sorted(pairs))

    def value(self, key: str) -> Any:
        """The option ``key`` (dotted) as the run has it: its setting, else the default."""
        given = self.settings
        return json.loads(given[key]) if key in given else _default_leaves("fit").get(key)

    @property
    def seed(self) -> int | None:
        """``seed_everything``."""
        return self.value("seed_everything")

    @property
    def attention(self) -> list[dict[str, Any]]:
        """The placements, in their normal form (``[]``: the plain network)."""
        return self.value("model.attention") or []

    def changes(self, other: RunSpec) -> str:
        """``key: this -> other; ...`` for every setting that differs (``""``: equal)."""
        return describe_changes(self.settings, other.settings)

    def to_json(self) -> str:
        return json.dumps(self.settings, sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> RunSpec:
        return cls.of(json.loads(text))


# --------------------------------------------------------------------------- canonical form


def settings(config: Namespace, subcommand: str = "fit") -> dict[str, str]:
    """What decides a run's result: every resolved option of ``config`` (a subcommand's
    options) that differs from the parser's default (that subcommand's), as
    ``{dotted key: JSON}`` in :func:`canonical_settings` form: without :data:`LOCATION_KEYS`,
    :data:`EXECUTION_KEYS` and the config files' paths, the placements in their normal form.

    Options at their defaults are left out, so an option added to visattn later (at its
    default) keeps finished sweeps finished; a changed default is therefore not seen.
    """
    defaults = _default_leaves(subcommand)
    given = leaves(config)
    return canonical_settings(
        {
            k: to_json(v)
            for k, v in given.items()
            if k.split(".")[0] not in _NOT_OPTIONS and (k not in defaults or defaults[k] != v)
        }
    )


def execution_options(config: Namespace) -> dict[str, str]:
    """The values of :data:`EXECUTION_KEYS` in ``config`` (a subcommand's options), as JSON:
    how the run executed, recorded beside its settings."""
    given = leaves(config)
    return {k: to_json(given[k]) for k in sorted(EXECUTION_KEYS) if k in given}


def canonical_settings(flat: Mapping[str, str]) -> dict[str, str]:
    """Settings (``{dotted key: JSON}``, a run's or a marker's) in the one form they are
    compared in: sorted, without :data:`LOCATION_KEYS` and :data:`EXECUTION_KEYS`, and with
    ``model.attention`` (whole, or spread over ``model.attention.*`` keys) in its normal form
    (:func:`placement_normal_form`), so that spellings of one network compare equal. A
    placement that no longer resolves (a block removed) is kept as written."""
    kept = {k: v for k, v in flat.items() if k not in LOCATION_KEYS and k not in EXECUTION_KEYS}
    spread = {k: v for k, v in kept.items() if k == _ATTENTION or k.startswith(_ATTENTION + ".")}
    if spread:
        if _ATTENTION in spread:
            value = json.loads(spread[_ATTENTION])
        else:
            value = _nested({k[len(_ATTENTION) + 1 :]: v for k, v in spread.items()})
        try:
            normal = placement_normal_form(value)
        except (KeyError, TypeError, ValueError):
            normal = None
        if normal is not None:
            kept = {k: v for k, v in kept.items() if k not in spread}
            if normal:
                kept[_ATTENTION] = to_json(normal)
    return dict(sorted(kept.items()))


def _short(text: str, limit: int = 60) -> str:
    return text if len(text) <= limit else text[: limit - 3] + "..."


def describe_changes(old: Mapping[str, str], new: Mapping[str, str]) -> str:
    """``key: old -> new; ...`` for every key whose value differs, as :func:`settings` of two
    runs (a key absent from one is at its default there, shown as the default's value)."""
    defaults = _default_leaves("fit")
    parts = []
    for key in dict.fromkeys([*old, *new]):
        unset = to_json(defaults[key]) if key in defaults else "(unset)"
        a, b = old.get(key, unset), new.get(key, unset)
        if a != b:
            parts.append(f"{key}: {_short(a)} -> {_short(b)}")
    return "; ".join(parts)


def _nested(flat: Mapping[str, str]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, text in flat.items():
        *parents, last = key.split(".")
        node = out
        for p in parents:
            node = node.setdefault(p, {})
        node[last] = json.loads(text)
    return out


def _settings_of_record(record: Mapping[str, Any]) -> dict[str, str]:
    """The :func:`settings` a marker (or a run's start record) stands for. A record of
    :data:`SETTINGS_FORMAT` holds them; an older one holds the options as they were set (not
    resolved, defaults included), which are resolved here as one config."""
    recorded = {k: v for k, v in (record.get("settings") or {}).items() if k not in LOCATION_KEYS}
    if record.get("settings_format") == SETTINGS_FORMAT:
        return canonical_settings(recorded)
    if any(k.startswith("config[") for k in recorded):
        raise ValueError("it was written by an older visattn that recorded config file names")
    nested = _nested(recorded)
    check_recorded_classes(nested, "its record")  # before the parser imports any
    config = yaml.safe_dump(nested, sort_keys=True)
    return RunConfig.parse(["fit", "--config", config] if recorded else ["fit"]).settings


def changed_settings(record: Mapping[str, Any], current: Mapping[str, str]) -> str:
    """What differs between the settings the marker or start record ``record`` was written with
    and ``current`` (``key: old -> new; ...``); ``""`` when nothing does: their
    :class:`RunSpec` compared with ``!=``."""
    try:
        old = RunSpec.of_record(record)
    except UntrustedClassError:
        raise  # a record that would import foreign code stops the sweep, nothing is replaced
    except Exception as exc:  # an option that no longer exists, a record from long ago
        return f"its recorded settings no longer resolve ({str(exc).splitlines()[0]})"
    new = RunSpec.of(current)
    return old.changes(new) if old != new else ""
