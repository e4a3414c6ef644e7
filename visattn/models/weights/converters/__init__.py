"""The converters of released weight files' key layouts into visattn's, one module per source
family (the library or repository that publishes the files). :data:`CONVERTERS` maps each layout's
name (a tag's ``source``, ``load_pretrained(..., source=...)``) to ``fn(state_dict, model) ->
state_dict``, which renames keys, strips nesting and reconciles shapes; the caller checks that
the result fills the model exactly."""

from __future__ import annotations

from . import (
    attention_module,
    ecanet,
    fcanet,
    gct,
    native,
    pytorchinsight,
    simam,
    timm_resnets,
    triplet,
)
from ._keys import Converter

__all__ = ["CONVERTERS", "Converter"]

CONVERTERS: dict[str, Converter] = {
    **native.CONVERTERS,
    **timm_resnets.CONVERTERS,
    **attention_module.CONVERTERS,
    **gct.CONVERTERS,
    **pytorchinsight.CONVERTERS,
    **fcanet.CONVERTERS,
    **ecanet.CONVERTERS,
    **simam.CONVERTERS,
    **triplet.CONVERTERS,
}
