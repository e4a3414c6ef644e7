"""The bridge to timm: every model in :func:`visattn.list_models` is a timm model
``visattn_<name>``, built through timm's ``build_model_with_cfg``, so timm's options work:

* ``features_only=True`` with ``out_indices`` (:class:`~visattn.models.features.FeatureStages`,
  timm's ``FeatureGetterNet`` over the model's ``forward_intermediates``, scriptable),
  ``feature_info``;
* ``pretrained=True`` with ``pretrained_cfg_overlay=dict(file=PATH)``: a visattn checkpoint or
  torchvision / timm ResNet weights, loaded by :func:`visattn.models.load_checkpoint`
  (attention keys reported as new; the classifier kept at its initialisation when
  ``num_classes`` differs). Without a file, ``pretrained=True`` raises ``ValueError``: visattn
  has no weights to download;
* the builder's options and placements (``attention=``), as for :func:`visattn.create_model`.

The bridge follows the model registry (:func:`connect`, called once when :mod:`visattn` is
imported): a name that enters :func:`visattn.list_models` is registered in timm, one that
leaves it is removed from timm. Entrypoints live in the real module
:mod:`visattn.models.timm_entrypoints`.
"""

from __future__ import annotations

import functools
import math
import os
import socket
from collections import deque
from collections.abc import Callable, Sequence
from typing import Any
from urllib.parse import urlsplit

import torch.nn as nn
from huggingface_hub import try_to_load_from_cache
from timm.models import DefaultCfg, PretrainedCfg, build_model_with_cfg, is_model
from timm.models import _registry as timm_registry
from timm.models import register_model as timm_register

from . import registry, timm_entrypoints
from .checkpoint import read_state_dict
from .factory import create_model, pretrained_cfg_for
from .features import FeatureStages
from .pretrained import PretrainedTag, check_sha256, list_pretrained, timm_filter_fn
from .registry import ModelSpec, get_model_spec

__all__ = [
    "connect",
    "create_timm_model",
    "register_timm_model",
    "unregister_timm_model",
]

_unsubscribe: Callable[[], None] | None = None


def create_timm_model(name: str, pretrained: bool = False, **kwargs: Any) -> nn.Module:
    """What ``timm.create_model(f"visattn_{name}", pretrained, **kwargs)`` runs."""
    spec = get_model_spec(name)
    timm_name = f"visattn_{spec.name}"
    overlay = dict(kwargs.pop("pretrained_cfg_overlay", None) or {})
    cfg = kwargs.pop("pretrained_cfg", None)
    kwargs.pop("cache_dir", None)
    # no tag and a local file: the file is read as any state dict (visattn, torchvision or timm
    # ResNet weights), as before default tags; no tag and no file: timm's default tag
    local = overlay.get("file") or overlay.get("state_dict")
    tag = None if cfg is None and local else _released_tag(spec.name, cfg)
    if cfg is None and tag is None:
        cfg = _untagged_cfg(timm_name)
    if tag is not None:  # a released file: its own eval transform, loaded through its converter
        _check_reachable(tag, pretrained, overlay, cfg)
        file = overlay.get("file") or (cfg.get("file") if isinstance(cfg, dict) else None)
        if pretrained and file and overlay.get("state_dict") is None:
            # read by visattn (weights-only, safetensors too, named errors, the checksum)
            if tag.sha256:
                check_sha256(file, tag.sha256)
            overlay["state_dict"] = read_state_dict(file)[0]
        options = {k: v for k, v in kwargs.items() if k not in ("features_only", "out_indices")}
        ours = pretrained_cfg_for(spec, num_classes=options.get("num_classes"), options=options)
        keep = {k: ours[k] for k in ("architecture", "first_conv", "classifier")}
        if options:  # an option such as output_stride changes the map: the tag's pool size too
            keep["pool_size"] = _pool_size(tag.input_size, ours)
        try:
            model = build_model_with_cfg(
                functools.partial(create_model, spec.name),
                timm_name,
                pretrained,
                pretrained_cfg=cfg,
                pretrained_cfg_overlay={**keep, "custom_load": False, **overlay},
                pretrained_filter_fn=timm_filter_fn(tag),
                feature_cfg={
                    "feature_cls": FeatureStages,
                    "out_indices": tuple(range(spec.feature_levels)),
                },
                **kwargs,
            )
        except OSError as e:  # huggingface_hub's and urllib's download errors are OSErrors
            if not pretrained:
                raise
            raise OSError(_offline_hint(tag, e)) from e
        if isinstance(getattr(model, "pretrained_cfg", None), dict):
            model.pretrained_cfg.pop("state_dict", None)  # loaded: the config keeps the file
        return model
    if pretrained and not (overlay.get("file") or (isinstance(cfg, dict) and cfg.get("file"))):
        raise ValueError(
            f"{timm_name} has no pretrained weights to download; pass a local state_dict "
            "(visattn checkpoint, torchvision or timm ResNet weights) with "
            "pretrained_cfg_overlay=dict(file='weights.pth'), or use "
            "visattn.create_model(..., checkpoint_path=...)"
        )
    options = {k: v for k, v in kwargs.items() if k not in ("features_only", "out_indices")}
    ours = pretrained_cfg_for(
        spec,
        num_classes=options.get("num_classes"),
        in_chans=options.get("in_chans", 3),
        options=options,
    )
    return build_model_with_cfg(
        functools.partial(create_model, spec.name),
        timm_name,
        pretrained,
        pretrained_cfg=cfg,
        pretrained_cfg_overlay={**ours, **overlay},
        feature_cfg={
            "feature_cls": FeatureStages,
            "out_indices": tuple(range(spec.feature_levels)),
        },
        **kwargs,
    )


def _pool_size(input_size: Sequence[int], like: dict[str, Any]) -> tuple[int, ...]:
    """The feature map at ``input_size`` (C, H, W) of a network whose config ``like`` gives its
    map (``pool_size``) at its own ``input_size``: the same stride, rounded up as convs do."""
    strides = [i / p for i, p in zip(like["input_size"][1:], like["pool_size"])]
    return tuple(math.ceil(i / s) for i, s in zip(input_size[1:], strides))


def _untagged_cfg(timm_name: str) -> PretrainedCfg | None:
    """The model's config without weights (its ``""`` entry), timm's default when it has no tag."""
    default = timm_entrypoints.default_cfgs.get(timm_name)
    return default.cfgs.get("") if default is not None else None


def _offline_hint(tag: PretrainedTag, error: OSError) -> str:
    where = tag.hf_hub_id or tag.url
    return (
        f"visattn_{tag.name}: could not get the weights from {where} "
        f"({type(error).__name__}: {str(error).splitlines()[0][:200]}). Offline, download the "
        "file elsewhere and pass pretrained_cfg_overlay=dict(file=PATH); with the file already "
        "in the Hugging Face cache, set HF_HUB_OFFLINE=1 (no retries, no network)"
    )


def _check_reachable(tag: PretrainedTag, pretrained: bool, overlay: dict, cfg: Any) -> None:
    """``pretrained=True`` on a tag timm cannot download needs a local file: say where to get
    it, instead of timm fetching a download page."""
    given = overlay.get("file") or overlay.get("state_dict")
    if isinstance(cfg, dict):
        given = given or cfg.get("file") or cfg.get("state_dict")
    if pretrained and not tag.downloadable and not given:
        raise ValueError(
            f"visattn_{tag.name}: the authors publish this file for download by hand "
            f"({tag.page}); download it, then pass pretrained_cfg_overlay=dict(file=PATH)"
        )
    if pretrained and not given and not _cached(tag):
        host = urlsplit(tag.url).hostname if tag.url else "huggingface.co"
        if host and not online(host):  # fail at once, not after the hub's retries
            raise OSError(
                _offline_hint(tag, OSError(f"no connection to {host} (tried for {PROBE_S:g} s)"))
            )


#: how long :func:`online` waits for a connection
PROBE_S = 3.0


def online(host: str, port: int = 443) -> bool:
    """Whether a TCP connection to ``host`` opens within :data:`PROBE_S` seconds (``False`` at
    once under ``HF_HUB_OFFLINE=1``)."""
    if os.environ.get("HF_HUB_OFFLINE", "").lower() in ("1", "true", "yes"):
        return False
    try:
        with socket.create_connection((host, port), timeout=PROBE_S):
            return True
    except OSError:
        return False


def _cached(tag: PretrainedTag) -> bool:
    """Whether the tag's hub file is in the Hugging Face cache already (timm reads it there)."""
    if not tag.hf_hub_id:
        return False
    names = ("model.safetensors", "pytorch_model.bin", "open_clip_pytorch_model.bin")
    return any(isinstance(try_to_load_from_cache(tag.hf_hub_id, n), str) for n in names)


def _released_tag(name: str, cfg: Any) -> PretrainedTag | None:
    """The :class:`~visattn.models.pretrained.PretrainedTag` timm resolved ``cfg`` from, if any."""
    if cfg is None:  # no tag given: timm's default, the first of the model's configs
        default = timm_entrypoints.default_cfgs.get(f"visattn_{name}")
        tag = default.tags[0] if default is not None else None
    elif isinstance(cfg, str):  # timm passes the tag of "name.tag" as the config
        tag = cfg
    elif isinstance(cfg, dict):
        tag = cfg.get("tag")
    else:
        tag = getattr(cfg, "tag", None)
    if not tag:
        return None
    for t in list_pretrained(f"{name}.{tag}"):
        return t
    return None


def _default_cfg(spec: ModelSpec) -> DefaultCfg:
    """timm's ``DefaultCfg`` of ``spec``: one entry per released tag in the publisher's order
    (for weights timm hosts, timm's order), the first being the default tag, which
    ``pretrained=True`` without a tag loads; then the untagged config (no weights). Each tag's
    ``pool_size`` follows its input size."""
    base = pretrained_cfg_for(spec)
    cfgs = {}
    for t in list_pretrained(f"{spec.name}.*"):
        pool = _pool_size(t.input_size, base)
        cfgs[t.tag] = PretrainedCfg(
            **{**base, "custom_load": False, **t.pretrained_cfg(), "pool_size": pool}
        )
    cfgs[""] = PretrainedCfg(**{k: v for k, v in base.items() if k != "paper_ids"})
    return DefaultCfg(tags=deque(cfgs), cfgs=cfgs)


def register_timm_model(name: str) -> str:
    """Register ``visattn_<name>`` in timm (once); returns the timm name."""
    timm_name = f"visattn_{name}"
    if is_model(timm_name):
        return timm_name
    spec = get_model_spec(name)

    def entrypoint(pretrained: bool = False, **kwargs: Any) -> nn.Module:
        return create_timm_model(name, pretrained, **kwargs)

    entrypoint.__name__ = entrypoint.__qualname__ = timm_name
    entrypoint.__module__ = timm_entrypoints.__name__
    entrypoint.__doc__ = f"visattn model {name!r} ({spec.paper}); see visattn.create_model."
    setattr(timm_entrypoints, timm_name, entrypoint)
    default = timm_entrypoints.default_cfgs[timm_name] = _default_cfg(spec)
    timm_register(entrypoint)
    # timm lists a tag as pretrained when it can download it; the tags downloaded by hand are
    # listed too (their config's notes say where to get the file), as the weights exist
    for tag in default.cfgs:
        if tag:
            timm_registry._model_has_pretrained.add(f"{timm_name}.{tag}")
    # the bare name stands for its default tag, which is listed already (as timm's own models)
    timm_registry._model_has_pretrained.discard(timm_name)
    return timm_name


def unregister_timm_model(name: str) -> None:
    """Remove ``visattn_<name>`` from timm (a no-op if timm does not have it). timm has no
    public way to remove a model: its registry's entries for the name are dropped."""
    timm_name = f"visattn_{name}"
    if timm_registry._model_entrypoints.pop(timm_name, None) is None:
        return
    timm_registry._model_to_module.pop(timm_name, None)
    for models in timm_registry._module_to_models.values():
        models.discard(timm_name)
    for tagged in [*timm_registry._model_with_tags.pop(timm_name, []), timm_name]:
        timm_registry._model_pretrained_cfgs.pop(tagged, None)
        timm_registry._model_has_pretrained.discard(tagged)
    timm_registry._model_default_cfgs.pop(timm_name, None)
    timm_entrypoints.default_cfgs.pop(timm_name, None)
    if timm_name in timm_entrypoints.__all__:
        timm_entrypoints.__all__.remove(timm_name)
    vars(timm_entrypoints).pop(timm_name, None)


def _follow(added: Sequence[str], removed: Sequence[str]) -> None:
    for name in removed:
        unregister_timm_model(name)
    for name in added:
        register_timm_model(name)


def connect() -> None:
    """Follow the model registry from now on: every name in :func:`visattn.list_models` is a
    timm model ``visattn_<name>`` (those listed already are registered at once). Called when
    :mod:`visattn` is imported; calling it again does nothing."""
    global _unsubscribe
    if _unsubscribe is None:
        _unsubscribe = registry.subscribe(_follow)
