"""timm's attention type strings that are not visattn block names, as aliases.

timm's ``create_attn(name, channels)`` (``timm/layers/create_attn.py``) accepts 21 strings. Those
named like a visattn block (``se``, ``ese``, ``eca``, ``ge``, ``gc``, ``cbam``, ``coord``, ``ela``,
``strip``, ``sk``, ``splat``, ``lambda``, ``halo``, ``bat``) are that block. The seven others are
variants of a visattn block: each alias below is the block plus the options that make it compute
the function of timm's module (the same weights give the same outputs; see
``tests/blocks/test_timm_aliases.py``). ``create_block``, ``block_info`` and every placement accept
them; :func:`visattn.list_blocks` lists only the blocks themselves.

Widths are bound in timm's terms (``rd_ratio`` with timm's rounding, ``min_kernel`` for ECA's
adaptive kernel), so an alias has timm's module's parameters at every width
(``tests/blocks/test_timm_aliases.py`` sweeps ``C`` = 8 ... 1024 and odd widths).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from timm.layers import make_divisible

__all__ = ["TIMM_ALIASES", "BlockAlias"]


@dataclass(frozen=True)
class BlockAlias:
    """An alternative name: block ``alias_of`` with options ``args`` (the caller's override)."""

    name: str
    alias_of: str
    args: MappingProxyType[str, Any]
    timm_module: str
    notes: str = field(default="")


def _timm_nl_width(value: float) -> int:
    """timm's NonLocalAttn width: ``make_divisible(v, 8)`` with its default ``round_limit=0.9``
    (rounded to the nearest multiple of 8, at least 8, and up when that loses over 10%)."""
    return int(make_divisible(value, 8))


def _alias(name: str, alias_of: str, timm_module: str, notes: str = "", **args: Any) -> BlockAlias:
    return BlockAlias(name, alias_of, MappingProxyType(args), timm_module, notes)


TIMM_ALIASES: MappingProxyType[str, BlockAlias] = MappingProxyType(
    {
        a.name: a
        for a in (
            _alias(
                "ecam",
                "eca",
                "EcaModule(use_mlp=True)",
                "ECA's 1-D conv, then timm's MLP (C -> C/8 rounded to 8 -> C) before the gate; "
                "the adaptive kernel at least 3, as timm's",
                mlp=True,
                min_kernel=3,
            ),
            _alias(
                "ceca",
                "eca",
                "CecaModule",
                "ECA with circular padding of the channel axis; the adaptive kernel at least 3, "
                "as timm's",
                padding="circular",
                min_kernel=3,
            ),
            _alias(
                "gca",
                "gc",
                "GlobalContext(fuse_add=True, fuse_scale=False)",
                "GCNet's addition fusion with timm's bottleneck 1/8, LayerNorm eps 1e-6 and the "
                "last conv at PyTorch's default init (timm's init_last_zero=False)",
                rd_ratio=1 / 8,
                rd_divisor=1,
                fusion="add",
                norm_eps=1e-6,
                zero_init_last=False,
            ),
            _alias(
                "lcbam",
                "cbam",
                "LightCbamModule",
                "light CBAM: one MLP pass on the mean of the average- and max-pooled vectors "
                "(MLP without biases, as timm's default), one-map spatial conv with BN",
                light=True,
                use_bn=True,
                mlp_bias=False,
                rd_ratio=1 / 16,
                rd_divisor=1,
            ),
            _alias(
                "scoord",
                "coord",
                "SimpleCoordAttn",
                "simplified coordinate attention (no BN, biased 1x1 conv, SiLU, one gate on the "
                "sum of both directions) with timm's width C/6 rounded to a multiple of 8",
                simple=True,
                act_layer="silu",
                reduction=6,
                divisor=8,
            ),
            _alias(
                "bottleneck",
                "mhsa",
                "BottleneckAttn",
                "BoTNet's MHSA with timm's scaling of q.k only (scale_pos_embed=False); timm needs "
                "feat_size, visattn defaults to 14; at widths that are not a multiple of 8 timm "
                "rounds the q/k depth up to one and visattn does not",
                scale_pos=False,
            ),
            _alias(
                "nl",
                "nonlocal",
                "NonLocalAttn",
                "non-local block with timm's inner width C/8 (rounded to 8, as timm's "
                "rd_divisor) and scores scaled by 1/sqrt(C); its W_z conv has a bias before the "
                "BN, as timm's",
                rd_ratio=1 / 8,
                rd_round_fn=_timm_nl_width,
                score="scaled_dot",
                scale_by="channels",
                z_bias=True,
            ),
        )
    }
)
