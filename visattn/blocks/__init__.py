"""Attention blocks. Every module of this package whose name does not start with ``_``
registers its blocks when imported, and is imported here: a new block is its own file (and its
test), with no list to extend. :data:`_SHARED` names the modules that hold no block."""

import importlib as _importlib
import pkgutil as _pkgutil

from .capture import capture_attention, record_attention
from .registry import (
    FAMILIES,
    BlockInfo,
    UnknownBlockError,
    block_info,
    create_block,
    is_block,
    list_blocks,
    register_block,
)
from .timm_classes import timm_attn

#: the modules that hold what blocks share (the registry, capture, conventions, ...), no block
_SHARED = frozenset({"aliases", "capture", "conventions", "identity", "registry", "timm_classes"})
for _module in _pkgutil.iter_modules(__path__):
    if not _module.name.startswith("_") and _module.name not in _SHARED:
        _importlib.import_module(f"{__name__}.{_module.name}")

__all__ = [
    "FAMILIES",
    "BlockInfo",
    "UnknownBlockError",
    "block_info",
    "capture_attention",
    "create_block",
    "is_block",
    "list_blocks",
    "record_attention",
    "register_block",
    "timm_attn",
]
