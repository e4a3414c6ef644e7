"""visattn's blocks as classes for timm's ``attn_layer=`` / ``se_layer=`` (:func:`timm_attn`).

timm's models take their attention as a class (or a string that timm's ``get_attn`` turns into
one) and call it as ``cls(channels, **kwargs)``, with keywords of timm's conventions
(:mod:`visattn.blocks.conventions`). :func:`timm_attn` gives such a class for any visattn name,
with options bound; the constructor of :func:`~visattn.blocks.registry.block_class` merges them
with the caller's.
"""

from __future__ import annotations

import inspect
from typing import Any

import torch.nn as nn
from timm.layers import get_attn

from .._registry import unknown_options
from .conventions import TIMM_HOOK_KEYWORDS, TIMM_WIDTH_KEYWORDS, merge_options
from .registry import _FACTORY_KWARGS, BlockInfo, block_class, block_info, cached_block_class

__all__ = ["timm_attn"]


def _timm_rounding(name: str, info: BlockInfo) -> dict[str, Any]:
    """The ``rd_divisor`` of timm's own module named ``name``, as the block's rounding option
    (its own divisor option where it has one, else ``rd_divisor``); ``{}`` where timm has no
    such module, the block has no reduced width, or the divisor is 1."""
    if info.reduced is None:
        return {}
    try:
        timm_cls = get_attn(name)
    except AssertionError:  # timm's answer to a name it does not know
        return {}
    if timm_cls is None or not callable(timm_cls):
        return {}
    param = inspect.signature(timm_cls).parameters.get("rd_divisor")
    if param is None or not isinstance(param.default, int) or param.default <= 1:
        return {}
    return {info.reduced.divisor or "rd_divisor": param.default}


def _timm_attn_class(name: str, options: tuple[tuple[str, Any], ...]) -> type[nn.Module]:
    return timm_attn(name, **dict(options))


def timm_attn(name: str, **options: Any) -> type[nn.Module]:
    """A class for timm's ``attn_layer=`` / ``se_layer=``: the block ``name`` (or one of timm's
    attention strings, see :func:`block_info`) with ``options`` bound as its defaults.

    ``timm.create_model("resnet50", block_args=dict(attn_layer=visattn.timm_attn("gsop")))``.
    The class is a subclass of the block's (``isinstance`` and :func:`is_block` hold), called as
    ``cls(channels, **kwargs)``; ``kwargs`` override the bound options, and a width or rounding
    that timm passes (``rd_ratio=`` from EfficientNet's builder or a ByobNet's ``attn_kwargs``)
    replaces a bound one. Where timm has a module of the same name with an ``rd_divisor``
    (``se``, ``sk``, ``splat``, ``coord``, ``nl``, ``bat``), that divisor is bound too, so
    ``attn_layer=timm_attn("se")`` gives every model the widths ``attn_layer="se"`` gives it
    (the bare class rounds ``rd_ratio`` to the nearest integer, as EfficientNet's SE does).

    The same ``(name, options)`` give the same class; it and its instances pickle and deep-copy
    (the class is pickled as this call, so it unpickles in a fresh process).

    Why not register ``name`` as a timm string: timm's ``get_attn`` is a fixed ``if``/``elif``
    over its own names with no registry, and its models import ``get_attn``/``create_attn`` by
    name, so a registration would have to patch timm's function in every module that imported
    it. A class is what all of timm's ``attn_layer``/``se_layer`` arguments accept.

    Raises:
        UnknownBlockError: unknown ``name`` (the message names the closest ones).
        TypeError: an option the block does not take.
    """
    info = block_info(name)
    valid = [*info.defaults, *TIMM_WIDTH_KEYWORDS, *TIMM_HOOK_KEYWORDS, *_FACTORY_KWARGS]
    unknown = [k for k in options if k not in valid]
    if unknown:
        said = unknown_options(unknown, valid)
        raise TypeError(f"block '{name}': unknown option {said}; valid options: {', '.join(valid)}")
    base = block_info(info.alias_of or info.name)

    def make() -> type[nn.Module]:
        rounding = _timm_rounding(info.name, info)
        timm_defaults = merge_options(rounding, info.alias_args, info.reduced)
        bound = merge_options(timm_defaults, options, info.reduced)
        said = bound or "no options"
        return block_class(
            base,
            bound=bound,
            qualname=f"timm_attn({info.name!r})",
            doc=f"timm_attn({info.name!r}): {base.impl.__name__} with {said} bound.",
            made_by=(_timm_attn_class, (info.name, tuple(options.items()))),
        )

    return cached_block_class(("timm_attn", info.name, repr(sorted(options.items()))), base, make)
