"""timm's constructor conventions for every block: the one place that translates them.

timm's attention layers take their reduced width as ``rd_ratio`` (a fraction of the channels),
``rd_channels`` (the width itself), ``rd_divisor`` (round the width to a multiple of it, with
``make_divisible``) and, in EfficientNet's SE, ``rd_round_fn`` (a function rounding
``channels * rd_ratio``). visattn's blocks spell their own width as an option ``reduction``
(``r`` in ``C // r``) or as a width option. The registry (:func:`register_block`) hands every
constructor call through :func:`translate`, which computes the width from timm's keywords and
passes it to the block's own option, so a block is still one decorated class: what differs
between blocks is declared as data (:class:`Reduced`), inferred from the signature where the
block follows the usual spelling.

The width, for ``C`` channels (the block's :attr:`Reduced.base`):

* ``rd_channels``: that width;
* ``rd_ratio``: ``round(C * rd_ratio)`` (EfficientNet's SE), or ``rd_round_fn(C * rd_ratio)``, or
  with ``rd_divisor`` ``make_divisible(C * rd_ratio, rd_divisor, round_limit=0)`` (timm's
  ``SEModule``, ``CbamModule``, ``GlobalContext``, ...);
* ``rd_divisor`` or ``rd_round_fn`` alone: the block's own ``C / reduction``, rounded so.

A timm keyword that does not apply to a block (a width on a block without a reduced width, or
one of :data:`TIMM_HOOK_KEYWORDS` on a block without that option) is accepted and ignored, as
timm's own modules do (``EcaModule`` takes ``act_layer``, ``rd_ratio``, ``rd_divisor`` and
``gate_layer`` and uses none of them), so every block fits timm's ``attn_layer``/``se_layer``
hooks. Refused (naming the options): ``reduction`` together with ``rd_ratio`` or ``rd_channels``;
``rd_ratio`` and ``rd_channels`` that give different widths; ``rd_divisor`` with
``rd_round_fn``; a width of 0.

``act_layer`` and ``gate_layer`` are the blocks' own options (a class or a name; names unknown to
visattn are looked up with timm's ``get_act_layer``). The rounding without ``rd_divisor`` is
EfficientNet's, not ``SEModule``'s (whose ``rd_divisor`` defaults to 8):
:func:`visattn.timm_attn` binds the divisor of timm's module of the same name.
"""

from __future__ import annotations

import numbers
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

from timm.layers import make_divisible

__all__ = [
    "TIMM_HOOK_KEYWORDS",
    "TIMM_WIDTH_KEYWORDS",
    "Reduced",
    "infer_reduced",
    "merge_options",
    "translate",
]

#: timm's keywords for a reduced width, translated by :func:`translate`
TIMM_WIDTH_KEYWORDS = ("rd_ratio", "rd_channels", "rd_divisor", "rd_round_fn")
#: the other keywords timm's model families pass to ``attn_layer`` / ``se_layer`` (EfficientNet
#: and MobileNetV3 ``act_layer``, RegNet and ByobNet ``act_layer``/``rd_ratio``, ...): a block
#: that has the option takes it, one that has not ignores it, as timm's own modules do
TIMM_HOOK_KEYWORDS = ("act_layer", "gate_layer", "norm_layer", "bias")
_SIZE = ("rd_ratio", "rd_channels")
_ROUNDING = ("rd_divisor", "rd_round_fn")


@dataclass(frozen=True)
class Reduced:
    """How a block spells its reduced width (``register_block(..., reduced=Reduced(...))``).

    Attributes:
        reduction: the option ``r`` of a width ``base // r`` (``None``: the block has none).
        width: an option that takes the width itself (preferred when the block has one).
        floor: an option raising the width to a minimum; set to 1 when timm's keywords give the
            width (they say it all), unless the caller sets it.
        divisor: the block's own rounding divisor option (coord's ``divisor``): the same as
            ``rd_divisor``, so giving both is refused.
        base: the channels the ratio applies to, from ``(channels, options)`` (default: the
            input channels), e.g. SK's output channels.
    """

    reduction: str | None = "reduction"
    width: str | None = None
    floor: str | None = None
    divisor: str | None = None
    base: Callable[[int, Mapping[str, Any]], int] | None = None

    def base_channels(self, channels: int, options: Mapping[str, Any]) -> int:
        """The ``C`` that ``rd_ratio`` multiplies, for a block built with ``options``."""
        return channels if self.base is None else int(self.base(channels, options))

    @property
    def own_options(self) -> tuple[str, ...]:
        """The block's options that say its width (given by the caller, timm's keywords
        replace them in :func:`merge_options`)."""
        return tuple(o for o in (self.reduction, self.width) if o is not None)


def infer_reduced(defaults: Mapping[str, Any]) -> Reduced | None:
    """The usual spelling: an option ``reduction`` and/or a width option ``rd_channels``."""
    reduction = "reduction" if "reduction" in defaults else None
    width = "rd_channels" if "rd_channels" in defaults else None
    if reduction is None and width is None:
        return None
    return Reduced(reduction=reduction, width=width)


def merge_options(
    bound: Mapping[str, Any], given: Mapping[str, Any], reduced: Reduced | None
) -> dict[str, Any]:
    """``bound`` options (an alias's, :func:`visattn.timm_attn`'s) overridden by ``given``.

    A width given either way (``reduction``, the width option, ``rd_ratio``, ``rd_channels``)
    replaces a bound width, and a rounding (``rd_divisor``, ``rd_round_fn``, the block's own
    divisor) a bound rounding, as does an explicit ``rd_channels``; so a caller such as timm's
    EfficientNet builder can pass its ``rd_ratio`` to a block bound with ``reduction=8``.
    """
    own = reduced.own_options if reduced is not None else ()
    rounding = (*_ROUNDING, *((reduced.divisor,) if reduced and reduced.divisor else ()))
    out = dict(bound)
    for group, replaced_by in (((*_SIZE, *own), ()), (rounding, ("rd_channels",))):
        if any(k in given for k in (*group, *replaced_by)):
            for k in group:
                out.pop(k, None)
    out.update(given)
    return out


def _number(block: str, option: str, value: Any, *, integer: bool = False) -> None:
    kind = numbers.Integral if integer else numbers.Real
    if isinstance(value, bool) or not isinstance(value, kind) or value <= 0:
        what = "a positive int" if integer else "a positive number"
        raise ValueError(f"block '{block}': option '{option}' must be {what}, got {value!r}")


def _rounded(value: float, divisor: int | None, round_fn: Callable[[float], Any] | None) -> int:
    if round_fn is not None:
        return int(round_fn(value))
    if divisor is not None:
        return int(make_divisible(value, divisor, round_limit=0.0))
    return round(value)


def _check_given(block: str, reduced: Reduced, given: dict[str, Any], kwargs: dict) -> None:
    for size in _SIZE:
        for own in reduced.own_options:
            if size in given and own in kwargs:
                raise ValueError(
                    f"block '{block}': give either option '{own}' or '{size}', not both"
                )
    if all(k in given for k in _ROUNDING):
        raise ValueError(
            f"block '{block}': give either option 'rd_divisor' or 'rd_round_fn', not both"
        )
    if reduced.divisor is not None and "rd_divisor" in given and reduced.divisor in kwargs:
        raise ValueError(
            f"block '{block}': give either option '{reduced.divisor}' or 'rd_divisor', not both"
        )
    for k in ("rd_ratio", "rd_channels", "rd_divisor"):
        if k in given:
            _number(block, k, given[k], integer=k != "rd_ratio")
    if "rd_round_fn" in given and not callable(given["rd_round_fn"]):
        fn = given["rd_round_fn"]
        raise ValueError(f"block '{block}': option 'rd_round_fn' must be a function, got {fn!r}")


def _width(
    block: str,
    reduced: Reduced,
    base: int,
    given: dict[str, Any],
    kwargs: dict[str, Any],
    defaults: Mapping[str, Any],
) -> int:
    ratio, rd = given.get("rd_ratio"), given.get("rd_channels")
    divisor = given.get("rd_divisor")
    if divisor is None and reduced.divisor is not None and kwargs.get(reduced.divisor, 1) > 1:
        divisor = kwargs[reduced.divisor]
    round_fn = given.get("rd_round_fn")
    if ratio is not None:
        width = _rounded(base * ratio, divisor, round_fn)
        if rd is not None and rd != width:
            raise ValueError(
                f"block '{block}': options 'rd_ratio'={ratio} and 'rd_channels'={rd} disagree "
                f"(rd_ratio gives {width} channels for {base})"
            )
    elif rd is not None:
        if round_fn is not None:
            raise ValueError(
                f"block '{block}': option 'rd_round_fn' rounds rd_ratio or the reduction, "
                "not an explicit 'rd_channels'"
            )
        if divisor is not None and rd % divisor:
            raise ValueError(
                f"block '{block}': option 'rd_channels'={rd} is not a multiple of "
                f"'rd_divisor'={divisor}"
            )
        width = rd
    elif reduced.reduction is None:
        raise ValueError(
            f"block '{block}': options 'rd_divisor'/'rd_round_fn' round a ratio; give 'rd_ratio'"
        )
    else:
        r = kwargs.get(reduced.reduction, defaults[reduced.reduction])
        _number(block, reduced.reduction, r)
        width = _rounded(base / r, divisor, round_fn)
    if width < 1:
        raise ValueError(f"block '{block}': options {given} leave {width} channels for {base}")
    return width


def translate(
    block: str,
    reduced: Reduced | None,
    channels: int,
    kwargs: dict[str, Any],
    defaults: Mapping[str, Any],
) -> dict[str, Any]:
    """The block's own options for a call with timm's keywords (``kwargs`` unchanged without
    them). ``defaults`` are the block's option defaults, for the error message and the base."""
    given = {k: kwargs[k] for k in TIMM_WIDTH_KEYWORDS if k in kwargs}
    if not given:
        return kwargs
    rest = {k: v for k, v in kwargs.items() if k not in given}
    if reduced is None:  # timm's rule: accepted and ignored by a module without a reduced width
        return rest
    given = {k: v for k, v in given.items() if v is not None}  # None: unset, as in timm
    if not given:
        return rest
    _check_given(block, reduced, given, rest)
    base = reduced.base_channels(channels, {**defaults, **rest})
    width = _width(block, reduced, base, given, rest, defaults)
    if reduced.width is not None:
        rest[reduced.width] = width
        if reduced.reduction is not None:  # the width says it: a bound reduction goes
            rest.pop(reduced.reduction, None)
    else:  # the reduction that leaves exactly this width: base // (base / width) == width
        rest[reduced.reduction] = Fraction(base, width)
    if reduced.floor is not None and reduced.floor not in rest:
        rest[reduced.floor] = 1
    if reduced.divisor is not None:
        rest[reduced.divisor] = 1  # the width is already rounded
    return rest
