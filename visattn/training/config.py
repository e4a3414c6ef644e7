"""The one place a run's options are resolved, and the forms a resolved run is compared in.

A run's options come from, in order (a later source wins):

1. config files (``--config``), each ``_base_`` piece first (:func:`expand_config_args`);
2. a sweep's ``set`` and its variant's ``set`` (as ``--key=value`` flags);
3. command-line flags;
4. for a resumed fit, the model and data options recorded in its checkpoint
   (:func:`restore_recorded`).

:func:`resolve` turns sources 1-3 into one jsonargparse namespace with the command line's own
parser, parsing once; the result is a :class:`ResolvedArgs`, the argument list together with
its namespace, which a sweep worker and :func:`visattn.training.cli.run` take as it is (no
second parse). :func:`settings` is the resolved run's canonical form: every option that
differs from the parser's default, as ``{dotted key: JSON}``, leaving out the options that only
say where files live (:data:`LOCATION_KEYS`). Any two routes to the same options (a YAML file,
the same values as flags, a sweep's ``set``) give the same settings and the same
:func:`canonical_dump`; a sweep's completion marker records them, and :func:`same_settings`
compares a marker with a run, recognising the markers written before this module existed.
"""

from __future__ import annotations

import copy
import functools
import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml
from jsonargparse import ArgumentParser, Namespace

from ..models.placement import placements_to_config

__all__ = [
    "FREE_ON_RESUME",
    "LOCATION_KEYS",
    "NETWORK_OPTIONS",
    "SETTINGS_FORMAT",
    "ResolvedArgs",
    "canonical_dump",
    "describe_changes",
    "expand_config_args",
    "parse",
    "resolve",
    "restore_recorded",
    "same_settings",
    "settings",
]

SUBCOMMANDS = ("fit", "test", "validate")

#: Options that say where files live, not what a run computes: a sweep moved to another machine
#: (its data elsewhere, the repository cloned into another folder) keeps its finished runs.
LOCATION_KEYS = ("trainer.default_root_dir", "data.root")
#: parser bookkeeping, not options: the paths of the ``--config`` files (their content is in
#: the options they set)
_NOT_OPTIONS = ("config",)

#: What a marker's ``settings_format`` says: 2, :func:`settings` (every non-default resolved
#: option). Markers without it were written before (the options as set, unresolved).
SETTINGS_FORMAT = 2

#: model options that define the network: a resumed run must have the recorded ones
NETWORK_OPTIONS = ("model", "attention", "model_kwargs")
#: options that may change when a run resumes (where the data is, how the run executes)
FREE_ON_RESUME = {
    "model": frozenset({"num_classes", "compile", "channels_last", "check_finite_every"}),
    "data": frozenset({"root", "download", "verify", "verify_images", "num_workers", "pin_memory"}),
}
# (section of the config, key of the recorded hyper-parameters in a Lightning checkpoint)
_SECTIONS = (("model", "hyper_parameters"), ("data", "datamodule_hyper_parameters"))


# --------------------------------------------------------------------------- config files


def _is_file(item: str) -> bool:
    try:
        return Path(item).is_file()
    except OSError:  # a YAML string too long for a file name
        return False


def _expand_config(path: str, seen: tuple[str, ...] = ()) -> list[str]:
    """``--config`` values for ``path``: its ``_base_`` pieces (recursively) then the file's own
    content (as a YAML string when ``_base_`` had to be removed)."""
    file = Path(path)
    if not _is_file(path):
        return [path]  # a YAML string or a missing file: jsonargparse reports it
    key = str(file.resolve())
    if key in seen:
        raise ValueError(f"config {path}: _base_ cycle through {' -> '.join(seen)}")
    try:
        with open(file) as f:  # a file object: YAML's error marks then name the file
            content = yaml.safe_load(f) or {}
    except yaml.YAMLError as e:
        raise ValueError(f"config {path}: not valid YAML: {e}") from e
    if not isinstance(content, dict) or "_base_" not in content:
        return [path]
    bases = content.pop("_base_")
    bases = [bases] if isinstance(bases, str) else list(bases or [])
    out: list[str] = []
    for base in bases:
        base_path = file.parent / base
        if not base_path.is_file():
            raise FileNotFoundError(f"config {path}: _base_ entry {base!r} not found ({base_path})")
        out += _expand_config(str(base_path), (*seen, key))
    if content:
        out.append(yaml.safe_dump(content, sort_keys=False))
    return out


_RESET_ATTENTION = "--model.attention=null"


def _sets_attention(item: str) -> bool:
    """True if the ``--config`` value (a file or a YAML string) sets ``model.attention``."""
    try:
        content = yaml.safe_load(Path(item).read_text() if _is_file(item) else item)
    except (OSError, ValueError, yaml.YAMLError):
        return False
    model = content.get("model") if isinstance(content, dict) else None
    return isinstance(model, dict) and "attention" in model


def expand_config_args(args: Sequence[str]) -> list[str]:
    """Replace every ``--config FILE`` whose file has ``_base_`` by one ``--config`` per piece,
    and make every later ``model.attention`` replace the earlier one.

    jsonargparse merges a placement given over another field by field (a placement is a
    dataclass), so ``quickstart.yaml`` (cbam) followed by ``--model.attention '{name: eca}'``
    would build eca with cbam's leftover fields. A reset to null before each whole-placement
    value (a config piece that sets it, or ``--model.attention VALUE``) makes the last one win
    whole; dotted overrides such as ``--model.attention.args.reduction 8`` still refine it.
    """
    out: list[str] = []
    i = 0
    while i < len(args):
        arg = args[i]
        if arg == "--config" and i + 1 < len(args):
            value, i = args[i + 1], i + 2
        elif arg.startswith("--config="):
            value, i = arg.split("=", 1)[1], i + 1
        else:
            if arg == "--model.attention" or arg.startswith("--model.attention="):
                out.append(_RESET_ATTENTION)
            out.append(arg)
            i += 1
            continue
        for item in _expand_config(value):
            out += [_RESET_ATTENTION] if _sets_attention(item) else []
            out += ["--config", item]
    return out


# --------------------------------------------------------------------------- resolving


def parse(parser: ArgumentParser, args: Sequence[str]) -> Namespace:
    """``args`` (``train_cls.py``'s, subcommand first where the parser has subcommands) parsed
    by ``parser`` after :func:`expand_config_args`: the CLI's one parse."""
    return parser.parse_args(expand_config_args(list(args)))


class _ParserBuilt(Exception):
    def __init__(self, parser: ArgumentParser) -> None:
        super().__init__("parser built")
        self.parser = parser


@functools.cache
def _parser() -> ArgumentParser:
    """``train_cls.py``'s parser (subcommands ``fit``, ``test``, ...), built once per process."""
    from .cli import VisattnCLI  # the CLI class owns the parser's contents

    class _BuildOnly(VisattnCLI):
        def parse_arguments(self, parser: Any, args: Any) -> None:
            raise _ParserBuilt(parser)

    try:
        _BuildOnly(args=[], parser_kwargs={"exit_on_error": False})
    except _ParserBuilt as built:
        return built.parser
    raise RuntimeError("VisattnCLI built no parser")  # pragma: no cover


@functools.cache
def _defaults(subcommand: str) -> Namespace:
    # jsonargparse keeps the subcommands' parsers here
    parser = _parser()._subcommands_action._name_parser_map[subcommand]
    return parser.get_defaults()


class ResolvedArgs(tuple):
    """A ``train_cls.py`` argument list (subcommand first) and the namespace it resolves to
    (``namespace``: ``{subcommand, <subcommand>: options}``), so that what resolved it once
    need not parse it again: :func:`visattn.training.cli.run` and the sweep's workers take it
    as it is. It reads as the argument tuple (logs, markers) and pickles with its namespace.
    """

    namespace: Namespace

    def __new__(cls, args: Sequence[str], namespace: Namespace) -> ResolvedArgs:
        self = super().__new__(cls, tuple(args))
        self.namespace = namespace
        return self

    def __getnewargs__(self) -> tuple[tuple[str, ...], Namespace]:  # type: ignore[override]
        return tuple(self), self.namespace

    @property
    def subcommand(self) -> str:
        return str(self.namespace.subcommand)

    @property
    def config(self) -> Namespace:
        """The subcommand's options."""
        return self.namespace[self.subcommand]

    def but(self, subcommand: str | None = None, **options: Any) -> ResolvedArgs:
        """The same run as ``subcommand`` (default: this one) with ``options`` (dotted keys
        spelt with ``__`` for ``.``: ``trainer__default_root_dir=...``) set, in the arguments
        (an existing ``--key=`` replaced) and in a copy of the namespace; nothing is parsed."""
        sub = subcommand or self.subcommand
        config = copy.deepcopy(self.config)
        if sub == "test" and "verbose" not in config:
            config.verbose = True  # Trainer.test's own default
        args = [sub, *self[1:]]
        for name, value in options.items():
            key = name.replace("__", ".")
            config[key] = value
            flag = f"--{key}={value}"
            at = [i for i, a in enumerate(args) if a.startswith(f"--{key}=")]
            if at:
                args[at[-1]] = flag
            else:
                args.append(flag)
        return ResolvedArgs(args, Namespace({"subcommand": sub, sub: config}))


def resolve(args: Sequence[str]) -> ResolvedArgs:
    """``args`` (``train_cls.py``'s, ``fit`` when no subcommand leads) resolved by the command
    line's own parser, once: base configs and their ``_base_`` pieces, then the overrides.

    Raises:
        jsonargparse.ArgumentError: an unknown key, a wrong type, a file that is not there.
    """
    if isinstance(args, ResolvedArgs):
        return args
    items = list(args)
    if not items or items[0] not in SUBCOMMANDS:
        items = ["fit", *items]
    return ResolvedArgs(items, parse(_parser(), items))


# --------------------------------------------------------------------------- canonical form


def _plain(value: Any) -> Any:
    """A config value as plain data: namespaces as dicts, tuples as lists."""
    if isinstance(value, Namespace):
        value = value.as_dict()
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value


def _leaves(value: Any, prefix: str = "") -> dict[str, Any]:
    """``{dotted key: plain value}`` of every leaf (a non-empty mapping is spread)."""
    value = _plain(value)
    if isinstance(value, dict) and value:
        out: dict[str, Any] = {}
        for k, v in value.items():
            out.update(_leaves(v, f"{prefix}.{k}" if prefix else k))
        return out
    return {prefix: value}


def _json(value: Any) -> str:
    return json.dumps(value, sort_keys=True, default=str)


def settings(resolved: ResolvedArgs | Namespace) -> dict[str, str]:
    """What decides a run's result: every resolved option (a ``fit`` namespace, or a
    :class:`ResolvedArgs`) that differs from the parser's default (its subcommand's), as
    ``{dotted key: JSON}`` sorted by key, without :data:`LOCATION_KEYS` and the config files'
    paths.

    Options at their defaults are left out, so an option added to visattn later (at its
    default) keeps finished sweeps finished; a changed default is therefore not seen.
    """
    is_args = isinstance(resolved, ResolvedArgs)
    config = resolved.config if is_args else resolved
    defaults = _leaves(_defaults(resolved.subcommand if is_args else "fit"))
    leaves = _leaves(config)
    return {
        k: _json(v)
        for k, v in sorted(leaves.items())
        if k not in LOCATION_KEYS
        and k.split(".")[0] not in _NOT_OPTIONS
        and (k not in defaults or defaults[k] != v)
    }


def canonical_dump(resolved: ResolvedArgs | Namespace) -> str:
    """:func:`settings` as YAML text (one ``key: JSON`` line each): equal options, equal bytes."""
    return "".join(f"{k}: {v}\n" for k, v in settings(resolved).items())


def _short(text: str, limit: int = 60) -> str:
    return text if len(text) <= limit else text[: limit - 3] + "..."


def describe_changes(old: Mapping[str, str], new: Mapping[str, str]) -> str:
    """``key: old -> new; ...`` for every key whose value differs, as :func:`settings` of two
    runs (a key absent from one is at its default there, shown as the default's value)."""
    defaults = {k: _json(v) for k, v in _leaves(_defaults("fit")).items()}
    parts = []
    for key in dict.fromkeys([*old, *new]):
        unset = defaults.get(key, "(unset)")
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
        return recorded
    if any(k.startswith("config[") for k in recorded):
        raise ValueError("it was written by an older visattn that recorded config file names")
    config = yaml.safe_dump(_nested(recorded), sort_keys=True)
    return settings(resolve(["fit", "--config", config]) if recorded else resolve(["fit"]))


def same_settings(record: Mapping[str, Any], current: Mapping[str, str]) -> str:
    """``""`` when the marker or start record ``record`` was written for a run with the
    settings ``current``, else what differs (for the sweep's message)."""
    try:
        old = _settings_of_record(record)
    except Exception as exc:  # an option that no longer exists, a record from long ago
        return f"its recorded settings no longer resolve ({str(exc).splitlines()[0]})"
    return describe_changes(old, current)


# --------------------------------------------------------------------------- a checkpoint's record


def _recorded_value(key: str, value: Any) -> str:
    plain = _plain(value)
    return _json(placements_to_config(plain) if key == "attention" else plain)


def restore_recorded(config: Namespace, ckpt: dict[str, Any], ckpt_path: str) -> list[str]:
    """The last source of a resumed fit: set the ``model.*`` and ``data.*`` options of
    ``config`` (the ``fit`` subcommand's) that differ from those recorded in ``ckpt`` back to
    the recorded values, except those in :data:`FREE_ON_RESUME`; returns one line per option
    set back (see :mod:`visattn.training.resume`).

    Raises:
        ValueError: a network option (:data:`NETWORK_OPTIONS`) differs: the checkpoint's
            weights belong to another network.
    """
    kept: list[str] = []
    for section, saved_key in _SECTIONS:
        recorded = ckpt.get(saved_key) or {}
        given = config.get(section)
        if given is None:
            continue
        for key, old in recorded.items():
            if key in FREE_ON_RESUME[section] or key not in given:
                continue
            if _recorded_value(key, given[key]) == _recorded_value(key, old):
                continue
            option = f"--{section}.{key}"
            if section == "model" and key in NETWORK_OPTIONS:
                raise ValueError(
                    f"--ckpt_path {ckpt_path} holds a run of another network: {option} is "
                    f"{_plain(given[key])!r}, the run was trained with {old!r}; resume with the "
                    "run's options, or start a new run (without --ckpt_path)"
                )
            kept.append(f"{option} {_plain(given[key])!r} (the run keeps {old!r})")
            given[key] = old
    return kept
