"""The optimizer of a run: visattn's two named recipes or any ``torch.optim.Optimizer`` class.

``model.optimizer`` is ``"sgd"`` or ``"adamw"`` (their options are the module's flat
``momentum``/``nesterov``/``betas``), or, in LightningCLI's spelling, any optimizer class::

    model:
      optimizer:
        class_path: torch.optim.RAdam
        init_args: {decoupled_weight_decay: true}
      lr: 1.0e-3
      weight_decay: 0.05

``lr`` and ``weight_decay`` stay the module's own options for every optimizer: the schedule
scales ``lr``, ``lr_mult`` multiplies it per parameter group, and ``weight_decay`` is set per
group (none on norms and biases with ``no_weight_decay_norm_bias``), so they are refused inside
``init_args``. A bare class path (``optimizer: torch.optim.RAdam``) is the class with no
``init_args``. The class is imported and its ``init_args`` are checked against its signature when
the module is built, before any data is read.
"""

from __future__ import annotations

import importlib
import inspect
from collections.abc import Mapping
from typing import Any

import torch

from .._registry import did_you_mean, unknown_options

__all__ = ["NAMED", "OptimizerSpec", "optimizer_spec"]

#: the named recipes: their class and which of the module's flat options they read
NAMED = {
    "sgd": (torch.optim.SGD, ("momentum", "nesterov")),
    "adamw": (torch.optim.AdamW, ("betas",)),
}
#: the module's own options, refused in ``init_args``
_OWN = {"lr": "model.lr", "weight_decay": "model.weight_decay", "params": "the parameter groups"}
_KEYS = ("class_path", "init_args")


class OptimizerSpec:
    """A resolved ``model.optimizer``: the class and its keyword arguments besides ``lr``."""

    def __init__(self, name: str, cls: type[torch.optim.Optimizer], init_args: Mapping[str, Any]):
        self.name, self.cls, self.init_args = name, cls, dict(init_args)

    def build(self, groups: list[dict[str, Any]], lr: float) -> torch.optim.Optimizer:
        """The optimizer over ``groups`` (each with its own weight decay) at ``lr``."""
        return self.cls(groups, lr=lr, **self.init_args)


def _import(path: str) -> Any:
    module, _, attr = path.rpartition(".")
    if not module:
        hint = did_you_mean(path, NAMED)
        raise ValueError(
            f"model.optimizer: {path!r} is neither a named optimizer ({', '.join(NAMED)}) nor a "
            f"class path such as torch.optim.RAdam{hint}"
        )
    try:
        found = getattr(importlib.import_module(module), attr)
    except (ImportError, AttributeError) as exc:
        names = [n for n in dir(torch.optim) if isinstance(getattr(torch.optim, n), type)]
        hint = did_you_mean(attr, names) if module == "torch.optim" else ""
        raise ValueError(f"model.optimizer: cannot import {path!r} ({exc}){hint}") from None
    if not (isinstance(found, type) and issubclass(found, torch.optim.Optimizer)):
        raise ValueError(f"model.optimizer: {path!r} is not a torch.optim.Optimizer class")
    return found


def _check_init_args(path: str, cls: type, init_args: Any) -> dict[str, Any]:
    if not isinstance(init_args, Mapping):
        raise ValueError(f"model.optimizer.init_args must be a mapping, got {init_args!r}")
    own = [k for k in init_args if k in _OWN]
    if own:
        where = ", ".join(f"{k}: set {_OWN[k]}" for k in own)
        raise ValueError(f"model.optimizer.init_args: {where} (visattn sets it per group)")
    params = inspect.signature(cls.__init__).parameters
    if not any(p.kind is p.VAR_KEYWORD for p in params.values()):
        valid = [n for n in params if n not in ("self", *_OWN)]
        unknown = [k for k in init_args if k not in params]
        if unknown:
            raise ValueError(
                f"model.optimizer.init_args: {path} takes no {unknown_options(unknown, valid)}; "
                f"its options: {', '.join(valid)}"
            )
    return dict(init_args)


def optimizer_spec(
    value: str | Mapping[str, Any],
    named: Mapping[str, Any] | None = None,
    defaults: Mapping[str, Any] | None = None,
) -> OptimizerSpec:
    """The :class:`OptimizerSpec` of a ``model.optimizer`` value. ``named`` are the module's flat
    options of the named recipes as given (``momentum``, ``nesterov``, ``betas``), ``defaults``
    their defaults. Raises ``ValueError`` naming what is wrong: an unknown name or class, a class
    that is not an optimizer, an option the class does not take, ``lr``/``weight_decay`` in
    ``init_args``, or a named recipe's option changed from its default for a class path, which
    would not read it."""
    named, defaults = dict(named or {}), dict(defaults or {})
    if isinstance(value, str) and value in NAMED:
        cls, reads = NAMED[value]
        return OptimizerSpec(value, cls, {k: _plain(named[k]) for k in reads if k in named})
    spec = _spec(value)
    changed = [k for k, v in named.items() if k in defaults and _plain(v) != _plain(defaults[k])]
    if changed:
        raise ValueError(
            f"model.{changed[0]} is an option of the named optimizers ({', '.join(NAMED)}); "
            f"{spec.name} does not read it: put it in model.optimizer.init_args"
        )
    return spec


def _plain(v: Any) -> Any:
    return tuple(v) if isinstance(v, list) else v


def _spec(value: str | Mapping[str, Any]) -> OptimizerSpec:
    if isinstance(value, str):
        return OptimizerSpec(value, _import(value), {})
    if not isinstance(value, Mapping) or "class_path" not in value:
        raise ValueError(
            f"model.optimizer must be one of {', '.join(NAMED)}, a class path, or a mapping "
            f"with class_path (and init_args), got {value!r}"
        )
    extra = [k for k in value if k not in _KEYS]
    if extra:
        raise ValueError(
            f"model.optimizer: unknown key {unknown_options(extra, _KEYS)}; use class_path "
            "and init_args"
        )
    path = value["class_path"]
    cls = _import(path)
    return OptimizerSpec(path, cls, _check_init_args(path, cls, value.get("init_args") or {}))
