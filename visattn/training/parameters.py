"""A network's parameters by kind (backbone, attention, head): the groups of ``lr_mult`` and
the part that ``freeze_backbone_epochs`` keeps fixed."""

from __future__ import annotations

import torch

from ..blocks.identity import IdentityAtInit
from ..blocks.registry import is_block

__all__ = ["PARAM_KINDS", "attention_modules", "split_parameters"]

#: the parameter kinds of :func:`split_parameters`
PARAM_KINDS = ("backbone", "attention", "head")


def attention_modules(net: torch.nn.Module) -> list[torch.nn.Module]:
    """The registered attention blocks of ``net`` and their identity-init wrappers."""
    return [m for m in net.modules() if is_block(m) or isinstance(m, IdentityAtInit)]


def split_parameters(net: torch.nn.Module) -> dict[str, list[tuple[str, torch.nn.Parameter]]]:
    """Named parameters of ``net`` by kind: ``attention`` (inside a registered attention block
    or its identity-init wrapper), ``head`` (the classifier, ``net.get_classifier()``) and
    ``backbone`` (everything else). Every parameter appears exactly once."""
    head = net.get_classifier() if hasattr(net, "get_classifier") else None
    head_ids = {id(p) for p in head.parameters()} if isinstance(head, torch.nn.Module) else set()
    attn_ids = {id(p) for m in attention_modules(net) for p in m.parameters()}
    out: dict[str, list[tuple[str, torch.nn.Parameter]]] = {k: [] for k in PARAM_KINDS}
    for name, p in net.named_parameters():
        kind = "head" if id(p) in head_ids else "attention" if id(p) in attn_ids else "backbone"
        out[kind].append((name, p))
    return out
