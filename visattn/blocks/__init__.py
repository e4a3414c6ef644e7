"""Attention blocks. Each module below registers its blocks when imported; this list is the
one place that says which modules make up the zoo."""

from . import (
    a2,  # noqa: F401
    acmix,  # noqa: F401
    agent_attn,  # noqa: F401
    area_attn,  # noqa: F401
    bam,  # noqa: F401
    bat,  # noqa: F401
    bra,  # noqa: F401
    caa,  # noqa: F401
    cbam,  # noqa: F401
    cc,  # noqa: F401
    coord,  # noqa: F401
    cot,  # noqa: F401
    danet,  # noqa: F401
    eca,  # noqa: F401
    ela,  # noqa: F401
    ema,  # noqa: F401
    ese,  # noqa: F401
    external,  # noqa: F401
    fca,  # noqa: F401
    gam,  # noqa: F401
    gc,  # noqa: F401
    gct,  # noqa: F401
    ge,  # noqa: F401
    gsop,  # noqa: F401
    halo,  # noqa: F401
    lambda_layer,  # noqa: F401
    lsk,  # noqa: F401
    lska,  # noqa: F401
    mhsa,  # noqa: F401
    mlca,  # noqa: F401
    non_local,  # noqa: F401
    psa,  # noqa: F401
    residual_attention,  # noqa: F401
    scsa,  # noqa: F401
    scse,  # noqa: F401
    se,  # noqa: F401
    sge,  # noqa: F401
    shuffle,  # noqa: F401
    simam,  # noqa: F401
    sk,  # noqa: F401
    spatial,  # noqa: F401
    splat,  # noqa: F401
    srm,  # noqa: F401
    strip,  # noqa: F401
    triplet,  # noqa: F401
)
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
