"""Files every run and sweep writes or checks: atomic writes, ``metrics.csv``, digests.

* :func:`atomic_write_bytes` / :func:`atomic_write_text`: readers see the old file or the new
  one, never a partial one (temporary file in the same folder, fsync, ``os.replace``).
* :func:`read_metrics_csv` / :func:`read_metric_curve`: the per-epoch ``metrics.csv`` every run
  writes (``visattn.training.callbacks.EpochMetricsCSV``).
* :func:`file_digest`: size and SHA-256 of a file (checkpoint integrity in sweep markers).
* :func:`load_yaml`: YAML as configs and sweeps are read: safe types only, a repeated key
  refused (a second ``model:`` block would replace the first), and anchors that expand to more
  than :data:`MAX_YAML_NODES` nodes refused (a "billion laughs" file).
* :func:`inheritance_chain`: the one inheritance rule of YAML files, a training config's
  ``_base_`` and a sweep's ``extends``: parents first, one cycle check, one depth bound.

Nothing here needs an optional extra (no Lightning), so sweep files and reports can be read
without the ``train`` extra. Loading a trained run is :func:`visattn.training.load.load_run`.
"""

from __future__ import annotations

import csv
import hashlib
import os
import re
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

__all__ = [
    "MAX_YAML_NODES",
    "atomic_write_bytes",
    "atomic_write_text",
    "file_digest",
    "load_yaml",
    "read_metric_curve",
    "read_metrics_csv",
]


def _umask() -> int:
    """The process's umask: from ``/proc/self/status`` where Linux gives it (reading it with
    ``os.umask`` means setting it for a moment, which other threads would see)."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("Umask:"):
                return int(line.split()[1], 8)
    except (OSError, ValueError):
        pass
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def _mode_for(path: Path) -> int:
    """The permissions a plain ``open(path, "w")`` would give: the existing file's, or 0666
    less the process's umask."""
    try:
        return path.stat().st_mode & 0o777
    except FileNotFoundError:
        return 0o666 & ~_umask()


def atomic_write_bytes(path: str | os.PathLike, data: bytes) -> None:
    """Write ``data`` to ``path`` so that readers see either the old or the new file, never a
    partial one: a temporary file in the same folder, flushed and fsynced, then ``os.replace``.
    An interruption (even ``KeyboardInterrupt``) leaves the old file and no temporary behind.
    The file gets the permissions ``open`` would give it (its old ones, or the umask's)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, _mode_for(path))  # mkstemp's 0600 would hide results from other users
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def atomic_write_text(path: str | os.PathLike, text: str) -> None:
    """:func:`atomic_write_bytes` for UTF-8 text."""
    atomic_write_bytes(path, text.encode("utf-8"))


def read_metrics_csv(path: str | os.PathLike) -> list[dict[str, Any]]:
    """Rows of a ``metrics.csv`` as dicts: ``epoch``/``step`` ints, other cells floats, empty
    cells ``None``."""
    with open(path, newline="", encoding="utf-8") as f:
        rows = list(csv.DictReader(f))
    out = []
    for row in rows:
        parsed: dict[str, Any] = {}
        for key, value in row.items():
            if value in ("", None):
                parsed[key] = None
            elif key in ("epoch", "step"):
                parsed[key] = int(float(value))
            else:
                parsed[key] = float(value)
        out.append(parsed)
    return out


def read_metric_curve(path: str | os.PathLike, key: str = "val/acc") -> dict[int, float]:
    """``{epoch: value}`` of ``key`` in a ``metrics.csv`` (the last non-empty value of each
    epoch). A missing file or column gives an empty dict."""
    if not Path(path).is_file():
        return {}
    curve: dict[int, float] = {}
    for row in read_metrics_csv(path):
        if row.get(key) is not None and row.get("epoch") is not None:
            curve[row["epoch"]] = row[key]
    return curve


def file_digest(path: str | os.PathLike, chunk: int = 1 << 20) -> dict[str, Any]:
    """``{"size": bytes, "sha256": hex digest}`` of a file."""
    h = hashlib.sha256()
    size = 0
    with open(path, "rb") as f:
        while block := f.read(chunk):
            h.update(block)
            size += len(block)
    return {"size": size, "sha256": h.hexdigest()}


#: the most nodes a YAML document may expand to once its aliases are followed (a config or a
#: sweep has hundreds; ten levels of ten-fold aliases have ten billion)
MAX_YAML_NODES = 1_000_000


_MERGE_TAG = "tag:yaml.org,2002:merge"
_BOOL_TAG = "tag:yaml.org,2002:bool"
_BOOL_1_2 = re.compile(r"^(?:true|True|TRUE|false|False|FALSE)$")


def _refuse_duplicate_keys(loader: Any, node: Any, deep: bool = False) -> Any:
    seen: dict[Any, Any] = {}
    for key_node, _ in node.value:
        if key_node.tag == _MERGE_TAG:  # `<<: *common`: its keys may be overridden here
            continue
        key = loader.construct_object(key_node, deep=True)
        try:
            hash(key)
        except TypeError:
            continue  # the constructor reports an unhashable key itself
        if key in seen:
            raise yaml.constructor.ConstructorError(
                "while reading a mapping",
                node.start_mark,
                f"the key {key!r} appears twice (first at line {seen[key].line + 1}): the "
                "second would silently replace the first",
                key_node.start_mark,
            )
        seen[key] = key_node.start_mark
    return yaml.SafeLoader.construct_mapping(loader, node, deep=deep)


def _expanded_nodes(node: Any, limit: int) -> int:
    """The number of nodes ``node`` stands for with every alias followed, stopping at ``limit``."""
    memo: dict[int, int] = {}

    def size(n: Any) -> int:
        if id(n) in memo:
            return memo[id(n)]
        memo[id(n)] = limit + 1  # a recursive alias counts as too large
        total = 1
        if isinstance(n.value, list):
            for item in n.value:
                parts = item if isinstance(item, tuple) else (item,)
                for part in parts:
                    total += size(part)
                    if total > limit:
                        break
        memo[id(n)] = min(total, limit + 1)
        return memo[id(n)]

    return size(node)


_LEADING_ZERO = re.compile(r"^[-+]?0[0-9_]+$")


def _refuse_octal(loader: Any, node: Any) -> Any:
    """YAML 1.1 reads ``010`` as octal 8 and YAML 1.2 as 10: refuse the ambiguity."""
    if _LEADING_ZERO.match(str(node.value)):
        raise yaml.constructor.ConstructorError(
            None,
            None,
            f"{node.value!r} is ambiguous: YAML 1.1 reads it as the octal number "
            f"{yaml.SafeLoader.construct_yaml_int(loader, node)}, YAML 1.2 as "
            f"{int(str(node.value).replace('_', ''))}; write it without the leading zero",
            node.start_mark,
        )
    return yaml.SafeLoader.construct_yaml_int(loader, node)


def load_yaml(stream: Any, source: str = "YAML") -> Any:
    """``yaml.safe_load(stream)`` with two refusals (``source`` names the input in them), and
    YAML 1.2's booleans (``true``/``false`` only: ``off`` and ``yes`` stay strings), and a
    number with a leading zero (``010``: octal 8 in YAML 1.1, 10 in 1.2) refused. Merge keys
    (``<<: *common``) work as in ``yaml.safe_load``.

    Raises:
        yaml.YAMLError: a key repeated in one mapping (a ``ConstructorError`` with both lines),
            a number with a leading zero,
            or a document whose aliases expand to more than :data:`MAX_YAML_NODES` nodes.
    """

    class StrictLoader(yaml.SafeLoader):
        pass

    # YAML 1.2's booleans: `off`, `no`, `on`, `yes` stay words (YAML 1.1 turned
    # `verify_images: off` into false)
    StrictLoader.yaml_implicit_resolvers = {
        first: [(tag, regexp) for tag, regexp in resolvers if tag != _BOOL_TAG]
        for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
    }
    StrictLoader.add_implicit_resolver(_BOOL_TAG, _BOOL_1_2, list("tTfF"))
    StrictLoader.add_constructor(
        yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _refuse_duplicate_keys
    )
    StrictLoader.add_constructor("tag:yaml.org,2002:int", _refuse_octal)
    loader = StrictLoader(stream)
    try:
        node = loader.get_single_node()
        if node is None:
            return None
        if _expanded_nodes(node, MAX_YAML_NODES) > MAX_YAML_NODES:
            raise yaml.YAMLError(
                f"{source}: its anchors and aliases expand to more than {MAX_YAML_NODES:,} "
                "nodes; write the values out, or use fewer nested aliases"
            )
        return loader.construct_document(node)
    finally:
        loader.dispose()


# --------------------------------------------------------------------------- inheritance

#: how deep a chain of inheriting files may nest (mmpretrain's configs go three or four deep)
MAX_INHERIT_DEPTH = 32


@dataclass(frozen=True)
class Inherited:
    """One file of an inheritance chain: its ``path``, its ``content`` without the inheriting
    key, and whether it named parents (``inherits``)."""

    path: Path
    content: Any
    inherits: bool


def inheritance_chain(
    path: str | os.PathLike,
    key: str,
    read: Callable[[Path], Any],
    *,
    what: str,
    single: bool = False,
) -> list[Inherited]:
    """The files ``path`` inherits from through ``key``, parents before children (depth first,
    in the order each file lists them), ending with ``path`` itself: the one inheritance rule of
    training configs (``_base_``: a file name or a list of them) and sweeps (``extends``: one
    file name, ``single``). Parent paths are relative to the file that names them; ``read``
    reads a file (its errors are its own). Each caller merges the chain its own way.

    Raises:
        ValueError: a cycle (naming the chain), a malformed entry, a folder, or a chain deeper
            than :data:`MAX_INHERIT_DEPTH`; ``what`` and the file start each message.
        FileNotFoundError: a parent that does not exist.
    """
    return _chain(Path(path), key, read, what, single, ())


def _chain(
    path: Path, key: str, read: Callable[[Path], Any], what: str, single: bool, seen: tuple
) -> list[Inherited]:
    resolved = path.resolve()
    if resolved in seen:
        chain = " -> ".join(str(p) for p in (*seen, resolved))
        raise ValueError(f"{what} {seen[0]}: {key} cycle: {chain}")
    content = read(path)
    if not isinstance(content, dict) or key not in content:
        return [Inherited(path, content, False)]
    content = dict(content)
    parents = content.pop(key)
    parents = [] if parents is None else [parents] if isinstance(parents, str) else parents
    if (
        not isinstance(parents, list)
        or not all(isinstance(p, str) and p for p in parents)
        or (single and len(parents) != 1)
    ):
        shown = repr(parents) if len(repr(parents)) <= 60 else repr(parents)[:57] + "..."
        kind = "a file name" if single else "a file name or a list of file names"
        raise ValueError(f"{what} {path}: {key} must be {kind} (relative to the file), got {shown}")
    if len(seen) >= MAX_INHERIT_DEPTH:
        raise ValueError(
            f"{what} {path}: {key} pieces nest more than {MAX_INHERIT_DEPTH} deep "
            f"({seen[0].name} -> ... -> {path.name}); flatten the chain"
        )
    out: list[Inherited] = []
    for parent in parents:
        parent_path = path.parent / parent
        if parent_path.is_dir():
            raise ValueError(f"{what} {path}: {key} entry {parent!r} is a folder ({parent_path})")
        if not parent_path.is_file():
            raise FileNotFoundError(
                f"{what} {path}: {key} {parent!r}, which does not exist ({parent_path}); give a "
                "path relative to this file's folder"
            )
        out += _chain(parent_path, key, read, what, single, (*seen, resolved))
    return [*out, Inherited(path, content, True)]
