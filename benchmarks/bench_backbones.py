"""What attention costs in other CNN families: params, MACs and CPU throughput against the bare
backbone measured in the same run.

    python benchmarks/bench_backbones.py                      # every family, SE/ECA/CBAM/CA
    python benchmarks/bench_backbones.py --families tv:mobilenet_v3_small --blocks se --quick
    python benchmarks/bench_backbones.py --out benchmarks/results/backbones_cpu.csv

For each family (a torchvision ``tv:`` or timm ``timm:`` model name, untrained weights, eval
mode) the script builds the bare network and one copy per block, the block placed at the family's
``standard`` position in every block of the family's block class (``visattn.inject`` with an
``after`` pattern; the class is the first column of :data:`FAMILIES`). It counts parameters and
multiply-accumulates per image (``visattn.profile``, torch's flop counter) and times a forward
pass of a batch under ``torch.inference_mode``; the bare network and its attention copies are
sampled interleaved (``_common.interleaved_median_ms``), so the ratios compare like with like
even on a shared machine. ``throughput_ratio`` = images/s with the block / images/s bare (below 1:
slower); ``params_overhead`` and ``macs_overhead`` are relative increases.

``--clock cpu`` (default) counts CPU seconds of this process, so time spent waiting for a core on
a shared machine does not count; with ``--threads 1`` it measures the work.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import interleaved_median_ms, markdown_table, write_csv, write_markdown

import visattn
from visattn.profile import count_macs, count_params

#: family (model name), the block class the placement selects, and the input size
FAMILIES: dict[str, tuple[str, int]] = {
    "tv:mobilenet_v3_small": ("InvertedResidual", 224),
    "tv:efficientnet_b0": ("MBConv", 224),
    "timm:convnext_nano": ("ConvNeXtBlock", 224),
    "tv:regnet_x_400mf": ("ResBottleneckBlock", 224),
    "tv:resnet50": ("Bottleneck", 224),
}
BLOCKS = ("se", "eca", "cbam", "coord")
COLUMNS = [
    "family",
    "block_class",
    "block",
    "sites",
    "params",
    "params_overhead",
    "macs",
    "macs_overhead",
    "ms_per_batch",
    "images_per_s",
    "throughput_ratio",
]


def build(family: str, block: str | None) -> tuple[torch.nn.Module, int]:
    """The family's network (bare for ``block=None``) in eval mode and the number of blocks
    placed."""
    cls, _ = FAMILIES[family]
    net = visattn.create_model(family, num_classes=1000).eval()
    if block is None:
        return net, 0
    paths = visattn.inject(net, {"name": block, "after": [cls], "position": "standard"})
    return net.eval(), len(paths)


def bench_family(
    family: str, blocks: list[str], *, batch: int, size: int, clock: str, repeats: int
) -> list[dict]:
    nets = {"none": build(family, None)}
    for b in blocks:
        nets[b] = build(family, b)
    shape = (1, 3, size, size)
    x = torch.randn(batch, 3, size, size)
    rows = []
    for name, (net, sites) in nets.items():
        rows.append(
            {
                "family": family,
                "block_class": FAMILIES[family][0],
                "block": name,
                "sites": sites,
                "params": count_params(net),
                "macs": count_macs(net, shape),
            }
        )

    def forward(net: torch.nn.Module):
        def run() -> None:
            with torch.inference_mode():
                net(x)

        return run

    ms = interleaved_median_ms(
        {name: forward(net) for name, (net, _) in nets.items()},
        device="cpu",
        warmup=2,
        repeats=repeats,
        clock=clock,
    )
    bare = rows[0]
    for r in rows:
        r["ms_per_batch"] = ms[r["block"]]
        r["images_per_s"] = 1000.0 * batch / ms[r["block"]]
        r["params_overhead"] = r["params"] / bare["params"] - 1
        r["macs_overhead"] = r["macs"] / bare["macs"] - 1
        r["throughput_ratio"] = r["images_per_s"] / (1000.0 * batch / ms["none"])
    return rows


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--families", default=",".join(FAMILIES), help="comma-separated")
    ap.add_argument("--blocks", default=",".join(BLOCKS), help="comma-separated block names")
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--size", type=int, default=None, help="input size (default per family)")
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("--clock", choices=("cpu", "wall"), default="cpu")
    ap.add_argument("--quick", action="store_true", help="64x64 inputs, 2 repeats (a smoke run)")
    ap.add_argument("--out", type=Path, default=None, help="CSV file; a .md table beside it")
    args = ap.parse_args(argv)
    families = [f for f in args.families.split(",") if f]
    unknown = [f for f in families if f not in FAMILIES]
    if unknown:
        ap.error(f"unknown families {unknown}; known: {list(FAMILIES)}")
    blocks = [b for b in args.blocks.split(",") if b]
    for b in blocks:
        visattn.block_info(b)  # an unknown name fails here, naming close matches
    if args.threads:
        torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    rows = []
    for family in families:
        size = 64 if args.quick else (args.size or FAMILIES[family][1])
        repeats = 2 if args.quick else args.repeats
        rows += bench_family(
            family, blocks, batch=args.batch, size=size, clock=args.clock, repeats=repeats
        )
        print(markdown_table([r for r in rows if r["family"] == family], COLUMNS), flush=True)
    if args.out is not None:
        write_csv(rows, args.out, COLUMNS)
        write_markdown(
            args.out.with_suffix(".md"),
            "Attention in other CNN families: overhead against the bare backbone (CPU)",
            rows,
            COLUMNS,
            script=__file__,
            argv=argv,
            notes=[f"Batch {args.batch}, clock {args.clock}, eval mode, untrained weights."],
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
