"""The sources of a run's options and their merge rules, below the command line: config files
with ``_base_`` pieces (:func:`expand_config_args`), one parse (:func:`parse`), options as
flags (:func:`to_flag`) and a resumed fit's checkpoint record (:func:`restore_recorded`).
:class:`visattn.training.config.RunConfig` resolves a run with them."""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml
from jsonargparse import ArgumentError, ArgumentParser, Namespace

from .._registry import close_matches
from .._values import OptionError, first_line
from ..blocks.registry import block_info
from ..data.sources import get_source
from ..files import inheritance_chain, load_yaml
from ..models.placement import normalize_placements, placements_to_config

__all__ = [
    "FREE_ON_RESUME",
    "NETWORK_OPTIONS",
    "expand_config_args",
    "parse",
    "plain",
    "restore_recorded",
    "to_flag",
    "to_json",
]

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


def _read_config(path: Path) -> Any:
    """A config file's content, a mapping. A file that is not YAML, or holds something else
    than a mapping, is refused in one line naming the file, the line and the problem, never
    quoting its content (``_base_: [/etc/passwd]``).

    Raises:
        OptionError: as above.
    """
    try:
        with open(path) as f:  # a file object: YAML's error marks then name the file
            content = load_yaml(f, f"config {path}") or {}
    except yaml.MarkedYAMLError as e:
        mark = e.problem_mark or e.context_mark
        where = f", line {mark.line + 1}" if mark is not None else ""
        raise OptionError(f"config {path}{where}: not valid YAML ({e.problem})") from e
    except yaml.YAMLError as e:  # visattn's own refusals (aliases expanding past a bound)
        raise OptionError(first_line(e).split(": ", 1)[-1]) from e
    except UnicodeDecodeError as e:
        raise OptionError(f"config {path}: not a YAML text file ({e.reason})") from e
    if not isinstance(content, dict):
        raise OptionError(
            f"config {path}: holds a {type(content).__name__}, not a mapping of options "
            "(model:, data:, trainer:, ...)"
        )
    return content


def _expand_config(path: str) -> list[str]:
    """``--config`` values for ``path``: its ``_base_`` pieces (the one inheritance rule,
    :func:`~visattn.files.inheritance_chain`), then the file's own content, each read by
    visattn's one YAML reader (:func:`~visattn.files.load_yaml`: YAML 1.2's booleans, no octal,
    no repeated key) and given to jsonargparse as a YAML string without ``_base_``, so a plain
    file and one with ``_base_`` read the same (``verify_images: off`` stays the word)."""
    if not _is_file(path):
        return [path]  # a YAML string or a missing file: jsonargparse reports it
    out = []
    try:
        chain = list(inheritance_chain(path, "_base_", _read_config, what="config"))
    except OptionError:
        raise
    except ValueError as e:  # a cycle, a malformed _base_, a folder, a chain too deep
        raise OptionError(first_line(e).split(": ", 1)[1]) from e
    for piece in chain:  # every file as visattn's one YAML reader read it (files.load_yaml)
        if piece.content:
            out.append(yaml.safe_dump(piece.content, sort_keys=False))
    return out


_RESET_ATTENTION = "--model.attention=null"


def _sets_attention(item: str) -> bool:
    """True if the ``--config`` value (a file or a YAML string) sets ``model.attention``."""
    try:
        content = load_yaml(Path(item).read_text() if _is_file(item) else item, "--config")
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


# --------------------------------------------------------------------------- one parse


def parse(
    parser: ArgumentParser,
    args: Sequence[str],
    *,
    subcommands: Mapping[str, ArgumentParser] | None = None,
    exit_on_error: bool = False,
) -> Namespace:
    """``args`` (``train_cls.py``'s, subcommand first where the parser has subcommands) parsed
    by ``parser`` after :func:`expand_config_args`: the CLI's one parse. An unrecognized option
    gets the closest known one named (``--model.atention``: did you mean ``--model.attention``?),
    then ``ArgumentError`` is raised, or with ``exit_on_error`` the failing subcommand's parser
    (from ``subcommands``, by name) exits with its usage and tip, as argparse does.

    ``parser`` and its subcommands' parsers must raise rather than exit
    (``exit_on_error=False``, as :class:`~visattn.training.cli.VisattnCLI` builds them all)."""
    items = expand_config_args(list(args))
    try:
        return parser.parse_args(items)
    except ArgumentError as e:
        message = _linked_option(str(e)) or str(e) + _close_options(parser, items, str(e))
        if not exit_on_error:
            raise ArgumentError(None, message) from e
        failed = (subcommands or {}).get(items[0], parser) if items else parser
        failed.exit_on_error = True  # its usage and tip, then exit code 2
        failed.error(message, e)
        raise  # pragma: no cover (error exits)


def _linked_option(message: str) -> str | None:
    """A clear message for jsonargparse's about an option given that a link sets (``argument
    data.num_classes --> model.num_classes: int | None is not callable``); None for others."""
    link = re.match(r"argument (\S+) --> (\S+): ", message)
    if link is None:
        return None
    source, target = link.groups()
    return (
        f"{target} is not an option of its own: the command line sets it from {source}. Give "
        f"--{source} (or {source} in a config file) instead of --{target}"
    )


def _close_options(parser: ArgumentParser, items: Sequence[str], message: str) -> str:
    """``"; --model.atention: did you mean --model.attention?"`` for each option of an
    "unrecognized arguments" message that is close to one the parser (its subcommand's, where
    ``items`` names one) knows; ``""`` otherwise."""
    if not message.startswith("unrecognized arguments:"):
        return ""
    flags = [t.split("=")[0] for t in message.partition(":")[2].split() if t.startswith("--")]
    sub = items[0] if items and not items[0].startswith("-") else None
    try:
        defaults = parser.parse_args([sub] if sub else [])
    except ArgumentError:  # a required option: no defaults to compare with
        return ""
    known = [f"--{k}" for k in leaves(defaults[sub] if sub else defaults)]
    hints = [
        f"{flag}: did you mean {close[0]}?"
        for flag in flags
        if (close := close_matches(flag, known, n=1))
    ]
    return "".join(f"; {h}" for h in hints)


def leaves(value: Any, prefix: str = "") -> dict[str, Any]:
    """``{dotted key: plain value}`` of every leaf (a non-empty mapping is spread)."""
    value = plain(value)
    if isinstance(value, dict) and value:
        out: dict[str, Any] = {}
        for k, v in value.items():
            out.update(leaves(v, f"{prefix}.{k}" if prefix else k))
        return out
    return {prefix: value}


def plain(value: Any) -> Any:
    """A config value as plain data: namespaces as dicts, tuples as lists."""
    if isinstance(value, Namespace):
        value = value.as_dict()
    if isinstance(value, Mapping):
        return {str(k): plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [plain(v) for v in value]
    return value


def to_flag(key: str, value: Any) -> str:
    """``--key=value`` as the command line reads it back: a string as written (LightningCLI takes
    a ``str`` option verbatim, so JSON's quotes would stay in it), anything else (numbers,
    booleans, ``null``, lists, mappings) JSON-encoded, which its YAML parser reads unchanged.

    Raises:
        ValueError: a value that is not JSON/YAML data.
    """
    if isinstance(value, str):
        return f"--{key}={value}"
    try:
        return f"--{key}={json.dumps(value, ensure_ascii=False)}"
    except TypeError as e:
        raise ValueError(f"override {key}: value {value!r} is not JSON/YAML data ({e})") from e


def to_json(value: Any) -> str:
    return json.dumps(value, sort_keys=True, default=str)


# --------------------------------------------------------------------------- a checkpoint's record


def _recorded_value(key: str, value: Any) -> str:
    data = plain(value)
    return to_json(placements_to_config(data) if key == "attention" else data)


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
        free = FREE_ON_RESUME[section] | _unread(section, recorded)
        for key, old in recorded.items():
            if key in free or key not in given:
                continue
            if _recorded_value(key, given[key]) == _recorded_value(key, old):
                continue
            option = f"--{section}.{key}"
            if section == "model" and key in NETWORK_OPTIONS:
                raise ValueError(
                    f"--ckpt_path {ckpt_path} holds a run of another network: {option} is "
                    f"{plain(given[key])!r}, the run was trained with {old!r}; resume with the "
                    "run's options, or start a new run (without --ckpt_path)"
                )
            kept.append(f"{option} {plain(given[key])!r} (the run keeps {old!r})")
            given[key] = old
    return kept


def _unread(section: str, recorded: Mapping[str, Any]) -> frozenset[str]:
    """The recorded data set's unread options: the data module dropped them when the run
    started, so a value given for one (a quickstart base's ``target_size`` under an image
    folder) is no change the user made."""
    dataset = recorded.get("dataset") if section == "data" else None
    if not isinstance(dataset, str):
        return frozenset()
    try:
        return get_source(dataset).unread_options
    except ValueError:  # a data set not registered in this process: compare everything
        return frozenset()


def placement_normal_form(value: Any) -> list[dict[str, Any]]:
    """``value`` (a block name, a placement mapping, a list of them, ``None``) as a list of
    placements with every key at its default left out, block options at the block's defaults
    included: ``se``, ``{name: se}``, ``[{name: se}]``, ``{name: se, position: standard}`` and
    ``{name: se, args: {reduction: 16}}`` are all ``[{"name": "se"}]``."""
    blank = {
        "args": {},
        "stages": "all",
        "blocks": "all",
        "position": "standard",
        "init": "default",
    }
    out = []
    for placement in normalize_placements(value):
        data = placement.to_dict()
        defaults = block_info(placement.name).defaults
        data["args"] = {
            k: v
            for k, v in data["args"].items()
            if k not in defaults or to_json(defaults[k]) != to_json(v)
        }
        data = {
            k: v
            for k, v in data.items()
            if k == "name"
            or (v is not None and (k not in blank or to_json(v) != to_json(blank[k])))
        }
        out.append(data)
    return out
