"""What a sweep's runs resolve to before anything trains: up-front validation of every variant and
the width of equal-budget baselines.

* :func:`resolve_run` resolves one run's ``train_cls.py`` arguments with the command line's own
  parser (:meth:`visattn.training.config.RunConfig.parse`: base configs, ``_base_`` pieces,
  overrides; nothing is parsed when they come resolved) and builds its data module and Lightning
  module, so a misspelt key (``trainer.max_epocs``), a wrong type, an unknown placement key
  (``positon``) or a placement that matches nothing fails here, naming the variant.
* :func:`check_variants` does it for one run per variant, before the first run trains, and also
  runs each network once and loads the validation data, so that an image size too small for
  the model or the data source fails there too.
* :func:`match_width` widens a baseline ResNet (``model.model_kwargs.width``, which scales every
  stage's channels and the stem) until its parameters or multiply-accumulates are within
  :data:`TOLERANCE` of another variant's: an equal-budget baseline (sweep key ``match``).
"""

from __future__ import annotations

import contextlib
import json
import re
import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch

from .._values import first_line
from ..models import create_model
from ..profile import count_macs, count_params
from ..training import cli as run_cli
from ..training import config as run_config

__all__ = [
    "TOLERANCE",
    "BudgetMatch",
    "ResolvedRun",
    "build_run",
    "check_variants",
    "error_summary",
    "match_width",
    "resolve_run",
]

#: Largest relative difference accepted between a widened baseline and its target.
TOLERANCE = 0.02


@dataclass(frozen=True)
class ResolvedRun:
    """The model options and input shape one run trains with."""

    model: str
    num_classes: int
    attention: Any
    model_kwargs: dict[str, Any]
    input_shape: tuple[int, int, int]  # (C, H, W)
    params: int
    warnings: tuple[str, ...] = ()  # what would make the run learn nothing, said before it trains


def _check_fit(built: run_config.Built, checked_data: dict[str, BaseException | None]) -> None:
    """Run the network once on a batch of 2 at the data's image size (train mode, as the first
    step will) and load the validation split, unless a run with the same data options has
    already tried: an image size the model or the data source cannot take fails here. A load
    that failed fails again for the same options without a second try (a download that cannot
    reach the network is tried once per sweep, not once per variant)."""
    module, datamodule, config = built
    shape = getattr(datamodule, "image_shape", None) or module.net.default_input_size
    net = module.net.train()
    with torch.no_grad():
        net(torch.zeros(2, *(int(s) for s in shape)))
    data = config.get("data")
    key = json.dumps(data.as_dict() if hasattr(data, "as_dict") else data, default=str)
    if key in checked_data:
        failed = checked_data[key]
        if failed is not None:
            raise failed
        return
    try:
        datamodule.setup("validate")
    except Exception as exc:
        checked_data[key] = exc
        raise
    checked_data[key] = None


def build_run(args: Sequence[str]) -> tuple[Any, Any]:
    """``(ClassificationModule, VisattnDataModule)`` of a run, built from its options (resolved
    here unless they come as a :class:`~visattn.training.config.RunConfig`, then nothing is
    parsed) without training or writing anything; the module's weights are untrained."""
    module, datamodule, _ = run_config.RunConfig.parse(args).build()
    return module, datamodule


def resolve_run(
    args: Sequence[str], checked_data: dict[str, BaseException | None] | None = None
) -> ResolvedRun:
    """Resolve ``args`` (a ``train_cls.py fit ...`` argument list; nothing is parsed when they
    come resolved) and build its data module and network without training or writing anything.

    With ``checked_data`` (the data options already checked, with the error each raised or
    ``None``; updated here), also run the
    network once on a batch of 2 at the data's image size and load the validation split once
    per distinct data options, so that an image size too small for the model or the data
    source fails here rather than at the first step.

    Raises:
        Whatever the command line or the builders raise for bad input (``jsonargparse``'s
        ``ArgumentError`` for unknown keys and wrong types, ``ValueError``/``TypeError``/
        ``KeyError`` for bad placements and block options).
    """

    built = run_config.RunConfig.parse(args).build()
    if checked_data is not None:
        _check_fit(built, checked_data)
    module, datamodule, config = built
    hp = module.hparams
    shape = getattr(datamodule, "image_shape", None) or module.net.default_input_size
    max_epochs = config.get("trainer", {}).get("max_epochs")
    run_cli.check_max_epochs(max_epochs)  # refused here as train_cls.py refuses it
    said = []
    warmup = float(hp.get("warmup_epochs") or 0.0)
    if warmup > 0 and max_epochs is not None and 0 < max_epochs <= warmup:
        said.append(
            f"model.warmup_epochs {warmup:g} is not shorter than the run (trainer.max_epochs "
            f"{max_epochs}): the learning rate never reaches model.lr {hp['lr']}"
        )
    return ResolvedRun(
        warnings=tuple(said),
        model=hp["model"],
        num_classes=int(hp["num_classes"]),
        attention=hp.get("attention"),
        model_kwargs=dict(hp.get("model_kwargs") or {}),
        input_shape=tuple(int(s) for s in shape),
        params=count_params(module.net),
    )


_CAUSE = re.compile(r"not accepted|unknown|did you mean|must be|invalid", re.IGNORECASE)


def error_summary(exc: BaseException) -> str:
    """``Type: message``: the error's first line, plus the lines that name the cause when the
    first one only introduces them (jsonargparse: 'Parser key "model.attention":' ...
    'Option 'positon' is not accepted'); where visattn's own error is behind it (an unknown
    block, which jsonargparse reports as not validating against a Union), that error's first
    line, as ``train_cls.py`` prints it."""
    if (cause := run_cli.configuration_error(exc)) is not None:
        return first_line(cause)
    lines = [ln.strip() for ln in str(exc).splitlines() if ln.strip()]
    if not lines or not lines[0].endswith(":"):
        return first_line(exc)
    causes = [ln.lstrip("- ") for ln in lines[1:] if _CAUSE.search(ln)][:2]
    return " ".join([first_line(exc), *causes])


def check_variants(runs: Sequence[Any], what: str = "sweep") -> None:
    """Resolve the first run of every variant (``runs``: :class:`visattn.ablate.sweep.Run`),
    run its network once and load its validation data (:func:`resolve_run` with
    ``checked_data``).

    Raises:
        ValueError: one line per error, naming the variants that raise it (``every variant``
            where all do, such as a data folder they share).
    """
    seen: set[str] = set()
    checked_data: dict[str, BaseException | None] = {}
    failed: dict[str, list[str]] = {}
    for run in runs:
        if run.variant in seen:
            continue
        seen.add(run.variant)
        try:
            resolved = resolve_run(run.resolved, checked_data)
        except Exception as exc:  # every kind of bad input: report them all at once
            failed.setdefault(error_summary(exc), []).append(run.variant)
            continue
        for said in resolved.warnings:  # on the console, before anything trains
            warnings.warn(f"{what}: variant {run.variant!r}: {said}", UserWarning, stacklevel=2)
    if failed:
        count = sum(len(names) for names in failed.values())
        raise ValueError(
            f"{what}: {count} variant(s) would fail before training, nothing was run:\n"
            + "\n".join(f"  {_which(names, len(seen))}: {said}" for said, names in failed.items())
        )


def _which(names: Sequence[str], variants: int) -> str:
    """``every variant (N)`` where all ``variants`` share an error, else their names."""
    if len(names) > 1 and len(names) == variants:
        return f"every variant ({len(names)})"
    return f"variant{'s' if len(names) > 1 else ''} {', '.join(repr(n) for n in names)}"


@dataclass(frozen=True)
class BudgetMatch:
    """An equal-budget baseline: ``base`` widened by ``width`` has ``achieved`` params (or MACs)
    against ``target`` for variant ``of``."""

    quantity: str  # "params" or "macs"
    of: str
    base: str
    width: float
    achieved: int
    target: int
    model_kwargs: dict[str, Any]

    @property
    def relative(self) -> float:
        return self.achieved / self.target - 1.0

    def note(self, name: str) -> str:
        return (
            f"`{name}`: `{self.base}` widened x{self.width:g} (`model.model_kwargs.width`) to "
            f"{self.achieved:,} {self.quantity} against `{self.of}`'s {self.target:,} "
            f"({self.relative * 100:+.2f}%): an equal-budget baseline."
        )


def _measure(resolved: ResolvedRun, width: float | None, quantity: str) -> int:
    kwargs = dict(resolved.model_kwargs)
    if width is not None:
        kwargs["width"] = width
    # parameters are counted on the meta device: nothing allocated or initialised (the width
    # search builds networks up to 16 times as wide)
    device = torch.device("meta") if quantity == "params" else None
    with torch.no_grad(), torch.device(device) if device else contextlib.nullcontext():
        net = create_model(
            resolved.model,
            num_classes=resolved.num_classes,
            attention=resolved.attention,
            **kwargs,
        )
    if quantity == "params":
        return count_params(net)
    with torch.no_grad():
        return int(count_macs(net.eval(), (1, *resolved.input_shape)))


def match_width(
    base: ResolvedRun,
    target: ResolvedRun,
    quantity: str = "params",
    *,
    tolerance: float = TOLERANCE,
    names: tuple[str, str] = ("baseline", "variant"),
) -> tuple[float, int, int]:
    """The channel width multiplier of ``base`` whose ``quantity`` (``"params"`` or ``"macs"``)
    is closest to ``target``'s.

    The count grows with the width in steps (channels are rounded), so the search bisects on
    the width to 1e-4 between 1/8 and 16 and keeps the closer of the two widths around the
    target.

    Returns:
        ``(width, achieved, target)``.

    Raises:
        ValueError: ``quantity`` is unknown, the backbone has no ``width`` option, or no width
            comes within ``tolerance``.
    """
    if quantity not in ("params", "macs"):
        raise ValueError(f"match: quantity must be 'params' or 'macs', got {quantity!r}")
    goal = _measure(target, None, quantity)
    try:
        at = {1.0: _measure(base, 1.0, quantity)}
    except TypeError as e:
        raise ValueError(
            f"match: {names[0]}'s model {base.model!r} has no 'width' option to widen ({e}); "
            "use a ResNet backbone"
        ) from e

    def count(w: float) -> int:
        w = round(w, 4)
        if w not in at:
            at[w] = _measure(base, w, quantity)
        return at[w]

    lo, hi = 0.125, 16.0
    if count(lo) > goal or count(hi) < goal:
        raise ValueError(
            f"match: {names[1]}'s {quantity} ({goal:,}) are out of reach of {names[0]} widened "
            "between x0.125 and x16"
        )
    while hi - lo > 1e-4:  # invariant: count(lo) <= goal <= count(hi)
        mid = round((lo + hi) / 2, 4)
        if mid in (lo, hi):
            break
        if count(mid) < goal:
            lo = mid
        else:
            hi = mid
    width = min((lo, hi), key=lambda w: (abs(count(w) - goal), abs(w - 1.0)))
    achieved = count(width)
    if abs(achieved / goal - 1.0) > tolerance:
        raise ValueError(
            f"match: the closest width of {names[0]} (x{round(width, 4):g}) has {achieved:,} "
            f"{quantity} against {names[1]}'s {goal:,} ({(achieved / goal - 1) * 100:+.1f}%, "
            f"more than {tolerance:.0%})"
        )
    if achieved == at[1.0]:
        raise ValueError(
            f"match: {names[0]} widened x{round(width, 4):g} to {names[1]}'s {quantity} has "
            f"{achieved:,}, exactly what it has unwidened: the matched variant would be "
            f"{names[0]} itself. Match a variant that adds more {quantity}, or drop 'match'"
        )
    return round(width, 4), achieved, goal
