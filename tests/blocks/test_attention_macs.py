"""Attention is counted as its equation, the same on every device.

``torch.utils.flop_counter`` counts ``F.scaled_dot_product_attention`` as 0 when it lands on
PyTorch's CPU flash kernel, so the MACs of every attention block were its convolutions only
(non-local in a ResNet-56 at 139.6M instead of 311.9M). Here each block's count is held against
an independent one: the block's other work (its attention replaced by a stub that costs
nothing) plus ``Lq * Lk * (E + R + Ev)`` per attention call, from the shapes of the queries, keys,
values and factored biases the block passes (the equation ``softmax(q k^T + q_b k_b^T) v``).
"""

from __future__ import annotations

import math

import pytest
import torch

import visattn
from visattn.blocks import _attention
from visattn.profile import count_macs

BLOCKS = visattn.list_blocks()
SHAPE = (1, 32, 14, 14)


def _calls(name: str) -> list[tuple[torch.Size, ...]]:
    """Shapes ``(q, k, v, q_bias)`` of each attention call of one eval forward of ``name``."""
    seen = []
    math_path = _attention._math

    def spy(q, k, v, scale, bias, q_bias, k_bias, grid_bias=None):
        seen.append((q.shape, k.shape, v.shape, None if q_bias is None else q_bias.shape))
        return math_path(q, k, v, scale, bias, q_bias, k_bias, grid_bias)

    blk = visattn.create_block(name, SHAPE[1])
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(_attention, "_math", spy)
        count_macs(blk, SHAPE)
    return seen


def _equation(q: torch.Size, k: torch.Size, v: torch.Size, qb: torch.Size | None) -> int:
    lead = math.prod(q[:-2])
    r = 0 if qb is None else qb[-1]
    return lead * q[-2] * k[-2] * (q[-1] + r + v[-1])


ATTENTION = [name for name in BLOCKS if _calls(name)]


def test_the_blocks_with_softmax_attention_are_found() -> None:
    assert {"nonlocal", "mhsa", "halo", "danet", "bra", "agent_attn", "area_attn"} <= set(ATTENTION)


@pytest.mark.parametrize("name", ATTENTION)
def test_macs_are_the_other_work_plus_the_attention_equation(name: str) -> None:
    blk = visattn.create_block(name, SHAPE[1])
    total = count_macs(blk, SHAPE)
    calls = _calls(name)

    def free(q, k, v, scale, bias, q_bias, k_bias, grid_bias=None):  # same shapes, no MACs
        out = torch.zeros(*q.shape[:-1], v.shape[-1], dtype=v.dtype)
        return out, torch.zeros(*q.shape[:-1], k.shape[-2], dtype=v.dtype)

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(_attention, "_math", free)
        others = count_macs(blk, SHAPE)
    assert total == others + sum(_equation(*c) for c in calls)
    assert total > others


def test_the_fused_kernel_on_cpu_is_counted_too() -> None:
    """Code that calls ``F.scaled_dot_product_attention`` itself (timm's blocks): the CPU flash
    kernel gets the counter's formula for the CUDA kernels, ``2 L^2 (E + Ev)`` FLOPs."""
    from torch.utils.flop_counter import FlopCounterMode

    from visattn.profile import _CPU_ATTENTION

    q = torch.randn(2, 4, 49, 16)
    with FlopCounterMode(display=False, custom_mapping=_CPU_ATTENTION) as counter:
        torch.nn.functional.scaled_dot_product_attention(q, q, q)
    assert counter.get_total_flops() == 2 * 2 * 4 * 49 * 49 * (16 + 16)
