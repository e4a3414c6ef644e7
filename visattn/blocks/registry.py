"""The block registry: one dict, one decorator.

A block is an ``nn.Module`` class whose first positional argument is ``channels`` and whose
options are keyword arguments; it maps ``(N, C, H, W)`` to the same shape. Registering it is the
only thing needed to make it available to ``create_block``, the model factory, the placement
config, the ablation runner, the tests (which are parametrized over the registry) and timm
(as ``attn_layer``).

Other layers follow the registry through :func:`subscribe` (the timm bridge does, for the
models named after blocks); :func:`registered_block` registers a block for the duration of a
``with`` block (tests).

The decorator records the class and changes nothing in it. What the registry hands out
(:func:`create_block`, :attr:`BlockInfo.cls`, :func:`~visattn.timm_attn`, and so every model and
placement) is a subclass made at registration (:func:`block_class`) whose constructor adds the
behaviours users of ``torch.nn`` and timm expect:

* ``device=`` / ``dtype=`` factory keywords (timm passes them to ``attn_layer``), applied after
  construction when the class does not take them itself;
* errors that name the block: an unknown option raises ``TypeError`` listing the valid ones, and a
  ``ValueError`` raised by the constructor is re-raised prefixed with the block's name;
* timm's constructor conventions (``rd_ratio``, ``rd_channels``, ``rd_divisor``, ``rd_round_fn``)
  for every block with a reduced width, translated to the block's own options in one place
  (:mod:`visattn.blocks.conventions`; ``act_layer``/``gate_layer`` are the blocks' own options);
* one input check for all blocks (a forward pre-hook, kept by ``torch.jit.script``,
  ``torch.export`` and ``torch.compile``): an input that is not 4-D raises ``ValueError``
  naming the block and the expected ``(N, C, H, W)``. An empty batch (``N = 0``) is valid input;
* for a block registered with ``fp16_limit`` (its own activations pass float16's range at large
  inputs, as any convolution's can), a forward hook that refuses to return a non-finite float16
  result: see :func:`check_fp16_output`.
"""

from __future__ import annotations

import contextlib
import copyreg
import dataclasses
import functools
import inspect
from collections.abc import Callable, Hashable, Iterator, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, TypeVar

import torch
import torch.nn as nn

from .._registry import Listener, Registry, Subscribers, UnknownNameError, unknown_options
from .aliases import TIMM_ALIASES
from .conventions import (
    TIMM_HOOK_KEYWORDS,
    TIMM_WIDTH_KEYWORDS,
    Reduced,
    infer_reduced,
    merge_options,
    translate,
)
from .identity import INITS, identity_form, make_identity

__all__ = [
    "FAMILIES",
    "BlockInfo",
    "UnknownBlockError",
    "block_info",
    "create_block",
    "list_blocks",
    "register_block",
    "registered_block",
    "subscribe",
    "unregister_block",
]

FAMILIES = ("channel", "spatial", "hybrid", "residual")
_FACTORY_KWARGS = ("device", "dtype")

M = TypeVar("M", bound=type[nn.Module])


class UnknownBlockError(UnknownNameError):
    """Raised for a block name that is not registered; the message names the closest ones."""


@dataclass(frozen=True)
class BlockInfo:
    """What the registry knows of a block."""

    name: str
    family: str
    paper: str
    #: the class to build the block with: the registered class with the registry's behaviours
    #: (a subclass made at registration; the registered class itself is left as written); for
    #: an alias, a subclass of its block's with the alias's options bound
    cls: type[nn.Module]
    #: the class as registered
    impl: type[nn.Module]
    defaults: dict[str, Any] = field(default_factory=dict)
    replaces_conv: bool = False
    #: for an alias (timm's attention strings, :mod:`visattn.blocks.aliases`): the block it
    #: names, the options it sets (already in ``defaults``) and what it is in timm
    alias_of: str | None = None
    alias_args: dict[str, Any] = field(default_factory=dict)
    alias_notes: str = ""
    #: why the block's own activations can pass float16's maximum (65,504) at large inputs,
    #: where no float32 region can help (``None``: finite under float16 autocast at activation
    #: scales 1, 100 and 1e4). Such a block raises ``FloatingPointError`` instead of returning a
    #: non-finite float16 result (:func:`check_fp16_output`).
    fp16_limit: str | None = None
    #: where ``<block>_<backbone>`` compositions place the block (placement fields besides
    #: ``name``), and whether they zero-initialise each residual branch's last norm
    composed_at: Mapping[str, Any] = field(default_factory=dict)
    composed_zero_init: bool = False
    #: how the block spells its reduced width, for timm's ``rd_*`` keywords (``None``: it has
    #: none, and they are refused); see :mod:`visattn.blocks.conventions`
    reduced: Reduced | None = None

    @property
    def identity_form(self) -> str:
        """How ``create_block(..., init="identity")`` makes this block the identity."""
        return identity_form(self.cls)

    @property
    def options(self) -> tuple[str, ...]:
        return tuple(self.defaults)


_REGISTRY: Registry[BlockInfo] = Registry(
    "block",
    error=UnknownBlockError,
    hint=lambda _: (
        f"registered: {', '.join(sorted(_REGISTRY))}; a block of your own: name the "
        "module that registers it with --import MODULE, or imports: [MODULE] in a sweep file"
    ),
    cutoff=0.5,
)
_SUBSCRIBERS = Subscribers()
#: registered class (as written) -> its name
_BY_CLASS: dict[type[nn.Module], str] = {}


def _signature_defaults(cls: type[nn.Module], name: str) -> dict[str, Any]:
    params = list(inspect.signature(cls.__init__).parameters.values())[1:]  # drop self
    if not params or params[0].name != "channels":
        raise TypeError(
            f"block '{name}': the first argument of {cls.__name__}.__init__ must be 'channels'"
        )
    defaults = {}
    for p in params[1:]:
        if p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD) or p.name in _FACTORY_KWARGS:
            continue
        if p.default is p.empty:
            raise TypeError(
                f"block '{name}': option '{p.name}' of {cls.__name__} needs a default value"
            )
        defaults[p.name] = p.default
    return defaults


def check_block_input(module: nn.Module, inputs: tuple[torch.Tensor]) -> None:
    """Forward pre-hook of every registered block: the input must be ``(N, C, H, W)``."""
    if torch.jit.is_scripting():
        if inputs[0].dim() != 4:
            raise ValueError("attention block: expected input of shape (N, C, H, W)")
    elif inputs and not isinstance(inputs[0], torch.fx.Proxy):
        # (under torch.fx the input is a Proxy: its shape is not known while tracing)
        x = inputs[0]
        name = getattr(module, "block_name", type(module).__name__)
        if x.dim() != 4:
            raise ValueError(
                f"block '{name}': expected input of shape (N, C, H, W), got {tuple(x.shape)}"
            )
        built = getattr(module, "_visattn_channels", None)
        if built is not None and x.shape[1] != built:
            raise ValueError(
                f"block '{name}' was built for {built} channels, got an input with "
                f"{x.shape[1]} ({tuple(x.shape)}); build it with the channels of the feature "
                "map it attends to"
            )


def _runs_in_float16(output: torch.Tensor) -> bool:
    """``output`` is float16, or was computed under float16 autocast on its device."""
    if output.dtype == torch.float16:
        return True
    device = output.device.type
    return torch.is_autocast_enabled(device) and torch.get_autocast_dtype(device) == torch.float16


def check_fp16_output(module: nn.Module, inputs: tuple[torch.Tensor], output: torch.Tensor) -> None:
    """Forward hook of the blocks registered with ``fp16_limit``: a non-finite result computed
    in float16 (autocast or a half model) from a finite input raises ``FloatingPointError`` naming
    the block, the input's largest magnitude, the reason (:attr:`BlockInfo.fp16_limit`) and the
    remedies (bfloat16 autocast, float32, smaller activations), instead of returning NaN.

    Finite float16 results pass unchanged, so fp16 training at ordinary activations is unaffected;
    a non-finite input is passed on (its NaN are not this block's). Cost: one ``isfinite`` pass
    over the output and one host synchronisation per call, under float16 only; nothing otherwise.
    Skipped while tracing, scripting, compiling or exporting (``torch.jit``, ``torch.fx``,
    ``torch.compile``, ``torch.export``, ONNX): those graphs hold no check.
    """
    if torch.jit.is_scripting():
        pass
    elif isinstance(output, torch.Tensor) and not (
        torch.jit.is_tracing() or torch.compiler.is_compiling()
    ):
        _refuse_non_finite_fp16(module, inputs, output)


def _refuse_non_finite_fp16(
    module: nn.Module, inputs: tuple[torch.Tensor], output: torch.Tensor
) -> None:
    if not _runs_in_float16(output) or bool(torch.isfinite(output).all()):
        return
    x = inputs[0] if inputs else None
    if not isinstance(x, torch.Tensor) or not bool(torch.isfinite(x).all()):
        return
    name = getattr(module, "block_name", type(module).__name__)
    reason = getattr(module, "block_fp16_limit", None)
    largest = float(x.abs().amax()) if x.numel() else 0.0
    raise FloatingPointError(
        f"block '{name}': non-finite output in float16 from a finite input (largest |input| "
        f"{largest:.3g}): {reason}. Run it under bfloat16 autocast "
        "(torch.autocast(..., dtype=torch.bfloat16)) or in float32, or keep its input "
        "activations smaller"
    )


class _BlockClassType(type):
    """The metaclass of the classes the registry makes (:attr:`BlockInfo.cls`,
    :func:`~visattn.timm_attn`): pickled as the call that makes them, so a pickled model loads in
    a fresh process."""


copyreg.pickle(_BlockClassType, lambda c: c.made_by)


def _registered_class(name: str) -> type[nn.Module]:
    return _REGISTRY[name].cls


def _constructor_options(
    info: BlockInfo,
    params: Mapping[str, inspect.Parameter],
    bound: Mapping[str, Any],
    channels: int,
    kwargs: dict[str, Any],
) -> tuple[dict[str, Any], dict[str, Any]]:
    """The registered class's keywords for a call of the registry's class, and the factory
    keywords (``device``/``dtype``) to apply after construction; raises for an unknown option
    or a channel count that is not a positive int."""
    name, defaults, reduced = info.name, info.defaults, info.reduced
    takes_var_kw = any(p.kind is p.VAR_KEYWORD for p in params.values())
    if bound:
        kwargs = merge_options(bound, kwargs, reduced)
    takes_factory = all(k in params for k in _FACTORY_KWARGS)
    factory = {} if takes_factory else {k: kwargs.pop(k) for k in _FACTORY_KWARGS if k in kwargs}
    for k in TIMM_HOOK_KEYWORDS:  # timm's rule: accepted, and ignored where they do not apply
        if k in kwargs and k not in params and not takes_var_kw:
            del kwargs[k]
    if not takes_var_kw:
        unknown = [k for k in kwargs if k not in params and k not in TIMM_WIDTH_KEYWORDS]
        if unknown:
            raise TypeError(
                f"block '{name}': unknown option {unknown_options(unknown, defaults)}; "
                f"valid options: {', '.join(defaults) or 'none'}"
            )
    if isinstance(channels, bool) or not isinstance(channels, int) or channels < 1:
        raise ValueError(f"block '{name}': channels must be a positive int, got {channels!r}")
    return translate(name, reduced, channels, kwargs, defaults), factory


def block_class(
    info: BlockInfo,
    *,
    bound: Mapping[str, Any],
    qualname: str,
    doc: str,
    made_by: tuple[Callable[..., type[nn.Module]], tuple[Any, ...]],
) -> type[nn.Module]:
    """A subclass of ``info.cls`` (the registered class ``info.impl`` at registration, the
    registry's subclass of it for :func:`~visattn.timm_attn`) whose constructor adds the registry's
    behaviours (the module docstring's list) with ``bound`` options as defaults; the registered
    class itself is left as written. ``made_by`` is the call that makes the class again
    (pickling)."""
    impl, name = info.impl, info.name
    params = inspect.signature(impl.__init__).parameters

    @functools.wraps(impl.__init__)
    def __init__(self: nn.Module, channels: int, *args: Any, **kwargs: Any) -> None:
        kwargs, factory = _constructor_options(info, params, bound, channels, kwargs)
        try:
            impl.__init__(self, channels, *args, **kwargs)
        except ValueError as e:
            msg = str(e)
            raise ValueError(
                msg if msg.startswith(f"block '{name}'") else f"block '{name}': {msg}"
            ) from e
        if any(v is not None for v in factory.values()):
            self.to(**{k: v for k, v in factory.items() if v is not None})
        self._visattn_channels = int(channels)  # the input check's: C of (N, C, H, W)
        self.register_forward_pre_hook(check_block_input)
        if info.fp16_limit is not None:
            self.register_forward_hook(check_fp16_output)

    return _BlockClassType(
        impl.__name__,
        (info.cls,),  # the registered class, or for timm_attn the registry's subclass of it
        {
            "__init__": __init__,
            "__module__": impl.__module__,
            "__qualname__": qualname,
            "__doc__": doc,
            "block_name": name,
            "block_family": info.family,
            "block_fp16_limit": info.fp16_limit,
            "bound_to": impl,
            "bound_options": MappingProxyType(dict(bound)),
            "made_by": made_by,
        },
    )


def register_block(
    name: str,
    *,
    family: str,
    paper: str,
    replaces_conv: bool = False,
    fp16_limit: str | None = None,
    reduced: Reduced | None = None,
    composed_at: Mapping[str, Any] | None = None,
    composed_zero_init: bool = False,
) -> Callable[[M], M]:
    """Class decorator that registers an attention block under ``name``.

    Args:
        name: registry name (lower case, ``[a-z0-9_]``).
        family: one of ``"channel"``, ``"spatial"``, ``"hybrid"``, ``"residual"``.
        paper: short citation, e.g. ``"Hu et al., CVPR 2018"``.
        replaces_conv: the block can stand in for a residual branch's 3x3 conv (placement
            position ``conv``). Its constructor then takes ``out_channels`` (default ``None``:
            the input's) and ``stride`` (default 1) after ``channels``, and it maps
            ``(N, C, H, W)`` to ``(N, out_channels, H / stride, W / stride)``; it stores
            ``in_channels``, ``out_channels`` and ``stride`` as attributes.
        fp16_limit: why the block's own activations (not a reduction or a normalisation, which
            belong in float32) can pass float16's 65,504 at large inputs; the block then raises
            ``FloatingPointError`` rather than return a non-finite float16 result
            (:func:`check_fp16_output`). ``None`` for blocks finite under float16 autocast.
        reduced: how the block spells its reduced width, for timm's ``rd_ratio``,
            ``rd_channels``, ``rd_divisor`` and ``rd_round_fn``
            (:class:`~visattn.blocks.conventions.Reduced`); ``None`` infers it: an option
            ``reduction`` (width ``C // reduction``) and/or ``rd_channels`` (the width). A
            block with neither refuses those keywords.
        composed_at: placement fields (``position``, ``stages``, ``blocks``, ``args``) for the
            model ``<block>_<backbone>`` (such as ``bat_resnet56_cifar``), where the block's
            paper puts it; default ``{"position": "conv"}`` for a block that replaces a conv,
            else the standard position in every residual block.
        composed_zero_init: ``<block>_<backbone>`` zero-initialises each residual branch's last
            norm (Goyal et al. 2017; timm's default for its ResNets, BoTNet and HaloNet), so that
            the network starts as its shortcuts: for blocks whose output a following BN divides
            by a small spread, which makes a stack of them diverge from He et al.'s init.

    Raises:
        ValueError: the name is taken, malformed, the family is unknown, or ``fp16_limit`` is
            given but empty.
    """
    _check_registration(name, family, fp16_limit)

    def decorator(cls: M) -> M:
        defaults = _check_class(name, cls, replaces_conv)
        spec = reduced if reduced is not None else infer_reduced(defaults)
        for option in (spec.reduction, spec.width, spec.floor, spec.divisor) if spec else ():
            if option is not None and option not in defaults:
                raise TypeError(f"block '{name}': reduced names no option '{option}'")
        info = BlockInfo(
            name=name,
            family=family,
            paper=paper,
            cls=cls,
            impl=cls,
            defaults=defaults,
            replaces_conv=replaces_conv,
            fp16_limit=fp16_limit,
            composed_at=dict(composed_at or ({"position": "conv"} if replaces_conv else {})),
            composed_zero_init=composed_zero_init,
            reduced=spec,
        )
        made_by = (_registered_class, (name,))
        made = block_class(
            info, bound={}, qualname=cls.__qualname__, doc=cls.__doc__ or "", made_by=made_by
        )
        _REGISTRY.add(name, dataclasses.replace(info, cls=made))
        _BY_CLASS[cls] = name
        _SUBSCRIBERS.notify(added=[name])
        return cls

    return decorator


def _check_registration(name: str, family: str, fp16_limit: str | None) -> None:
    if not name or not name.replace("_", "").isalnum() or name.lower() != name:
        raise ValueError(f"block name must be lower-case letters, digits and '_', got {name!r}")
    if family not in FAMILIES:
        raise ValueError(f"block '{name}': family must be one of {FAMILIES}, got {family!r}")
    if fp16_limit is not None and (not isinstance(fp16_limit, str) or not fp16_limit.strip()):
        raise ValueError(f"block '{name}': fp16_limit must be a non-empty reason or None")


def _check_class(name: str, cls: Any, replaces_conv: bool) -> dict[str, Any]:
    """``cls``'s constructor defaults, once the name is free and the class can be registered."""
    if name in _REGISTRY:
        raise ValueError(
            f"block '{name}' is already registered (by {_REGISTRY[name].cls.__qualname__})"
        )
    if not (isinstance(cls, type) and issubclass(cls, nn.Module)):
        raise TypeError(f"block '{name}': only nn.Module classes can be registered")
    defaults = _signature_defaults(cls, name)
    if replaces_conv and not {"out_channels", "stride"} <= set(defaults):
        raise TypeError(
            f"block '{name}': a block that replaces a conv takes 'out_channels' and 'stride'"
        )
    return defaults


def unregister_block(name: str) -> BlockInfo:
    """Remove the block ``name`` from the registry; returns what the registry held. Unknown
    names raise ``UnknownBlockError``."""
    info = _lookup(name)
    _REGISTRY.remove(name)
    _BY_CLASS.pop(info.impl, None)
    _SUBSCRIBERS.notify(removed=[name])
    return info


@contextlib.contextmanager
def registered_block(
    name: str,
    cls: type[nn.Module],
    *,
    family: str,
    paper: str,
    replaces_conv: bool = False,
    fp16_limit: str | None = None,
    reduced: Reduced | None = None,
) -> Iterator[BlockInfo]:
    """Register ``cls`` as :func:`register_block` does for the duration of a ``with`` block
    (yielding its :class:`BlockInfo`), then unregister it, e.g. for a test's own block."""
    register_block(
        name,
        family=family,
        paper=paper,
        replaces_conv=replaces_conv,
        fp16_limit=fp16_limit,
        reduced=reduced,
    )(cls)
    try:
        yield _REGISTRY[name]
    finally:
        unregister_block(name)


def subscribe(listener: Listener) -> Callable[[], None]:
    """Call ``listener(added, removed)`` with the names of blocks registered and unregistered
    from now on (first with every registered name as added); returns the function that
    unsubscribes it."""
    return _SUBSCRIBERS.subscribe(listener, _REGISTRY)


#: a cache key -> a class made by :func:`block_class` (:func:`cached_block_class`)
_BOUND_CLASSES: dict[Hashable, type[nn.Module]] = {}


def cached_block_class(
    key: Hashable, base: BlockInfo, make: Callable[[], type[nn.Module]]
) -> type[nn.Module]:
    """The class ``make()`` returns (a :func:`block_class` of ``base``), made once per ``key``
    and per registration of ``base``: made again when another class has been registered under
    ``base``'s name since, so that a bound class never builds a replaced block."""
    cls = _BOUND_CLASSES.get(key)
    if cls is None or cls.bound_to is not base.impl:
        cls = _BOUND_CLASSES[key] = make()
    return cls


def _alias_class(name: str) -> type[nn.Module]:
    """The class of timm's alias ``name``: its block's registry class with the alias's options
    as bound defaults (pickled as this call)."""
    alias = TIMM_ALIASES[name]
    base = _REGISTRY[alias.alias_of]
    return cached_block_class(
        ("alias", name),
        base,
        lambda: block_class(
            base,
            bound=alias.args,
            qualname=f"block_info({name!r}).cls",
            doc=f"{name!r}: {base.impl.__name__} with {dict(alias.args)} bound.",
            made_by=(_alias_class, (name,)),
        ),
    )


def _alias_info(name: str) -> BlockInfo | None:
    """The :class:`BlockInfo` of timm's alias ``name`` (its block's, renamed, with the alias's
    options as defaults and bound in ``cls``), or ``None``."""
    alias = TIMM_ALIASES.get(name) if isinstance(name, str) else None
    if alias is None or alias.alias_of not in _REGISTRY:
        return None
    base = _REGISTRY[alias.alias_of]
    return dataclasses.replace(
        base,
        name=name,
        cls=_alias_class(name),
        paper=f"{base.paper} (timm's {alias.timm_module})",
        defaults={**base.defaults, **alias.args},
        alias_of=base.name,
        alias_args=dict(alias.args),
        alias_notes=alias.notes,
    )


def _lookup(name: str) -> BlockInfo:
    if isinstance(name, str) and name in _REGISTRY:
        return _REGISTRY[name]
    info = _alias_info(name)
    if info is not None:
        return info
    if isinstance(name, str) and name.lower() != name:  # "CBAM", "SE": as timm's strings
        return _lookup(name.lower())
    aliases = [a for a in TIMM_ALIASES if TIMM_ALIASES[a].alias_of in _REGISTRY]
    raise _REGISTRY.unknown(name, choices=aliases)


def list_blocks(family: str | None = None) -> list[str]:
    """Sorted names of the registered blocks, optionally of one family."""
    if family is not None and family not in FAMILIES:
        raise ValueError(f"family must be one of {FAMILIES}, got {family!r}")
    return _REGISTRY.names(where=lambda i: family is None or i.family == family)


def block_info(name: str) -> BlockInfo:
    """The :class:`BlockInfo` of a registered block or of one of timm's attention strings
    (``ecam``, ``ceca``, ``gca``, ``lcbam``, ``scoord``, ``bottleneck``, ``nl``: ``.alias_of``
    names the block, ``.alias_args`` the options the alias sets); unknown names raise
    ``UnknownBlockError``."""
    return _lookup(name)


def create_block(name: str, channels: int, *, init: str = "default", **kwargs: Any) -> nn.Module:
    """Build the block ``name`` for ``channels`` channels with keyword ``kwargs``.

    ``name`` may also be one of timm's attention strings (see :func:`block_info`).
    ``init="default"`` keeps the paper's initialisation. ``init="identity"`` returns a block that
    computes exactly its input at initialisation (see :mod:`visattn.blocks.identity`), for
    insertion into a trained network; :attr:`BlockInfo.identity_form` says how.
    """
    info = _lookup(name)
    if init not in INITS:
        raise ValueError(
            f"block '{name}': option 'init' must be one of {list(INITS)}, got {init!r}"
        )
    block = info.cls(channels, **kwargs)
    return make_identity(block, info.alias_of or info.name) if init == "identity" else block


def block_of(module: nn.Module) -> BlockInfo | None:
    """The :class:`BlockInfo` of a block instance: of a class made by the registry
    (:func:`create_block`, :attr:`BlockInfo.cls`, :func:`~visattn.timm_attn`) or of a registered
    class built directly; ``None`` for any other module."""
    cls = type(module)
    impl = getattr(cls, "bound_to", cls)
    name = getattr(cls, "block_name", None) or _BY_CLASS.get(impl)
    info = _REGISTRY.get(name) if name is not None else None
    return info if info is not None and info.impl is impl else None


def is_block(module: nn.Module) -> bool:
    """True for instances of registered block classes (see :func:`block_of`)."""
    return block_of(module) is not None
