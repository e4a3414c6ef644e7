"""Every registered attention block: parameters, multiply-accumulates, forward and forward+backward
time, peak memory, and the ratio to timm's version of the same block where timm has one.

    python benchmarks/bench_blocks.py                      # full run, CPU fp32
    python benchmarks/bench_blocks.py --quick              # reduced, under a minute
    python benchmarks/bench_blocks.py --device cuda --dtype bf16 --out results/blocks_cuda_bf16.csv
    python benchmarks/bench_blocks.py --channels-last      # channels-last inputs, vs NCHW too
    python benchmarks/bench_blocks.py --large-maps --clock cpu --threads 1   # 14x14 to 56x56

Method (see benchmarks/README.md):

* ``fwd_ms``: one forward pass in eval mode under ``torch.no_grad``;
  ``fwdbwd_ms``: one training-mode forward plus ``backward`` of a fixed random output gradient,
  input with ``requires_grad`` (as inside a network), parameter gradients reset to ``None`` each
  call (``optimizer.zero_grad()``'s default). Median of ``--repeats`` samples after ``--warmup``
  calls; visattn and its timm twin are sampled interleaved, alternating order every repeat.
* ``peak_mb``: memory allocated by one forward+backward on top of what is live before it
  (input, parameters, output gradient); CUDA ``max_memory_allocated``, CPU the profiler's
  allocation events.
* ``macs``: multiply-accumulates of one forward of the whole batch (``visattn.profile.count_macs``,
  matmuls and convolutions; element-wise work is not counted).
* ``ratio_vs_timm``: visattn ``fwdbwd_ms`` / timm ``fwdbwd_ms`` (goal <= 1.05).
* ``check``: the twin is given the visattn block's (randomised) weights and both are run on the
  same input in train and eval mode; ``same`` means the outputs agree to float32 rounding.
* ``--channels-last``: the visattn block and its timm twin are converted with
  ``.to(memory_format=torch.channels_last)`` and fed channels-last input (as inside a channels-last
  network); ``ratio_vs_timm`` then compares the two in that format, and the same visattn block in
  NCHW (``impl`` ``visattn_nchw``, interleaved with them) gives ``cl_vs_nchw`` = visattn
  channels-last ``fwdbwd_ms`` / visattn NCHW ``fwdbwd_ms`` (and ``cl_vs_nchw_fwd`` for the forward).
* ``--large-maps``: the self-attention blocks (mhsa, danet, a2, halo, lambda, and routing, agent
  or area attention where registered) at 14x14, 28x28 and 56x56 (``--large-shape``, batch x
  channels): training-mode forward+backward time and peak memory of the block (``visattn``, the
  fused scaled-dot-product path), of the same block with ``attn_impl="math"`` (``math``: the
  previous path, full ``HW x HW`` logits and softmax; same weights) and of its timm twin, sampled
  interleaved; ``mem_vs_math``, ``time_vs_math``, ``time_vs_timm`` are the ratios of the visattn
  row. Goals at 56x56: memory <= 0.5x and time <= 0.8x the previous path, time <= 1x timm. CPU
  peak memory: the profiler's allocation events (as ``peak_mb`` above), in this process.
* GSoP: the visattn block against the same block whose covariance is computed the way the official
  code does (``X I_hat X^T`` with the ``(HW) x (HW)`` centring matrix ``I_hat``, repeated over
  the batch, and its hand-written backward), at several map sizes; ``ratio_vs_ref`` =
  visattn / reference.
"""

from __future__ import annotations

import argparse
import copy
import inspect
import sys
from collections.abc import Callable

import torch
import torch.nn as nn
from _common import (
    interleaved_median_ms,
    markdown_table,
    parse_dtype,
    peak_memory_mb,
    print_header,
    write_csv,
)
from twins import TWINS, block_of, check_twin, randomize

import visattn
from visattn.profile import count_macs, count_params

COLUMNS = [
    "block",
    "shape",
    "impl",
    "options",
    "device",
    "dtype",
    "memory_format",
    "params",
    "macs",
    "fwd_ms",
    "fwdbwd_ms",
    "peak_mb",
    "ratio_vs_timm",
    "ratio_vs_ref",
    "cl_vs_nchw",
    "cl_vs_nchw_fwd",
    "check",
    "note",
]
TABLE_COLUMNS = [
    "block",
    "shape",
    "impl",
    "options",
    "params",
    "macs",
    "fwd_ms",
    "fwdbwd_ms",
    "peak_mb",
    "ratio_vs_timm",
    "check",
]
SHAPES = ((64, 64, 32, 32), (32, 256, 14, 14))
QUICK_SHAPES = ((16, 64, 32, 32), (8, 256, 14, 14))
GSOP_SHAPES = ((16, 256, 14, 14), (16, 256, 28, 28), (16, 256, 56, 56))
QUICK_GSOP_SHAPES = ((8, 256, 14, 14), (8, 256, 28, 28))
GOAL_RATIO = 1.05
LARGE_MAP_BLOCKS = ("mhsa", "danet", "a2", "halo", "lambda", "bra", "agent_attn", "area_attn")
LARGE_MAP_SIZES = (14, 28, 56)
LARGE_MAP_GOALS = {"mem_vs_math": 0.5, "time_vs_math": 0.8, "time_vs_timm": 1.0}  # at 56x56
LARGE_MAP_COLUMNS = [
    "block",
    "shape",
    "impl",
    "options",
    "device",
    "dtype",
    "clock",
    "fwdbwd_ms",
    "peak_mb",
    "mem_vs_math",
    "time_vs_math",
    "time_vs_timm",
    "check",
    "note",
]


# --------------------------------------------------------------------------------------------
# GSoP reference: covariance as the official code computes it
# --------------------------------------------------------------------------------------------
class _CovpoolIHat(torch.autograd.Function):
    """``Sigma = X I_hat X^T`` with ``I_hat = (1/M)(I - (1/M) 1 1^T)`` built as an ``(M, M)``
    matrix and repeated over the batch, backward ``dX = (G + G^T) X I_hat``: the covariance pooling
    of the official GSoP-Net / iSQRT-COV code (``MPNCOV.CovpoolLayer``), written anew here."""

    @staticmethod
    def forward(ctx, x: torch.Tensor) -> torch.Tensor:
        n, c, h, w = x.shape
        m = h * w
        x = x.reshape(n, c, m)
        i_hat = torch.eye(m, device=x.device) / m - torch.ones(m, m, device=x.device) / (m * m)
        i_hat = i_hat.view(1, m, m).repeat(n, 1, 1).to(x.dtype)
        ctx.save_for_backward(x, i_hat)
        ctx.hw = (h, w)
        return x.bmm(i_hat).bmm(x.transpose(1, 2))

    @staticmethod
    def backward(ctx, grad: torch.Tensor) -> torch.Tensor:
        x, i_hat = ctx.saved_tensors
        gx = (grad + grad.transpose(1, 2)).bmm(x).bmm(i_hat)
        return gx.reshape(*x.shape[:2], *ctx.hw)


class GSoPIHatReference(nn.Module):
    """The visattn GSoP block (same submodules, shared) with the official covariance pooling."""

    def __init__(self, block: nn.Module) -> None:
        super().__init__()
        self.block = block

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b = self.block
        z = b.act(b.bn(b.reduce(x)))
        cov = _CovpoolIHat.apply(z.float())
        s = b.gate(b.fc(b.row_conv(b.row_norm(cov.unsqueeze(-1))))).to(x.dtype)
        return x * s


# --------------------------------------------------------------------------------------------
# Measurement
# --------------------------------------------------------------------------------------------
def _shape_str(shape: tuple[int, ...]) -> str:
    return "x".join(map(str, shape))


def _fwd_fn(m: nn.Module, x: torch.Tensor) -> Callable[[], None]:
    def fn() -> None:
        with torch.no_grad():
            m(x)

    return fn


def _fwdbwd_fn(m: nn.Module, x: torch.Tensor, gy: torch.Tensor) -> Callable[[], None]:
    params = list(m.parameters())

    def fn() -> None:
        for p in params:
            p.grad = None
        x.grad = None
        m(x).backward(gy)

    return fn


def measure(
    modules: dict[str, nn.Module],
    shape: tuple[int, ...],
    args: argparse.Namespace,
    device: torch.device,
    dtype: torch.dtype,
    formats: dict[str, torch.memory_format] | None = None,
) -> dict[str, dict[str, float]]:
    """fwd_ms, fwdbwd_ms (interleaved over the implementations), peak_mb, params, macs.

    ``formats``: the memory format of each implementation's input and output gradient (default
    contiguous); the modules are expected to be converted to it already."""
    formats = {k: (formats or {}).get(k, torch.contiguous_format) for k in modules}
    gen = torch.Generator(device="cpu").manual_seed(args.seed)
    x0 = torch.randn(shape, generator=gen).to(device, dtype)
    with torch.no_grad():
        out_shape = next(iter(modules.values()))(x0).shape
    gy0 = torch.randn(out_shape, generator=gen).to(device, dtype)
    xs = {f: x0.contiguous(memory_format=f) for f in set(formats.values())}
    gys = {f: gy0.contiguous(memory_format=f) for f in set(formats.values())}
    xgs = {f: xs[f].clone(memory_format=torch.preserve_format).requires_grad_(True) for f in xs}
    out: dict[str, dict[str, float]] = {
        k: {"params": count_params(m), "macs": count_macs(m, x0)} for k, m in modules.items()
    }
    for m in modules.values():
        m.eval()
    kw = dict(
        device=device,
        warmup=args.warmup,
        repeats=args.repeats,
        min_sample_s=args.min_sample,
        budget_s=args.budget,
        clock=args.clock,
    )
    for k, ms in interleaved_median_ms(
        {k: _fwd_fn(m, xs[formats[k]]) for k, m in modules.items()}, **kw
    ).items():
        out[k]["fwd_ms"] = ms
    for m in modules.values():
        m.train()
    fns = {k: _fwdbwd_fn(m, xgs[formats[k]], gys[formats[k]]) for k, m in modules.items()}
    for k, ms in interleaved_median_ms(fns, **kw).items():
        out[k]["fwdbwd_ms"] = ms
    for k, fn in fns.items():
        # gradients from the timing runs are freed *before* profiling: a free of a block allocated
        # before the profiler started has no known size and would make the peak look smaller
        xgs[formats[k]].grad = None
        for p in modules[k].parameters():
            p.grad = None
        out[k]["peak_mb"] = peak_memory_mb(fn, device)
    return out


def twins_of(name: str) -> list[str]:
    """The TWINS keys whose visattn block is ``name``."""
    return [k for k in TWINS if block_of(k) == name]


def bench_block(
    name: str,
    shape: tuple[int, ...],
    args: argparse.Namespace,
    device,
    dtype,
    twin_key: str | None = None,
) -> list[dict]:
    c = shape[1]
    spec, check, note = TWINS.get(twin_key or name), "", ""
    if twin_key is not None and block_of(twin_key) != name:
        raise ValueError(f"twin {twin_key!r} is not a twin of block {name!r}")
    options = spec.block_options(shape) if spec is not None else {}
    block = visattn.create_block(name, c, **options).to(device, dtype)
    cl = getattr(args, "channels_last", False)
    modules = {"visattn": block}
    formats = {}
    if cl:  # the NCHW block is a copy: same weights, its own contiguous parameters
        modules["visattn_nchw"] = copy.deepcopy(block)
        block.to(memory_format=torch.channels_last)
        formats = {"visattn": torch.channels_last}
    if spec is not None and any(s % spec.multiple for s in shape[2:]):
        note = f"no twin at this shape: timm needs H, W multiples of {spec.multiple}"
        spec = None
    if spec is not None:
        twin = spec.build(block, c).to(device, dtype)
        check = check_twin(block, twin, spec, c, shape[2:] if spec.sized else None)
        note = spec.note
        modules["timm"] = twin
        if cl:
            twin.to(memory_format=torch.channels_last)
            formats["timm"] = torch.channels_last
    res = measure(modules, shape, args, device, dtype, formats)
    rows = []
    for impl, r in res.items():
        row = dict(block=name, shape=_shape_str(shape), impl=impl, **r)
        row["options"] = ",".join(f"{k}={v}" for k, v in options.items())
        row["memory_format"] = "nchw" if impl == "visattn_nchw" or not cl else "channels_last"
        if impl == "visattn" and "timm" in res:
            row["ratio_vs_timm"] = r["fwdbwd_ms"] / res["timm"]["fwdbwd_ms"]
        if impl == "visattn" and "visattn_nchw" in res:
            row["cl_vs_nchw"] = r["fwdbwd_ms"] / res["visattn_nchw"]["fwdbwd_ms"]
            row["cl_vs_nchw_fwd"] = r["fwd_ms"] / res["visattn_nchw"]["fwd_ms"]
        if impl == "timm" or (note and "timm" not in res):
            row.update(check=check, note=(f"timm '{twin_key}': " if twin_key else "") + note)
        rows.append(row)
    return rows


class _Covariance(nn.Module):
    """A covariance function as a module: ``(N, C, H, W) -> (N, C, C)``."""

    def __init__(self, fn: Callable[[torch.Tensor], torch.Tensor]) -> None:
        super().__init__()
        self.fn = fn

    def forward(self, z: torch.Tensor) -> torch.Tensor:
        return self.fn(z)


def _rel_diff(a: torch.Tensor, b: torch.Tensor) -> str:
    worst = ((a - b).abs().max() / a.abs().max()).item()
    return f"same (rel {worst:.0e})" if worst < 1e-4 else f"DIFFERS (rel {worst:.2g})"


def bench_gsop_reference(shape: tuple[int, ...], args, device, dtype) -> list[dict]:
    """The GSoP block and its covariance pooling alone against the official-style computation."""
    c = shape[1]
    block = visattn.create_block("gsop", c).to(device, dtype)
    b = copy.deepcopy(block).float().cpu()
    randomize(b, torch.Generator().manual_seed(0))
    x = torch.randn(4, c, 12, 10)
    with torch.no_grad():
        check = _rel_diff(b(x), GSoPIHatReference(b)(x))
    cases = [("gsop", shape, {"visattn": block, "official_ihat": GSoPIHatReference(block)}, check)]
    cov_fn = getattr(sys.modules[type(block).__module__], "_covariance_fp32", None)
    if cov_fn is not None:  # the covariance alone, on the reduced feature (N, C', H, W)
        z_shape = (shape[0], block.rd_channels, *shape[2:])
        z = torch.randn(4, block.rd_channels, 12, 10)
        cov_check = _rel_diff(cov_fn(z), _CovpoolIHat.apply(z))
        mods = {"visattn": _Covariance(cov_fn), "official_ihat": _Covariance(_CovpoolIHat.apply)}
        cases.append(("gsop_covariance", z_shape, mods, cov_check))
    rows = []
    for name, shp, mods, chk in cases:
        res = measure(mods, shp, args, device, dtype)
        for impl, m in res.items():
            row = dict(block=name, shape=_shape_str(shp), impl=impl, **m)
            if impl == "visattn":
                row["ratio_vs_ref"] = m["fwdbwd_ms"] / res["official_ihat"]["fwdbwd_ms"]
            else:
                row.update(check=chk, note="covariance X I_hat X^T, (HW)x(HW) I_hat (official)")
            rows.append(row)
    return rows


# --------------------------------------------------------------------------------------------
# Large maps: fused attention vs the previous (math) path vs timm
# --------------------------------------------------------------------------------------------
def _has_option(name: str, option: str) -> bool:
    return option in inspect.signature(visattn.block_info(name).cls).parameters


def bench_large_map(name: str, shape: tuple[int, ...], args, device, dtype) -> list[dict]:
    """One block at one large shape: visattn (fused), math (previous path), timm twin."""
    c, spec = shape[1], TWINS.get(name)
    options = dict(spec.options) if spec is not None else {}
    if spec is not None and spec.sized is not None:
        options.update(spec.sized(shape))
    block = visattn.create_block(name, c, **options).to(device, dtype)
    modules, notes = {"visattn": block}, {}
    if _has_option(name, "attn_impl"):
        math_block = visattn.create_block(name, c, **options, attn_impl="math").to(device, dtype)
        math_block.load_state_dict(block.state_dict())
        modules["math"] = math_block
    else:
        notes["visattn"] = "no HW x HW matrix: the previous path is this one"
    check = ""
    if spec is not None and not any(s % spec.multiple for s in shape[2:]):
        twin = spec.build(block, c).to(device, dtype)
        if shape[2] == min(LARGE_MAP_SIZES):  # the equivalence check once, at the smallest map
            check = check_twin(block, twin, spec, c, shape[2:] if spec.sized else None)
        modules["timm"] = twin
        notes["timm"] = spec.note
    gen = torch.Generator(device="cpu").manual_seed(args.seed)
    x = torch.randn(shape, generator=gen).to(device, dtype).requires_grad_(True)
    with torch.no_grad():
        gy = torch.randn(block(x).shape, generator=gen).to(device, dtype)
    for m in modules.values():
        m.train()
    fns = {k: _fwdbwd_fn(m, x, gy) for k, m in modules.items()}
    ms = interleaved_median_ms(
        fns,
        device=device,
        warmup=args.warmup,
        repeats=args.repeats,
        min_sample_s=0.0,
        budget_s=args.budget,
        min_repeats=3,
        clock=args.clock,
    )
    rows = []
    for k, fn in fns.items():
        x.grad = None
        for p in modules[k].parameters():
            p.grad = None
        row = dict(
            block=name,
            shape=_shape_str(shape),
            impl=k,
            options=",".join(f"{o}={v}" for o, v in options.items()),
            fwdbwd_ms=ms[k],
            peak_mb=peak_memory_mb(fn, device),
            note=notes.get(k, ""),
        )
        if k == "timm":
            row["check"] = check or "checked at the smallest map"
        rows.append(row)
    vis = rows[0]
    for r in rows[1:]:
        if r["impl"] == "math":
            vis["mem_vs_math"] = vis["peak_mb"] / r["peak_mb"]
            vis["time_vs_math"] = vis["fwdbwd_ms"] / r["fwdbwd_ms"]
        else:
            vis["time_vs_timm"] = vis["fwdbwd_ms"] / r["fwdbwd_ms"]
    return rows


def main_large_maps(args: argparse.Namespace, device: torch.device, dtype: torch.dtype) -> int:
    names = args.blocks.split(",") if args.blocks else list(LARGE_MAP_BLOCKS)
    for n in names:
        visattn.block_info(n)  # an unknown name, asked for or in the default list, fails here
    batch, channels = args.large_shape
    sizes = LARGE_MAP_SIZES[:2] if args.quick else LARGE_MAP_SIZES
    print_header("bench_blocks --large-maps", device)
    print(
        f"dtype {args.dtype}, clock {args.clock}, threads {torch.get_num_threads()}, warmup "
        f"{args.warmup}, repeats {args.repeats} (fewer, at least 3, where a comparison would "
        f"exceed {args.budget}s), one call per sample, seed {args.seed}\n"
    )
    rows: list[dict] = []
    errors: list[str] = []
    for name in names:
        for size in sizes:
            shape = (batch, channels, size, size)
            try:
                rows += bench_large_map(name, shape, args, device, dtype)
            except Exception as e:  # one broken case must not hide the others' numbers
                errors.append(f"{name} {_shape_str(shape)}: {type(e).__name__}: {e}")
            print(f"  done {name} {_shape_str(shape)}", file=sys.stderr, flush=True)
    for r in rows:
        r.update(device=str(device), dtype=args.dtype, clock=args.clock)
    print("## Forward+backward at large maps (train mode)\n")
    print(markdown_table(rows, [c for c in LARGE_MAP_COLUMNS if c not in ("device", "dtype")]))
    print(f"\n## Goals at {max(sizes)}x{max(sizes)} (visattn / previous path, visattn / timm)\n")
    for r in rows:
        if r["impl"] != "visattn" or not r["shape"].endswith(f"x{max(sizes)}x{max(sizes)}"):
            continue
        parts = [
            f"{key} {r[key]:.2f} (goal <= {goal}) {'ok' if r[key] <= goal else 'MISSES GOAL'}"
            for key, goal in LARGE_MAP_GOALS.items()
            if r.get(key) is not None
        ]
        print(f"- {r['block']} {r['shape']}: " + ("; ".join(parts) or "no previous path, no twin"))
    if errors:
        print("\n## Errors\n")
        for e in errors:
            print(f"- {e}")
    if args.out:
        write_csv(rows, args.out, LARGE_MAP_COLUMNS)
        print(f"\nwrote {args.out}")
    return 1 if errors else 0


# --------------------------------------------------------------------------------------------
def _parse_shapes(text: str) -> tuple[tuple[int, ...], ...]:
    try:
        shapes = tuple(tuple(int(v) for v in s.split("x")) for s in text.split(","))
    except ValueError:
        shapes = ()
    if not shapes or any(len(s) != 4 or min(s) < 1 for s in shapes):
        raise argparse.ArgumentTypeError(
            f"shapes must look like 64x64x32x32,32x256x14x14: {text!r}"
        )
    return shapes


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true", help="smaller batches, fewer repeats (<1 min)")
    p.add_argument("--device", default="cpu", help="cpu or cuda[:i] (default cpu)")
    p.add_argument("--dtype", default="fp32", help="fp32, bf16 or fp16 (default fp32)")
    p.add_argument("--blocks", default=None, help="comma-separated block names (default: all)")
    p.add_argument("--shapes", type=_parse_shapes, default=None, help="NxCxHxW,... (default: two)")
    p.add_argument("--gsop-shapes", type=_parse_shapes, default=None, help="GSoP reference shapes")
    p.add_argument("--no-gsop-reference", action="store_true", help="skip the GSoP comparison")
    p.add_argument(
        "--channels-last",
        action="store_true",
        help="channels-last blocks and inputs (timm's twin too), each block also timed in NCHW: "
        "cl_vs_nchw column (the GSoP reference comparison stays NCHW)",
    )
    p.add_argument("--warmup", type=int, default=None, help="warm-up calls (default 3, quick 1)")
    p.add_argument(
        "--repeats",
        type=int,
        default=None,
        help="timed samples (default 41, quick 5; fewer for slow cases, see --budget)",
    )
    p.add_argument("--min-sample", type=float, default=None, help="seconds per sample (0.02)")
    p.add_argument(
        "--budget",
        type=float,
        default=None,
        help="seconds per timed comparison: slow cases take fewer repeats, at least 5 "
        "(default 20, quick 3; 0 = always --repeats)",
    )
    p.add_argument(
        "--clock",
        default="wall",
        choices=("wall", "cpu"),
        help="wall (default) or cpu: process CPU time, for a machine shared with other jobs "
        "(use with --threads 1)",
    )
    p.add_argument(
        "--large-maps",
        action="store_true",
        help="self-attention blocks at 14x14, 28x28, 56x56: fused vs previous (math) path vs "
        "timm, fwd+bwd time and peak memory (quick: 14x14, 28x28)",
    )
    p.add_argument(
        "--large-shape",
        type=lambda t: tuple(int(v) for v in t.split("x")),
        default=(2, 128),
        help="batch x channels of --large-maps (default 2x128)",
    )
    p.add_argument("--threads", type=int, default=None, help="torch.set_num_threads")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", default=None, help="write the rows to this CSV file")
    return p


def _fill_defaults(args: argparse.Namespace) -> None:
    """Sampling settings left unset: the quick or the full run's."""
    args.warmup = args.warmup if args.warmup is not None else (1 if args.quick else 3)
    args.repeats = args.repeats if args.repeats is not None else (5 if args.quick else 41)
    args.min_sample = (
        args.min_sample if args.min_sample is not None else (0.005 if args.quick else 0.02)
    )
    if args.budget is None:
        args.budget = 3.0 if args.quick else 20.0
    args.budget = args.budget or None


def _bench_all(names, shapes, args, device, dtype) -> tuple[list[dict], list[str]]:
    """Rows of every block at every shape (against each of its twins); errors, one a line."""
    rows: list[dict] = []
    errors: list[str] = []
    for name in names:
        for twin_key, shape in [(k, s) for k in (twins_of(name) or [None]) for s in shapes]:
            try:
                rows += bench_block(name, shape, args, device, dtype, twin_key)
            except Exception as e:  # one broken block must not hide the others' numbers
                errors.append(f"{name} {_shape_str(shape)}: {type(e).__name__}: {e}")
                rows.append(
                    dict(
                        block=name,
                        shape=_shape_str(shape),
                        impl="visattn",
                        note=f"ERROR {type(e).__name__}: {e}",
                    )
                )
            print(f"  done {name} {_shape_str(shape)}", file=sys.stderr, flush=True)
    return rows, errors


def _label(r: dict) -> str:
    return f"{r['block']} [{r['options']}]" if r["options"] else r["block"]


def _print_blocks(rows: list[dict], channels_last: bool) -> None:
    print("## Blocks" + (" (channels-last, and each block in NCHW)\n" if channels_last else "\n"))
    print(markdown_table(rows, [*TABLE_COLUMNS, "cl_vs_nchw"] if channels_last else TABLE_COLUMNS))
    if channels_last:
        print("\n## visattn channels-last / NCHW (fwd+bwd; fwd), > 1.10 = more than 10% slower\n")
        for r in rows:
            if r.get("cl_vs_nchw") is not None and r["impl"] == "visattn":
                flag = " SLOWER IN CHANNELS-LAST" if r["cl_vs_nchw"] > 1.10 else ""
                print(
                    f"- {_label(r)} {r['shape']}: {r['cl_vs_nchw']:.2f}; {r['cl_vs_nchw_fwd']:.2f}"
                    + flag
                )
    twinned = [r for r in rows if r.get("ratio_vs_timm") is not None]
    if twinned:
        print("\n## visattn / timm (fwd+bwd), goal <= 1.05\n")
        for r in twinned:
            verdict = "ok" if r["ratio_vs_timm"] <= GOAL_RATIO else "MISSES GOAL"
            print(f"- {_label(r)} {r['shape']}: {r['ratio_vs_timm']:.3f} {verdict}")
        notes = {_label(r): (r["check"], r["note"]) for r in rows if r["impl"] == "timm"}
        print("\ntwins:")
        for b, (chk, nt) in notes.items():
            print(f"- {b}: {chk}" + (f"; {nt}" if nt else ""))


def _print_gsop(gsop_rows: list[dict]) -> None:
    print("\n## GSoP: visattn vs official (HW)x(HW) centring-matrix covariance\n")
    print(markdown_table(gsop_rows, [*TABLE_COLUMNS[:-2], "ratio_vs_ref", "check"]))
    print()
    for kind in ("gsop", "gsop_covariance"):
        vis = [r for r in gsop_rows if r["block"] == kind and r["impl"] == "visattn"]
        ref = [r for r in gsop_rows if r["block"] == kind and r["impl"] != "visattn"]
        for v, o in zip(vis, ref):
            print(
                f"- {kind} {v['shape']}: visattn {o['fwdbwd_ms'] / v['fwdbwd_ms']:.2f}x "
                f"faster (fwd+bwd), {o['fwd_ms'] / v['fwd_ms']:.2f}x (fwd); peak "
                f"{v['peak_mb']:.1f} MB vs {o['peak_mb']:.1f} MB"
            )
        hw = [int(v["shape"].split("x")[2]) * int(v["shape"].split("x")[3]) for v in vis]
        for name, rs in (("visattn", vis), ("official_ihat", ref)):
            growth = [
                f"x{b['peak_mb'] / a['peak_mb']:.1f} for HW x{hb / ha:.0f}"
                for a, b, ha, hb in zip(rs, rs[1:], hw, hw[1:])
            ]
            if growth:
                print(f"- {kind} peak memory growth, {name}: {', '.join(growth)}")


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    dtype = parse_dtype(args.dtype)
    device = torch.device(args.device)
    if args.threads is not None:
        torch.set_num_threads(args.threads)
    _fill_defaults(args)
    if args.large_maps:
        return main_large_maps(args, device, dtype)
    shapes = args.shapes or (QUICK_SHAPES if args.quick else SHAPES)
    gsop_shapes = args.gsop_shapes or (QUICK_GSOP_SHAPES if args.quick else GSOP_SHAPES)
    names = args.blocks.split(",") if args.blocks else visattn.list_blocks()
    for n in names:
        visattn.block_info(n)  # unknown names fail here, before any timing

    print_header("bench_blocks", device)
    print(
        f"dtype {args.dtype}, warmup {args.warmup}, repeats {args.repeats} (fewer, at least 5, "
        f"where a comparison would exceed {args.budget}s), min sample {args.min_sample}s, "
        f"seed {args.seed}, clock {args.clock}\n"
    )
    rows, errors = _bench_all(names, shapes, args, device, dtype)
    gsop_rows: list[dict] = []
    if not args.no_gsop_reference and "gsop" in visattn.list_blocks() and "gsop" in names:
        for shape in gsop_shapes:
            gsop_rows += bench_gsop_reference(shape, args, device, dtype)
            print(f"  done gsop reference {_shape_str(shape)}", file=sys.stderr, flush=True)
    for r in rows + gsop_rows:
        r.update(device=str(device), dtype=args.dtype)

    _print_blocks(rows, args.channels_last)
    if gsop_rows:
        _print_gsop(gsop_rows)
    if errors:
        print("\n## Errors\n")
        for e in errors:
            print(f"- {e}")
    if args.out:
        write_csv(rows + gsop_rows, args.out, COLUMNS)
        print(f"\nwrote {args.out}")
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
