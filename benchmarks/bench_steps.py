"""Training-step time of a network with each attention block against the same network without.

    python benchmarks/bench_steps.py                           # every variant of the leaderboard
    python benchmarks/bench_steps.py --quick                   # fewer rounds, about two minutes
    python benchmarks/bench_steps.py --variants resnet20_se,resnet20_eca --profile
    python benchmarks/bench_steps.py --precision bf16          # bf16 autocast, and its speedup
    python benchmarks/bench_steps.py --sweep configs/ablations/imagenette112_cpu.yaml \
        --set data.root=DATA/imagenette-112                    # another sweep's networks

The networks are the sweep's own (``--sweep``, default the CIFAR-10 leaderboard
``configs/ablations/cifar10_cpu.yaml``): each variant's seed-0 run is built from its resolved
options exactly as the sweep trains it (block, position, stages, widened baseline), in the
memory format the run uses (channels-last by default), untrained. One *step* is what the
training loop does per batch: forward, label-smoothed cross-entropy, ``zero_grad``, backward and
an SGD + Nesterov step (weight decay 5e-4), on one fixed random batch of the sweep's size at its
data's image size (``--batch`` and ``--image-size`` change them; ``--set`` takes the sweep's
overrides, such as where its data is, as ``python -m visattn.ablate`` does).

Timing: every network is warmed up, then ``--rounds`` samples of ``--steps`` steps are taken
*interleaved* (sample ``i`` of every network before sample ``i + 1`` of any, the order
alternating from one round to the next), and the median per network is kept; ``ratio`` = the
variant's median step / the plain network's median step, both from this run. One thread by
default (``--threads``), as the sweep runs on this kind of machine. Run it on an idle machine: a
second job skews even ratios; the run says how many cores other processes kept busy while it
timed (``_common.OtherWork``), and ``--out``'s CSV gets a ``.md`` beside it with that figure,
the command and the machine.

Columns: ``params``; ``macs_added`` = the variant's forward multiply-accumulates minus the plain
network's, in percent of the plain network's (``visattn.profile.count_macs``); ``step_ms`` and
``ratio``; with ``--profile``, ``where`` = the three operators whose self CPU time grew most
against the plain network (torch.profiler; per operator the least time per step over three
interleaved profiles of ``--profile-steps`` steps), with the growth per step in ms. With
``--precision bf16`` every network also runs under CPU bf16 autocast and
``bf16_speedup`` = fp32 step / bf16 step; the header says whether the CPU has AMX (where bf16
matrix products are fast) or not.
"""

from __future__ import annotations

import argparse
import collections
import math
import os
import re
import statistics
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from _common import (
    OtherWork,
    interleaved_median_ms,
    markdown_table,
    print_header,
    write_csv,
    write_markdown,
)

from visattn.ablate.resolve import build_run
from visattn.ablate.sweep import load_sweep, parse_set
from visattn.profile import count_macs, count_params, vector_extensions

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_SWEEP = ROOT / "configs" / "ablations" / "cifar10_cpu.yaml"
COLUMNS = [
    "variant",
    "params",
    "macs_added_pct",
    "step_ms",
    "ratio",
    "bf16_ms",
    "bf16_speedup",
    "compile_ms",
    "compile_speedup",
    "compile_warmup_s",
    "where",
]
#: cores kept busy by other processes above which the ratios are not worth reading
BUSY_LIMIT = 0.2


class Step:
    """One training step of ``net`` on a fixed batch, as the training loop takes it."""

    def __init__(self, net: torch.nn.Module, x: torch.Tensor, y: torch.Tensor, bf16: bool) -> None:
        self.net, self.x, self.y, self.bf16 = net.train(), x, y, bf16
        self.opt = torch.optim.SGD(
            net.parameters(), lr=1e-3, momentum=0.9, nesterov=True, weight_decay=5e-4
        )

    def __call__(self) -> None:
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=self.bf16):
            loss = F.cross_entropy(self.net(self.x), self.y, label_smoothing=0.1)
        self.opt.zero_grad()
        loss.backward()
        self.opt.step()


@dataclass(frozen=True)
class Batch:
    """What one training step of the sweep's baseline run sees: images per step, their side,
    and the classes its labels range over."""

    size: int
    image_size: int
    num_classes: int


def build_networks(
    sweep_path: Path, names: Sequence[str] | None, extra: Mapping[str, Any] | None = None
) -> tuple[dict[str, tuple[torch.nn.Module, bool]], Batch]:
    """``{variant: (network, channels_last)}`` of the sweep's seed-0 runs, in the memory format
    each run uses, the sweep's baseline first, and the :class:`Batch` of its baseline run.
    ``extra``: dotted overrides after the sweep's, as ``visattn.ablate --set`` gives them (the
    data's place, where resolving a run needs it)."""
    sweep = load_sweep(sweep_path)
    runs = {
        r.variant: r
        for r in sweep.runs("/tmp/visattn-bench-steps", extra)
        if r.seed == sweep.seeds[0]
    }
    wanted = list(runs) if not names else list(names)
    unknown = [n for n in wanted if n not in runs]
    if unknown:
        raise SystemExit(f"unknown variant(s) {unknown}; the sweep has: {', '.join(runs)}")
    order = [sweep.baseline] + [n for n in wanted if n != sweep.baseline]
    nets, batch = {}, None
    for name in order:
        module, data = build_run(runs[name].args)
        nets[name] = (module.net, bool(module.channels_last))
        if batch is None:
            batch = Batch(data.hparams.batch_size, data.image_size, data.num_classes)
    assert batch is not None  # the baseline is always built
    return nets, batch


def op_label(key: str) -> str:
    """The profiler's name for an operator, with a compiled graph's call (``## Call
    CompiledFxGraph <hash> ##``, a block's own compiled kernel) shortened to ``Inductor graph
    <first 6 characters of the hash>``."""
    found = re.fullmatch(r"## Call CompiledFxGraph (\w{1,6})\w* ##", key.strip())
    return f"Inductor graph {found.group(1)}" if found else key


def profile_growth(
    steps: dict[str, Step], base: str, n: int, rounds: int = 3, top: int = 3
) -> dict[str, str]:
    """Per variant, the ``top`` operators whose self CPU time per step grew most over
    ``base``'s. Each network is profiled ``rounds`` times (``n`` steps each), interleaved with
    the others, and each operator keeps its smallest time per step over the rounds: one noisy
    profile would otherwise show growth in operators the block does not touch."""
    from torch.profiler import ProfilerActivity, profile

    per_op: dict[str, dict[str, float]] = {name: {} for name in steps}
    for _ in range(rounds):
        for name, step in steps.items():
            step()
            with profile(activities=[ProfilerActivity.CPU]) as prof:
                for _ in range(n):
                    step()
            for e in prof.key_averages():
                ms = e.self_cpu_time_total / 1e3 / n
                op = op_label(e.key)
                per_op[name][op] = min(ms, per_op[name].get(op, math.inf))
    out = {}
    for name, ops in per_op.items():
        if name == base:
            continue
        growth = collections.Counter({op: ms - per_op[base].get(op, 0.0) for op, ms in ops.items()})
        out[name] = "; ".join(f"{op} +{ms:.1f}" for op, ms in growth.most_common(top) if ms > 0)
    return out


def time_steps(steps: dict[str, Step], args: argparse.Namespace) -> dict[str, float]:
    """Median ms per step of each network, sampled interleaved."""
    many: dict[str, Callable[[], None]] = {k: _repeat(s, args.steps) for k, s in steps.items()}
    ms = interleaved_median_ms(many, device="cpu", warmup=1, repeats=args.rounds)
    return {k: v / args.steps for k, v in ms.items()}


def _other_work_note(cores: float | None) -> str:
    """The line saying how busy other processes kept the machine (printed, and returned for the
    ``.md``), with a warning when the ratios are not usable."""
    busy = (
        "could not be measured here (no /proc/stat)"
        if cores is None
        else f"{cores:.2f} of {os.cpu_count()} cores"
    )
    note = f"Other processes kept busy while timing: {busy} (near 0: idle)."
    print(note)
    if cores is not None and cores > BUSY_LIMIT:
        print(
            f"WARNING: other processes kept {cores:.2f} cores busy (more than {BUSY_LIMIT}): "
            "these ratios are skewed and not usable; time again on an idle machine"
        )
        note += " Not idle: the ratios are not usable."
    return note


def compile_steps(steps: dict[str, Step]) -> tuple[dict[str, Step], dict[str, float]]:
    """Each network compiled with ``torch.compile`` and stepped once (the compilation), with the
    seconds that first step took (minutes with a cold inductor cache). Done before the timed
    span: inductor compiles in worker processes, which :class:`OtherWork` would count as other
    work."""
    compiled, warmup_s = {}, {}
    for name, step in steps.items():
        compiled[name] = Step(torch.compile(step.net), step.x, step.y, bf16=False)
        t0 = time.perf_counter()
        compiled[name]()  # compiles here
        warmup_s[name] = time.perf_counter() - t0
    return compiled, warmup_s


def _repeat(fn: Callable[[], None], n: int) -> Callable[[], None]:
    def run() -> None:
        for _ in range(n):
            fn()

    return run


def _formats(built: Mapping[str, tuple[torch.nn.Module, bool]]) -> str:
    """The memory format the networks were timed in: ``"channels-last memory format"`` where
    every run uses one, else each variant's."""
    each = {k: "channels-last" if cl else "NCHW" for k, (_, cl) in built.items()}
    if len(set(each.values())) == 1:
        return f"{next(iter(each.values()))} memory format"
    return "memory format per variant: " + "; ".join(f"{k} {f}" for k, f in each.items())


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.quick:
        args.rounds, args.steps = min(args.rounds, 3), min(args.steps, 2)
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    try:
        extra = parse_set(args.set)
        built, batch = build_networks(Path(args.sweep), args.variants, extra)
    except (ValueError, OSError) as e:  # a bad --set, a sweep whose data is not there
        raise SystemExit(f"error: {e}") from None
    args.batch = args.batch or batch.size
    args.image_size = args.image_size or batch.image_size
    nets = {k: net for k, (net, _) in built.items()}
    base = next(iter(nets))
    shape = (3, args.image_size, args.image_size)
    x = torch.randn(args.batch, *shape)
    y = torch.randint(0, batch.num_classes, (args.batch,))
    fp32 = {}
    for name, (net, channels_last) in built.items():
        xin = x.contiguous(memory_format=torch.channels_last) if channels_last else x
        fp32[name] = Step(net, xin, y, bf16=False)
    macs = {k: count_macs(n.eval(), (1, *shape)) for k, n in nets.items()}
    ext = vector_extensions()
    title = f"Training-step time against the plain network ({Path(args.sweep).name})"
    print_header(title, "cpu")
    setting = (
        f"Batch {args.batch} x {shape}, {_formats(built)}, {args.rounds} rounds of "
        f"{args.steps} steps, interleaved."
    )
    print(f"{setting}\n")
    compiled, warmup_s = compile_steps(fp32) if args.compile else ({}, {})
    bf16 = {}
    if args.precision == "bf16":
        if "amx_bf16" not in ext:
            print("(this CPU has no AMX: bf16 matrix products have no fast path here)\n")
        bf16 = {k: Step(s.net, s.x, s.y, bf16=True) for k, s in fp32.items()}
    for step in (*fp32.values(), *bf16.values()):
        step()  # blocks that compile their own kernels (SimAM) do it here, as compile_steps
    with OtherWork() as other:
        step_ms = time_steps(fp32, args)
        bf16_ms = time_steps(bf16, args) if bf16 else {}
        compile_ms = time_steps(compiled, args) if compiled else {}
        where = {}
        if args.profile:
            where = profile_growth(fp32, base, args.profile_steps, rounds=1 if args.quick else 3)
    others = _other_work_note(other.cores)
    rows: list[dict[str, Any]] = []
    for name, net in nets.items():
        rows.append(
            {
                "variant": name,
                "params": count_params(net),
                "macs_added_pct": round(100 * (macs[name] - macs[base]) / macs[base], 3),
                "step_ms": round(step_ms[name], 2),
                "ratio": round(step_ms[name] / step_ms[base], 3),
                "bf16_ms": round(bf16_ms[name], 2) if bf16_ms else "",
                "bf16_speedup": round(step_ms[name] / bf16_ms[name], 3) if bf16_ms else "",
                "compile_ms": round(compile_ms[name], 2) if compile_ms else "",
                "compile_speedup": (
                    round(step_ms[name] / compile_ms[name], 3) if compile_ms else ""
                ),
                "compile_warmup_s": round(warmup_s[name], 1) if warmup_s else "",
                "where": where.get(name, ""),
            }
        )
    print(markdown_table(rows, COLUMNS))
    ratios = [r["ratio"] for r in rows[1:]]
    if ratios:
        print(f"\nmedian ratio over {len(ratios)} variants: {statistics.median(ratios):.3f}")
    if args.out:
        write_csv(rows, args.out, COLUMNS)
        write_markdown(
            Path(args.out).with_suffix(".md"), title, rows, COLUMNS, script=__file__,
            argv=argv, notes=[setting, others],
        )  # fmt: skip
        print(f"wrote {args.out} and its .md")
    return 0


def _positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number >= 1, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1, got {value}")
    return value


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0] + " Measures the median training step (forward, "
        "loss, backward, SGD step) of each variant, interleaved, and its ratio to the plain "
        "network's in the same run; run it on an idle machine.",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    p.add_argument("--sweep", default=str(DEFAULT_SWEEP), help="the sweep whose variants to time")
    p.add_argument(
        "--variants",
        type=lambda s: [v for v in s.split(",") if v],
        default=None,
        help="comma-separated variant names (default: all; the baseline is always timed)",
    )
    p.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a dotted override for every network, after the sweep's, as visattn.ablate takes "
        "it (repeatable), e.g. --set data.root=/data/imagenette-112 where building a run "
        "needs its data",
    )
    p.add_argument(
        "--batch", type=_positive, default=None, help="images per step (default: the sweep's)"
    )
    p.add_argument(
        "--image-size",
        type=_positive,
        default=None,
        help="image side in pixels (default: the sweep's data)",
    )
    p.add_argument("--threads", type=_positive, default=1, help="torch threads (1, as the sweep)")
    p.add_argument("--rounds", type=_positive, default=9, help="interleaved samples per network")
    p.add_argument("--steps", type=_positive, default=4, help="training steps per sample")
    p.add_argument(
        "--precision",
        choices=["fp32", "bf16"],
        default="fp32",
        help="bf16: also time every network under CPU bf16 autocast (bf16_ms, bf16_speedup)",
    )
    p.add_argument(
        "--compile",
        action="store_true",
        help="also time every network compiled with torch.compile (compile_ms, "
        "compile_speedup; the first compiled step's time is compile_warmup_s)",
    )
    p.add_argument("--profile", action="store_true", help="attribute the extra time to operators")
    p.add_argument(
        "--profile-steps", type=_positive, default=2, help="steps per profile (3 rounds)"
    )
    p.add_argument("--quick", action="store_true", help="3 rounds of 2 steps (a rough look)")
    p.add_argument("--out", default=None, help="also write the rows to this CSV file")
    return p


if __name__ == "__main__":
    raise SystemExit(main())
