"""Identity-at-initialisation: a block that computes exactly its input when it is inserted.

Inserting an attention block into a trained network changes what the network computes: a sigmoid
gate starts near 0.5 and halves every activation. ``create_block(..., init="identity")`` (and the
placement key ``init: identity``) build the block so that ``block(x) == x`` for every ``x``, in
train and eval mode, while its parameters still receive gradients, so training moves it away from
the identity.

A block opts in with a method ``init_identity(self) -> None`` that puts it into its natural
identity form (typically: its last layer starts at zero and its gate becomes ``2 * sigmoid``, so
the gate is exactly 1; or a learnable residual scale starts at 0). Its docstring says which form
it uses. A block without such a method gets the generic form :class:`IdentityAtInit`:
``y = x + gamma * (f(x) - x)`` with a learnable scalar ``gamma`` that starts at 0.
"""

from __future__ import annotations

import torch
import torch.nn as nn

__all__ = [
    "INITS",
    "IdentityAtInit",
    "ScaledSigmoid",
    "identity_form",
    "make_identity",
    "unit_gate",
    "zero_layer",
]

INITS = ("default", "identity")


class ScaledSigmoid(nn.Module):
    """``scale * sigmoid(x)``; with ``scale=2`` a gate whose input is 0 is exactly 1."""

    def __init__(self, scale: float = 2.0) -> None:
        super().__init__()
        self.scale = float(scale)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.sigmoid(x) * self.scale

    def extra_repr(self) -> str:
        return f"scale={self.scale}"


@torch.no_grad()
def zero_layer(layer: nn.Module) -> None:
    """Zero ``layer``'s weight and its bias, if it has one: a branch's last layer starts at 0."""
    nn.init.zeros_(layer.weight)
    if getattr(layer, "bias", None) is not None:
        nn.init.zeros_(layer.bias)


def unit_gate(layer: nn.Module) -> ScaledSigmoid:
    """Zero ``layer``'s weight and bias (the last layer before a gate) and return the gate
    ``2 * sigmoid``, which then gives exactly 1: the identity form of a gated block."""
    zero_layer(layer)
    return ScaledSigmoid(2.0)


class IdentityAtInit(nn.Module):
    """Generic identity-at-init wrapper: ``y = x + gamma * (block(x) - x)``, ``gamma`` starts at 0.

    Shapes: those of the wrapped block, which must keep its input's shape.
    Parameters: the block's plus one (``gamma``).
    """

    def __init__(self, block: nn.Module) -> None:
        super().__init__()
        self.block = block
        self.gamma = nn.Parameter(torch.zeros(1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.gamma * (self.block(x) - x)


def identity_form(cls: type[nn.Module]) -> str:
    """One line saying how ``cls`` becomes the identity (its ``init_identity`` docstring's first
    line, or the generic residual scale)."""
    fn = getattr(cls, "init_identity", None)
    if fn is None:
        return "generic: y = x + gamma * (f(x) - x), gamma = 0 (IdentityAtInit wrapper)"
    doc = (fn.__doc__ or "").strip().splitlines()
    return doc[0] if doc else "native"


def make_identity(block: nn.Module, name: str) -> nn.Module:
    """Put ``block`` into its identity form; returns the block (or its generic wrapper)."""
    if getattr(block, "in_channels", None) is not None and (
        getattr(block, "stride", 1) != 1 or block.out_channels != block.in_channels
    ):
        raise ValueError(
            f"block '{name}': init='identity' needs the output to have the input's shape, but "
            f"this block maps {block.in_channels} to {block.out_channels} channels with stride "
            f"{block.stride}"
        )
    init = getattr(block, "init_identity", None)
    if init is None:
        return IdentityAtInit(block)
    init()
    return block
