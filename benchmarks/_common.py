"""Shared pieces of the benchmark scripts: timing, peak memory, machine description, tables.

Timing follows the usual rules of micro-benchmarks (timm's ``benchmark.py``, ``torch.utils.
benchmark``): warm-up iterations first, device synchronisation around every sample on CUDA, and
the median of the samples. Implementations that are compared are *interleaved*: sample ``i`` of
every implementation is taken before sample ``i + 1`` of any, in an order that alternates from
one repeat to the next, so that noise from other processes hits all of them alike.
"""

from __future__ import annotations

import csv
import math
import os
import platform
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import torch

from visattn.profile import VECTOR_FLAGS, vector_extensions

DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}
CLOCKS = {"wall": time.perf_counter, "cpu": time.process_time}


def synchronize(device: torch.device | str) -> None:
    """Wait for queued kernels (CUDA only; CPU work is synchronous)."""
    if torch.device(device).type == "cuda":
        torch.cuda.synchronize(device)


def calibrate(fn: Callable[[], Any], device: torch.device | str, min_sample_s: float) -> int:
    """Number of calls of ``fn`` per timing sample so that one sample lasts ``min_sample_s``."""
    synchronize(device)
    t0 = time.perf_counter()
    fn()
    synchronize(device)
    once = max(time.perf_counter() - t0, 1e-6)
    return max(1, math.ceil(min_sample_s / once))


def _machine_busy_s() -> float | None:
    """CPU seconds all processes have spent busy since boot (Linux ``/proc/stat``: user, nice,
    system, irq, softirq and steal over every core), or ``None`` where it cannot be read."""
    try:
        with open("/proc/stat") as f:
            fields = f.readline().split()
        ticks = os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, AttributeError):
        return None
    if len(fields) < 9 or fields[0] != "cpu":
        return None
    user, nice, system, _idle, _iowait, irq, softirq, steal = (int(v) for v in fields[1:9])
    return (user + nice + system + irq + softirq + steal) / ticks


class OtherWork:
    """How many cores other processes kept busy, on average, while the ``with`` block ran: the
    machine's busy CPU time less this process's own, over the block's wall time.

    ``cores`` is near 0 on an idle machine and about 1 per other busy job (a second job skews
    even interleaved ratios); ``None`` where ``/proc/stat`` cannot be read. Unlike the load
    average, which lags by minutes, it covers exactly the timed span.
    """

    cores: float | None = None

    def __enter__(self) -> OtherWork:
        self._start = (_machine_busy_s(), time.process_time(), time.perf_counter())
        return self

    def __exit__(self, *exc: object) -> None:
        busy, own, wall = _machine_busy_s(), time.process_time(), time.perf_counter()
        if busy is None or self._start[0] is None:
            return
        other = (busy - self._start[0]) - (own - self._start[1])
        self.cores = max(0.0, other / max(wall - self._start[2], 1e-9))


def interleaved_median_ms(
    fns: dict[str, Callable[[], Any]],
    *,
    device: torch.device | str,
    warmup: int,
    repeats: int,
    min_sample_s: float = 0.0,
    budget_s: float | None = None,
    min_repeats: int = 5,
    clock: str = "wall",
) -> dict[str, float]:
    """Median milliseconds per call of each function in ``fns``, sampled interleaved.

    Each function is warmed up ``warmup`` times, then ``repeats`` samples are taken, alternating
    the order of the functions every repeat (A B, B A, A B, ...). A sample times ``number`` calls,
    calibrated per function so a sample lasts at least ``min_sample_s`` (short calls otherwise
    drown in timer resolution and Python overhead). With ``budget_s``, slow cases take fewer
    samples (never fewer than ``min_repeats``) so that one comparison lasts about ``budget_s``.

    ``clock="cpu"`` times with ``time.process_time`` (CPU seconds of this process) instead of the
    wall clock: on a machine shared with other jobs it does not count the time the process waits
    for a core, so with ``torch.set_num_threads(1)`` it measures the work itself. (With several
    threads it also counts OpenMP spin-waiting; CPU devices only.)
    """
    if clock not in CLOCKS:
        raise ValueError(f"clock must be one of {sorted(CLOCKS)}, got {clock!r}")
    if clock == "cpu" and torch.device(device).type != "cpu":
        raise ValueError("clock='cpu' only measures CPU work; use the wall clock on accelerators")
    now = CLOCKS[clock]
    for fn in fns.values():
        for _ in range(warmup):
            fn()
    synchronize(device)
    number, once = {}, {}
    for k, fn in fns.items():
        t0 = time.perf_counter()
        number[k] = calibrate(fn, device, min_sample_s)
        once[k] = time.perf_counter() - t0
    if budget_s is not None:
        per_repeat = sum(once[k] * number[k] for k in fns)
        repeats = min(repeats, max(min_repeats, int(budget_s / max(per_repeat, 1e-9))))
    samples: dict[str, list[float]] = {k: [] for k in fns}
    order = list(fns)
    for rep in range(repeats):
        for k in order if rep % 2 == 0 else reversed(order):
            fn, n = fns[k], number[k]
            synchronize(device)
            t0 = now()
            for _ in range(n):
                fn()
            synchronize(device)
            samples[k].append((now() - t0) / n)
    return {k: 1000.0 * statistics.median(v) for k, v in samples.items()}


def _cpu_peak_bytes(fn: Callable[[], Any]) -> int:
    """Peak of CPU bytes allocated minus freed while ``fn`` runs, from the PyTorch profiler's
    allocation events (``profile_memory=True``), relative to what was live when it started."""
    from torch._C._profiler import _EventType
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        fn()
    allocs: list[tuple[int, int]] = []
    stack = list(prof.profiler.kineto_results.experimental_event_tree())
    while stack:
        node = stack.pop()
        if node.tag == _EventType.Allocation and node.extra_fields.device.type == "cpu":
            allocs.append((node.start_time_ns, node.extra_fields.alloc_size))
        stack.extend(node.children)
    allocs.sort()
    live = peak = 0
    for _, nbytes in allocs:
        live += nbytes
        peak = max(peak, live)
    return peak


def peak_memory_mb(fn: Callable[[], Any], device: torch.device | str) -> float:
    """Peak memory, in MiB, that ``fn`` allocates on top of what is live before it.

    CUDA: ``torch.cuda.max_memory_allocated`` after ``reset_peak_memory_stats``, minus the
    memory allocated before the call. CPU: the same quantity rebuilt from the profiler's
    allocation/free events (PyTorch has no CPU peak counter). Both count tensors allocated by
    PyTorch only (not the allocator's cached blocks or library workspaces outside it).
    """
    device = torch.device(device)
    if device.type == "cuda":
        torch.cuda.synchronize(device)
        torch.cuda.reset_peak_memory_stats(device)
        base = torch.cuda.memory_allocated(device)
        fn()
        torch.cuda.synchronize(device)
        return (torch.cuda.max_memory_allocated(device) - base) / 2**20
    if device.type == "cpu":
        return _cpu_peak_bytes(fn) / 2**20
    raise ValueError(f"peak memory: unsupported device type {device.type!r} (use cpu or cuda)")


def _lscpu_model() -> str:
    try:
        out = subprocess.run(["lscpu"], capture_output=True, text=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError):
        return platform.processor() or "unknown CPU"
    fields = dict(line.split(":", 1) for line in out.splitlines() if ":" in line)
    return fields.get("Model name", "unknown CPU").strip()


def machine_description(device: torch.device | str) -> dict[str, str]:
    """What a reader needs to compare timings: CPU/GPU model, cores, threads, library versions."""
    import timm

    device = torch.device(device)
    info = {
        "cpu": _lscpu_model(),
        "cpu_cores": str(os.cpu_count()),
        "torch_threads": str(torch.get_num_threads()),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "timm": timm.__version__,
        "device": str(device),
    }
    if device.type == "cpu":  # which kernels run: hosts differ (AVX2 AMD, AVX-512 and AMX Intel)
        found = vector_extensions()
        info["vector extensions"] = ", ".join(found) or "none of " + ", ".join(VECTOR_FLAGS)
    if device.type == "cuda":
        info["gpu"] = torch.cuda.get_device_name(device)
        info["cuda"] = str(torch.version.cuda)
    try:
        import lightning

        info["lightning"] = lightning.__version__
    except ImportError:
        pass
    return info


def _header(title: str, command: str, device: torch.device | str) -> list[str]:
    """The lines a benchmark's output starts with: title, command, the machine."""
    lines = [f"# {title}", "", f"command: `python {command}`", ""]
    return lines + [f"- {k}: {v}" for k, v in machine_description(device).items()] + [""]


def print_header(title: str, device: torch.device | str) -> None:
    print("\n".join(_header(title, " ".join(sys.argv), device)))


def _fmt(v: Any) -> str:
    if v is None or v == "":
        return ""
    if isinstance(v, float):
        if v == 0:
            return "0"
        return f"{v:.3g}" if abs(v) < 10 else f"{v:.1f}" if abs(v) < 1000 else f"{v:.0f}"
    if isinstance(v, int) and abs(v) >= 10_000:
        return f"{v:,}"
    return str(v)


def markdown_table(rows: Sequence[dict[str, Any]], columns: Sequence[str]) -> str:
    """A GitHub markdown table of ``rows`` restricted to ``columns``."""
    lines = ["| " + " | ".join(columns) + " |", "|" + "|".join("---" for _ in columns) + "|"]
    for r in rows:
        lines.append("| " + " | ".join(_fmt(r.get(c)) for c in columns) + " |")
    return "\n".join(lines)


def write_markdown(
    path: str | Path,
    title: str,
    rows: Sequence[dict[str, Any]],
    columns: Sequence[str],
    *,
    script: str,
    argv: Sequence[str] | None = None,
    notes: Sequence[str] = (),
    device: torch.device | str = "cpu",
) -> None:
    """The markdown beside a benchmark's CSV: ``title``, the command (``script``, the file's
    name, with ``argv``, default the process's arguments), the machine, ``notes`` (a paragraph
    each) and the table of ``rows``; written atomically."""
    from visattn.files import atomic_write_text

    command = " ".join([Path(script).name, *(sys.argv[1:] if argv is None else argv)])
    lines = _header(title, f"benchmarks/{command}", device)
    for note in notes:
        lines += [note, ""]
    atomic_write_text(path, "\n".join([*lines, markdown_table(rows, columns), ""]))


def write_csv(rows: Sequence[dict[str, Any]], path: str | Path, columns: Sequence[str]) -> None:
    """One line per row; missing values are empty cells; floats keep full precision."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(columns), extrasaction="ignore")
        w.writeheader()
        for r in rows:
            w.writerow({c: "" if r.get(c) is None else r.get(c) for c in columns})


def parse_dtype(name: str) -> torch.dtype:
    try:
        return DTYPES[name]
    except KeyError:
        raise ValueError(f"--dtype must be one of {sorted(DTYPES)}, got {name!r}") from None
