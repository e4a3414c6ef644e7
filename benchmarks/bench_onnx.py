"""Batch-1 CPU inference latency: onnxruntime against eager PyTorch, per named model.

    python benchmarks/bench_onnx.py                                   # a few models
    python benchmarks/bench_onnx.py --models resnet50,se_resnet50 --clock wall --threads 2
    python benchmarks/bench_onnx.py --models all --out benchmarks/results/onnx_cpu.csv

For each model (untrained weights with BN statistics calibrated on random batches,
``visattn.profile.calibrate_batch_norm``, eval mode) the script exports an ONNX file with
``visattn.export_onnx`` (dynamo exporter by default, dynamic batch; the export checks the file in
onnxruntime against PyTorch and fails on a mismatch), then times one image at the model's input
size through ``model(x)`` under ``torch.inference_mode`` and through an onnxruntime
``CPUExecutionProvider`` session with the same number of intra-op threads. The two are sampled
interleaved (``_common.interleaved_median_ms``), medians reported. ``ratio_ort_vs_eager`` =
onnxruntime ms / eager ms: below 1 onnxruntime is faster. ``rel_diff`` = ``max_abs_diff`` /
max|PyTorch output|; a model that fails to export or to match gets a row with its error, and the
run goes on to the next model (rows are written after every model).

``--clock cpu`` (default) counts CPU seconds of this process instead of wall time, so waiting for
a core on a machine shared with other jobs does not count; with one thread it measures the work.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _common import (
    interleaved_median_ms,
    markdown_table,
    write_csv,
    write_markdown,
)

import visattn
from visattn.profile import calibrate_batch_norm

DEFAULT_MODELS = ("resnet20_cifar", "se_resnet56_cifar", "cbam_resnet56_cifar", "resnet50")
COLUMNS = (
    "model",
    "input",
    "exporter",
    "export_s",
    "max_abs_diff",
    "rel_diff",
    "eager_ms",
    "onnxruntime_ms",
    "ratio_ort_vs_eager",
    "error",
)


def bench_model(name: str, args: argparse.Namespace, tmp: Path) -> dict:
    import onnxruntime as ort

    model = visattn.create_model(name)
    size = tuple(model.default_input_size)
    calibrate_batch_norm(model, (8, *size))
    with torch.inference_mode():
        scale = float(model(torch.randn(2, *size)).abs().max())
    t0 = time.perf_counter()
    try:
        report = visattn.export_onnx(model, tmp / f"{name}.onnx", exporter=args.exporter)
    except Exception as e:  # reported as a row: one model must not stop the table
        return {
            "model": name,
            "input": "x".join(map(str, size)),
            "exporter": "failed",
            "export_s": time.perf_counter() - t0,
            "error": f"{type(e).__name__}: {e}"[:300],
        }
    export_s = time.perf_counter() - t0
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = args.threads
    opts.inter_op_num_threads = 1
    sess = ort.InferenceSession(str(report.path), opts, providers=["CPUExecutionProvider"])
    x = torch.randn(1, *size)
    feed = {sess.get_inputs()[0].name: x.numpy()}

    def eager() -> None:
        with torch.inference_mode():
            model(x)

    def onnxruntime() -> None:
        sess.run(None, feed)

    ms = interleaved_median_ms(
        {"eager": eager, "onnxruntime": onnxruntime},
        device="cpu",
        warmup=args.warmup,
        repeats=args.repeats,
        min_sample_s=args.min_sample,
        clock=args.clock,
    )
    return {
        "model": name,
        "input": "x".join(map(str, size)),
        "exporter": report.exporter,
        "export_s": export_s,
        "max_abs_diff": report.max_abs_diff,
        "rel_diff": report.max_abs_diff / max(scale, 1e-12),
        "eager_ms": ms["eager"],
        "onnxruntime_ms": ms["onnxruntime"],
        "ratio_ort_vs_eager": ms["onnxruntime"] / ms["eager"],
    }


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument(
        "--models",
        default=",".join(DEFAULT_MODELS),
        help="comma-separated names, or 'all' (every named model, visattn.list_models())",
    )
    p.add_argument("--exporter", default="auto", choices=["auto", "dynamo", "torchscript"])
    p.add_argument("--threads", type=int, default=1, help="torch and onnxruntime intra-op threads")
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--repeats", type=int, default=7)
    p.add_argument("--min-sample", type=float, default=0.05, help="seconds per timing sample")
    p.add_argument("--clock", choices=["cpu", "wall"], default="cpu")
    p.add_argument("--out", default=None, help="CSV path (a .md with the table is written next)")
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    torch.set_num_threads(args.threads)
    names = (
        visattn.list_models() if args.models == "all" else [n for n in args.models.split(",") if n]
    )
    for n in names:
        visattn.models.get_model_spec(n)  # unknown names fail before any work
    rows: list[dict] = []
    for name in names:
        with tempfile.TemporaryDirectory() as tmp:  # one model's files at a time
            rows.append(bench_model(name, args, Path(tmp)))
        print(markdown_table(rows[-1:], COLUMNS), flush=True)
        if args.out:
            _write(rows, args, argv)
    failed = [r["model"] for r in rows if r.get("error")]
    print(markdown_table(rows, COLUMNS))
    print(
        f"\n{len(rows) - len(failed)} of {len(rows)} models exported and matched in onnxruntime"
        + (f"; failed: {', '.join(failed)}" if failed else "")
    )
    return 1 if failed else 0


def _write(rows: list[dict], args: argparse.Namespace, argv: list[str] | None) -> None:
    write_csv(rows, args.out, COLUMNS)
    write_markdown(
        Path(args.out).with_suffix(".md"),
        "ONNX Runtime vs eager PyTorch, batch 1, CPU",
        rows,
        COLUMNS,
        script=__file__,
        argv=argv,
        notes=[
            f"threads {args.threads}, warmup {args.warmup}, repeats {args.repeats}, "
            f"clock {args.clock}, median of interleaved samples"
        ],
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
