"""Parameters, multiply-accumulates and latency of a module; BN statistics for an untrained one.

Multiply-accumulates are counted with ``torch.utils.flop_counter.FlopCounterMode``, which sees
every matmul, convolution and batched matmul dispatched to ATen, including those inside attention
and covariance pooling that forward-hook counters (thop, ptflops) miss. It counts a
multiply-add as 2 FLOPs; papers and torchvision report multiply-accumulates, so we halve it.
Element-wise work (activations, pooling, the gating multiply) is not counted, as in those reports.

Attention is counted as its equation on every device: visattn's blocks run their math path while
counted (``q k^T`` and ``weights v`` at their own widths; the same function as the fused
kernel), and a ``F.scaled_dot_product_attention`` call of other code (timm's blocks) that lands
on PyTorch's CPU flash kernel, which the counter leaves out, is counted with the counter's own
formula for the CUDA kernels.
"""

from __future__ import annotations

import math
import os
import platform
import statistics
import time
from collections.abc import Sequence
from pathlib import Path

import torch
import torch.nn as nn
from torch.utils.flop_counter import FlopCounterMode

from ._nets import device_of, eval_mode, factory_of
from .blocks._attention import counted_as_equation

__all__ = [
    "calibrate_batch_norm",
    "count_macs",
    "count_params",
    "cpu_seconds",
    "device_description",
    "measure_latency",
    "vector_extensions",
]

#: the CPU flags that decide which kernels run (hosts differ: AVX2 AMD, AVX-512 and AMX Intel)
VECTOR_FLAGS = ("avx2", "avx512f", "avx512_bf16", "amx_tile", "amx_bf16")


def _cpuinfo() -> tuple[str, list[str]]:
    """The CPU's model name, with its family and model numbers where ``/proc/cpuinfo`` gives
    them (hosts of one name differ: an AMD EPYC is Zen 2, 3 or 4, family 23 or 25 and its
    model), and its flags (the platform's name elsewhere)."""
    name, flags = platform.processor() or platform.machine(), []
    try:
        lines = Path("/proc/cpuinfo").read_text().splitlines()
    except OSError:
        lines = []
    fields: dict[str, str] = {}
    for line in lines:
        key, _, value = line.partition(":")
        if key.strip() == "flags":
            flags = value.split()
            break
        fields.setdefault(key.strip(), value.strip())
    name = fields.get("model name") or name
    if fields.get("cpu family") and fields.get("model"):
        name += f", family {fields['cpu family']} model {fields['model']}"
    return name, flags


def vector_extensions(flags: Sequence[str] | None = None) -> list[str]:
    """The :data:`VECTOR_FLAGS` among ``flags`` (default: this CPU's)."""
    flags = _cpuinfo()[1] if flags is None else flags
    return [f for f in VECTOR_FLAGS if f in flags]


def device_description(device: torch.device | str = "cpu") -> str:
    """The processor that runs ``device``'s work, for a timing's label: the CPU's model name
    with its :func:`vector_extensions`, or the GPU's name."""
    device = torch.device(device)
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    if device.type != "cpu":
        return device.type
    name, flags = _cpuinfo()
    found = vector_extensions(flags)
    return f"{name} ({', '.join(found)})" if found else name


def cpu_seconds() -> float:
    """CPU seconds (user and system) this process and its child processes that have ended
    (data-loader workers, for one) have spent so far; differences of two readings give a piece
    of work's CPU time, which, unlike wall time, does not grow while the process is stopped or
    waits for the processor. One busy thread for one second adds one second."""
    t = os.times()
    return t.user + t.system + t.children_user + t.children_system


def count_params(module: nn.Module, *, trainable_only: bool = False) -> int:
    """Number of parameters (all, or only those with ``requires_grad``)."""
    return sum(p.numel() for p in module.parameters() if p.requires_grad or not trainable_only)


def _example(module: nn.Module, shape: Sequence[int] | torch.Tensor) -> torch.Tensor:
    if isinstance(shape, torch.Tensor):
        return shape
    return torch.randn(*shape, **{"dtype": torch.float32, **factory_of(module)})


@torch.no_grad()
def count_macs(module: nn.Module, shape: Sequence[int] | torch.Tensor) -> int:
    """Multiply-accumulates of one forward pass in eval mode for an input of ``shape``
    (per batch: divide by ``N`` for a per-image figure)."""
    x = _example(module, shape)
    counter = FlopCounterMode(display=False, custom_mapping=_CPU_ATTENTION)
    with eval_mode(module), counted_as_equation(), counter:
        module(x)
    return counter.get_total_flops() // 2


def _cpu_flash_attention(q, k, v, *args, out_shape=None, **kwargs) -> int:
    """FLOPs of ``softmax(q k^T) v`` for query, key and value shapes ``(..., L, E)``."""
    lead = math.prod(q[:-2])
    return 2 * lead * q[-2] * k[-2] * (q[-1] + v[-1])


def _cpu_flash_attention_backward(grad, q, k, v, *args, out_shape=None, **kwargs) -> int:
    """Twice the forward's products (gradients of q, k, v and the recomputed weights), as
    ``torch.utils.flop_counter``'s formula for the CUDA kernels."""
    lead = math.prod(q[:-2])
    return 2 * lead * q[-2] * k[-2] * (2 * q[-1] + 2 * v[-1])


_aten = torch.ops.aten
_CPU_ATTENTION = {
    _aten._scaled_dot_product_flash_attention_for_cpu: _cpu_flash_attention,
    _aten._scaled_dot_product_flash_attention_for_cpu_backward: _cpu_flash_attention_backward,
}


@torch.no_grad()
def measure_latency(
    module: nn.Module,
    shape: Sequence[int] | torch.Tensor,
    *,
    warmup: int = 3,
    repeats: int = 10,
) -> float:
    """Median wall time of one eval-mode forward pass, in milliseconds."""
    x = _example(module, shape)
    sync = torch.cuda.synchronize if x.is_cuda else (lambda: None)
    times = []
    with eval_mode(module):
        for _ in range(warmup):
            module(x)
        sync()
        for _ in range(repeats):
            t0 = time.perf_counter()
            module(x)
            sync()
            times.append(time.perf_counter() - t0)
    return 1000.0 * statistics.median(times)


@torch.no_grad()
def calibrate_batch_norm(
    module: nn.Module,
    shape: Sequence[int],
    *,
    batches: int = 4,
    seed: int = 0,
) -> nn.Module:
    """Set every BatchNorm's running statistics from ``batches`` random inputs of ``shape``
    ``(N, C, H, W)`` (their cumulative average, as if it had trained on them); returns the module
    in eval mode, with its momenta restored.

    An untrained deep network's eval-mode activations grow from layer to layer: at their own
    initialisation (running mean 0, variance 1) a ResNet-56 with Residual Attention units gives
    outputs near 1e7, where float32 rounding alone is larger than any fixed tolerance and latency
    is measured on denormal-free but meaningless numbers. Calibrated, outputs are O(1-10), as
    after training. Only the BN buffers change; parameters do not.
    """
    bns = [m for m in module.modules() if isinstance(m, nn.modules.batchnorm._BatchNorm)]
    momenta = [m.momentum for m in bns]
    for m in bns:
        m.reset_running_stats()
        m.momentum = None  # cumulative moving average
    gen = torch.Generator().manual_seed(seed)
    device = device_of(module)
    module.train()
    try:
        for _ in range(batches):
            module(torch.randn(*shape, generator=gen).to(device))
    finally:
        for m, momentum in zip(bns, momenta):
            m.momentum = momentum
    return module.eval()
