"""Training throughput: visattn's LightningModule under a Lightning Trainer against a plain PyTorch
loop, and the CIFAR data pipeline against the model.

    python benchmarks/bench_train.py                       # full run, CPU
    python benchmarks/bench_train.py --quick               # reduced, about a minute
    python benchmarks/bench_train.py --device cuda --precision bf16 --channels-last --compile

Model throughput (images/s, ``kind=train``), for each model, three implementations that train the
*same* network object (``ClassificationModule.net``) on the *same* in-memory batches with the same
SGD settings and thread count:

* ``plain``: a hand-written loop: forward, cross-entropy, ``zero_grad``, backward, ``step``;
* ``lightning_min``: ``Trainer.fit`` with progress bar, logger, checkpointing and model summary
  off: the bare cost of Lightning plus what the module does per step (metrics, logging calls,
  the NaN check, the per-step learning-rate schedule);
* ``lightning_default``: ``Trainer.fit`` with Lightning's defaults (progress bar, logger,
  checkpointing, summary): what a user gets.

Each measurement runs ``--warmup`` steps, then times ``--steps`` steps (from the start of the
first timed step to the end of the last, synchronised on CUDA). The implementations are run in
``--rounds`` rounds, alternating order, and the median per implementation is reported;
``ratio_vs_plain`` = images/s / plain images/s (goal >= 0.95).

Data throughput (``kind=data``): the CIFAR-10 training pipeline of ``VisattnDataModule``
(albumentations pad-crop-flip-normalise, ``--workers`` DataLoader workers) in images/s after the
first batch, and the device-augmentation path (``device_augment=True``: uint8 batches from the
loader, crop/flip/normalise as tensor ops on ``--device``), the latter also on its own.
``epoch_s`` = 50,000 / images/s. ``--epoch`` adds a real one-epoch ``Trainer.fit`` on CIFAR-10
per model and data path (GPU runs).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import statistics
import sys
import tempfile
import time
import warnings
from pathlib import Path
from typing import Any

import lightning.pytorch as pl
import torch
import torch.nn.functional as F
from _common import CLOCKS, markdown_table, print_header, synchronize, write_csv

from visattn.data.datamodule import VisattnDataModule
from visattn.training.module import ClassificationModule

COLUMNS = [
    "kind",
    "model",
    "impl",
    "device",
    "precision",
    "channels_last",
    "compile",
    "batch_size",
    "threads",
    "steps",
    "images_per_s",
    "ms_per_step",
    "ratio_vs_plain",
    "epoch_s",
    "first_step_s",
    "note",
]
TABLE_COLUMNS = [
    "kind",
    "model",
    "impl",
    "precision",
    "channels_last",
    "compile",
    "batch_size",
    "images_per_s",
    "ms_per_step",
    "ratio_vs_plain",
    "epoch_s",
    "first_step_s",
    "note",
]
IMPLS = ("plain", "lightning_min", "lightning_default")
CIFAR_TRAIN_IMAGES = 50_000
GOAL_RATIO = 0.95
DEFAULT_DATA_ROOT = Path(__file__).resolve().parents[2] / "shared" / "data"
_clock = time.perf_counter  # model-throughput clock; --clock cpu swaps in time.process_time


# --------------------------------------------------------------------------------------------
# Model throughput
# --------------------------------------------------------------------------------------------
def make_batches(n: int, batch_size: int, num_classes: int, device: torch.device, seed: int):
    """``n`` normalised-looking random batches, built once, kept on ``device``."""
    g = torch.Generator().manual_seed(seed)
    return [
        (
            torch.randn(batch_size, 3, 32, 32, generator=g).to(device),
            torch.randint(0, num_classes, (batch_size,), generator=g).to(device),
        )
        for _ in range(n)
    ]


def _autocast(device: torch.device, precision: str):
    if precision == "bf16":
        return torch.autocast(device.type, dtype=torch.bfloat16)
    return torch.autocast(device.type, enabled=False)


def plain_loop(
    module: ClassificationModule, batches, warmup: int, device, precision: str
) -> tuple[float, float]:
    """Seconds for ``len(batches) - warmup`` steps of a hand-written loop on ``module.net``, and
    the wall seconds of its first step (with ``--compile``: the compilation)."""
    h = module.hparams
    module.to(device)  # Trainer.fit's teardown moves the module back to the CPU
    net = module.net
    net.train()
    forward = module.__dict__.get("_forward_net", net)  # the torch.compile'd net with --compile
    opt = torch.optim.SGD(
        net.parameters(),
        lr=h.lr,
        momentum=h.momentum,
        nesterov=h.nesterov,
        weight_decay=h.weight_decay,
    )
    t0 = None
    first = time.perf_counter()
    for i, (x, y) in enumerate(batches):
        if i == 1:
            synchronize(device)
            first = time.perf_counter() - first
        if i == warmup:
            synchronize(device)
            t0 = _clock()
        if module.channels_last:  # the module's resolved format (hparams may hold None: auto)
            x = x.contiguous(memory_format=torch.channels_last)
        with _autocast(device, precision):
            loss = F.cross_entropy(forward(x), y, label_smoothing=h.label_smoothing)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
    synchronize(device)
    return _clock() - t0, first


class _StepTimer(pl.Callback):
    """Time from the start of batch ``first`` to the end of batch ``last``; ``first_step_s``:
    wall seconds of batch 0 (with ``--compile``: the compilation)."""

    def __init__(self, first: int, last: int, device: torch.device) -> None:
        self.first, self.last, self.device = first, last, device
        self.t0 = self.t1 = None
        self.first_step_s = float("nan")

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx) -> None:
        if batch_idx == 0:
            self._w0 = time.perf_counter()
        if batch_idx == self.first:
            synchronize(self.device)
            self.t0 = _clock()

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        if batch_idx == 0:
            synchronize(self.device)
            self.first_step_s = time.perf_counter() - self._w0
        if batch_idx == self.last:
            synchronize(self.device)
            self.t1 = _clock()


def _trainer(impl: str, device: torch.device, precision: str, root: str, callbacks) -> pl.Trainer:
    common = dict(
        accelerator="gpu" if device.type == "cuda" else "cpu",
        devices=1,
        max_epochs=1,
        limit_val_batches=0,
        num_sanity_val_steps=0,
        precision="bf16-mixed" if precision == "bf16" else "32-true",
        default_root_dir=root,
        callbacks=callbacks,
    )
    if impl == "lightning_min":
        return pl.Trainer(
            logger=False,
            enable_progress_bar=False,
            enable_checkpointing=False,
            enable_model_summary=False,
            **common,
        )
    return pl.Trainer(**common)  # Lightning's defaults: progress bar, logger, checkpoint, summary


class _InMemory:
    """The batch list as ONE iterable (Lightning would read a bare list as several loaders)."""

    def __init__(self, batches: list) -> None:
        self.batches = batches

    def __iter__(self):
        return iter(self.batches)

    def __len__(self) -> int:
        return len(self.batches)


def lightning_loop(
    module, batches, warmup: int, impl: str, device, precision: str
) -> tuple[float, float]:
    timer = _StepTimer(warmup, len(batches) - 1, device)
    with tempfile.TemporaryDirectory() as root:
        trainer = _trainer(impl, device, precision, root, [timer])
        with contextlib.redirect_stdout(sys.stderr):  # progress bar/summary: keep stdout = tables
            trainer.fit(module, train_dataloaders=_InMemory(batches))
    return timer.t1 - timer.t0, timer.first_step_s


def bench_model(name: str, args: argparse.Namespace, device: torch.device) -> list[dict]:
    torch.manual_seed(args.seed)
    module = ClassificationModule(
        model=name, num_classes=10, channels_last=args.channels_last, compile=args.compile
    ).to(device)
    args.resolved_channels_last = module.channels_last
    batches = make_batches(args.warmup + args.steps, args.batch_size, 10, device, args.seed)
    seconds: dict[str, list[float]] = {k: [] for k in args.impls}
    first_step: dict[str, float] = {}  # round 0: with --compile the first impl pays compilation
    for r in range(args.rounds):
        for impl in args.impls if r % 2 == 0 else reversed(args.impls):
            if impl == "plain":
                s, f = plain_loop(module, batches, args.warmup, device, args.precision)
            else:
                s, f = lightning_loop(module, batches, args.warmup, impl, device, args.precision)
            seconds[impl].append(s)
            first_step.setdefault(impl, f)
            print(f"  {name} {impl} round {r}: {s:.2f}s", file=sys.stderr, flush=True)
    rows = []
    for impl, ss in seconds.items():
        s = statistics.median(ss)
        ips = args.steps * args.batch_size / s
        rows.append(
            dict(
                kind="train",
                model=name,
                impl=impl,
                images_per_s=ips,
                ms_per_step=1000 * s / args.steps,
                epoch_s=CIFAR_TRAIN_IMAGES / ips,
                steps=args.steps,
                first_step_s=first_step[impl],
            )
        )
    plain = next((r for r in rows if r["impl"] == "plain"), None)
    for r in rows:
        if plain is not None:
            r["ratio_vs_plain"] = r["images_per_s"] / plain["images_per_s"]
        r["note"] = "model only, in-memory batches; epoch_s extrapolated"
    return rows


# --------------------------------------------------------------------------------------------
# Data throughput
# --------------------------------------------------------------------------------------------
def _datamodule(args: argparse.Namespace, device_augment: bool) -> VisattnDataModule:
    with warnings.catch_warnings():  # the re-packed copy fails md5 by design (verify=False warns)
        warnings.simplefilter("ignore")
        dm = VisattnDataModule(
            dataset="cifar10",
            root=str(args.data_root),
            verify=False,
            batch_size=args.batch_size,
            num_workers=args.workers,
            device_augment=device_augment,
        )
        dm.setup("fit")
    return dm


def _loader_rate(dm: VisattnDataModule, n: int, device: torch.device) -> tuple[float, float]:
    """(images/s over batches 2..n+1, seconds to the first batch); batches are moved to
    ``device`` and passed through ``on_after_batch_transfer`` (device augmentation if on)."""
    t_start = time.perf_counter()
    it = iter(dm.train_dataloader())
    images, t0, first_s = 0, None, None
    for i in range(n + 1):
        x, y = next(it)
        x, y = dm.on_after_batch_transfer((x.to(device), y.to(device)), 0)
        if i == 0:
            synchronize(device)
            t0 = time.perf_counter()
            first_s = t0 - t_start
        else:
            images += x.shape[0]
    synchronize(device)
    rate = images / (time.perf_counter() - t0)
    del it
    return rate, first_s


def bench_data(args: argparse.Namespace, device: torch.device) -> list[dict]:
    rows = []
    for device_augment, impl in ((False, "loader_albumentations"), (True, "loader_device_aug")):
        dm = _datamodule(args, device_augment)
        rate, first_s = _loader_rate(dm, args.loader_batches, device)
        where = f"augment on {device.type}" if device_augment else "albumentations in workers"
        rows.append(
            dict(
                kind="data",
                impl=impl,
                images_per_s=rate,
                epoch_s=CIFAR_TRAIN_IMAGES / rate,
                steps=args.loader_batches,
                ms_per_step=1000 * args.batch_size / rate,
                note=f"{args.workers} workers, {where}, first batch {first_s:.1f}s",
            )
        )
    # the device augmentation alone, on one uint8 batch already on the device
    dm = _datamodule(args, True)
    x = torch.randint(0, 256, (args.batch_size, 3, 32, 32), dtype=torch.uint8, device=device)
    gen = torch.Generator(device=device).manual_seed(0)
    for _ in range(3):
        dm.device_aug(x, train=True, generator=gen)
    synchronize(device)
    n, t0 = 50, time.perf_counter()
    for _ in range(n):
        dm.device_aug(x, train=True, generator=gen)
    synchronize(device)
    rate = n * args.batch_size / (time.perf_counter() - t0)
    rows.append(
        dict(
            kind="data",
            impl="device_aug_only",
            images_per_s=rate,
            ms_per_step=1000 * args.batch_size / rate,
            epoch_s=CIFAR_TRAIN_IMAGES / rate,
            steps=n,
            note=f"DeviceAugment on {device.type} tensors, no loader",
        )
    )
    return rows


class _EpochTimer(pl.Callback):
    def on_train_epoch_start(self, trainer, pl_module) -> None:
        self.t0 = time.perf_counter()

    def on_train_epoch_end(self, trainer, pl_module) -> None:
        synchronize(pl_module.device)
        self.seconds = time.perf_counter() - self.t0


def bench_epoch(name: str, args: argparse.Namespace, device: torch.device) -> list[dict]:
    """One real training epoch on CIFAR-10 (validation off) per data path."""
    rows = []
    for device_augment in (False, True):
        dm = _datamodule(args, device_augment)
        module = ClassificationModule(
            model=name, num_classes=10, channels_last=args.channels_last, compile=args.compile
        )
        timer = _EpochTimer()
        with tempfile.TemporaryDirectory() as root:
            trainer = _trainer("lightning_min", device, args.precision, root, [timer])
            if args.epoch_batches:
                trainer.limit_train_batches = args.epoch_batches
            with contextlib.redirect_stdout(sys.stderr):
                trainer.fit(module, datamodule=dm)
        n_train = len(dm.train_dataset)
        images = min(n_train, trainer.num_training_batches * args.batch_size)
        partial = " (partial epoch, epoch_s extrapolated)" if images < n_train else ""
        rows.append(
            dict(
                kind="epoch",
                model=name,
                impl="epoch_device_aug" if device_augment else "epoch_albumentations",
                images_per_s=images / timer.seconds,
                epoch_s=timer.seconds * n_train / images,
                steps=trainer.num_training_batches,
                note=f"real CIFAR-10 fit, {args.workers} workers, lightning_min{partial}",
            )
        )
    return rows


# --------------------------------------------------------------------------------------------
def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true", help="fewer steps and one round (~1 min)")
    p.add_argument("--models", default="resnet20_cifar,se_resnet56_cifar")
    p.add_argument("--impls", default=",".join(IMPLS), help=f"subset of {','.join(IMPLS)}")
    p.add_argument("--device", default="cpu")
    p.add_argument("--precision", default="32", choices=("32", "bf16"))
    p.add_argument(
        "--channels-last",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="channels-last network and inputs (default: ClassificationModule's choice, "
        "channels-last for convolutional backbones)",
    )
    p.add_argument("--compile", action="store_true", help="torch.compile the network")
    p.add_argument("--batch-size", type=int, default=128)
    p.add_argument("--steps", type=int, default=None, help="timed steps (default 20, quick 4)")
    p.add_argument("--warmup", type=int, default=None, help="untimed steps (default 5, quick 2)")
    p.add_argument("--rounds", type=int, default=None, help="rounds (default 3, quick 1)")
    p.add_argument(
        "--clock",
        default="wall",
        choices=("wall", "cpu"),
        help="clock of the model-throughput rows: wall (default) or cpu (process CPU time, for "
        "a machine shared with other jobs; use with --threads 1; the data rows stay wall-clock)",
    )
    p.add_argument("--threads", type=int, default=None, help="torch.set_num_threads")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument(
        "--data-root",
        type=Path,
        default=DEFAULT_DATA_ROOT,
        help="folder holding cifar-10-batches-py/ (default ../shared/data)",
    )
    p.add_argument("--skip-model", action="store_true", help="no model-throughput measurement")
    p.add_argument("--skip-data", action="store_true", help="no data-pipeline measurement")
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--loader-batches", type=int, default=None, help="default 40, quick 8")
    p.add_argument("--epoch", action="store_true", help="also time one real CIFAR-10 epoch")
    p.add_argument("--epoch-batches", type=int, default=None, help="cap the --epoch batches")
    p.add_argument("--out", default=None, help="write the rows to this CSV file")
    return p


def main(argv: list[str] | None = None) -> int:
    global _clock
    args = build_parser().parse_args(argv)
    device = torch.device(args.device)
    if args.clock == "cpu" and device.type != "cpu":
        raise SystemExit("--clock cpu measures CPU work only; use the wall clock on accelerators")
    _clock = CLOCKS[args.clock]
    if args.threads is not None:
        torch.set_num_threads(args.threads)
    args.steps = args.steps or (4 if args.quick else 20)
    args.warmup = args.warmup if args.warmup is not None else (2 if args.quick else 5)
    args.rounds = args.rounds or (1 if args.quick else 3)
    args.loader_batches = args.loader_batches or (8 if args.quick else 40)
    args.impls = tuple(args.impls.split(","))
    unknown = [i for i in args.impls if i not in IMPLS]
    if unknown:
        raise SystemExit(f"--impls: unknown {unknown}; choose from {list(IMPLS)}")
    cifar = args.data_root / "cifar-10-batches-py"
    if (not args.skip_data or args.epoch) and not cifar.is_dir():
        raise SystemExit(
            f"no CIFAR-10 at {cifar}: pass --data-root (the folder holding cifar-10-batches-py) "
            "or --skip-data"
        )
    os.environ.setdefault("PYTHONWARNINGS", "ignore")  # keep the tables readable (workers too)
    warnings.filterwarnings("ignore", module="lightning")
    pl.seed_everything(args.seed, verbose=False)

    print_header("bench_train", device)
    print(
        f"batch {args.batch_size}, warmup {args.warmup}, steps {args.steps}, rounds "
        f"{args.rounds}, precision {args.precision}, channels_last {args.channels_last}, "
        f"compile {args.compile}, workers {args.workers}, clock {args.clock}\n"
    )
    rows: list[dict[str, Any]] = []
    if not args.skip_model:
        for name in args.models.split(","):
            rows += bench_model(name, args, device)
    if not args.skip_data:
        rows += bench_data(args, device)
    if args.epoch:
        for name in args.models.split(","):
            rows += bench_epoch(name, args, device)
    for r in rows:
        r.update(
            device=str(device),
            precision=args.precision,
            channels_last=getattr(args, "resolved_channels_last", args.channels_last),
            compile=args.compile,
            batch_size=args.batch_size,
            threads=torch.get_num_threads(),
        )

    print("\n## Throughput\n")
    print(markdown_table(rows, TABLE_COLUMNS))
    print(f"\n## Lightning / plain (images/s), goal >= {GOAL_RATIO}\n")
    for r in rows:
        if r["kind"] == "train" and r["impl"] != "plain" and r.get("ratio_vs_plain") is not None:
            ok = "ok" if r["ratio_vs_plain"] >= GOAL_RATIO else "MISSES GOAL"
            print(f"- {r['model']} {r['impl']}: {r['ratio_vs_plain']:.3f} {ok}")
    data = {r["impl"]: r for r in rows if r["kind"] == "data"}
    if "loader_albumentations" in data:
        print("\n## Loader vs model (images/s)\n")
        loader = data["loader_albumentations"]["images_per_s"]
        for r in rows:
            if r["kind"] == "train" and r["impl"] == "plain":
                verdict = (
                    "loader keeps up" if loader >= r["images_per_s"] else "LOADER IS THE BOTTLENECK"
                )
                print(
                    f"- {r['model']}: model {r['images_per_s']:.0f}, albumentations loader "
                    f"{loader:.0f}: {verdict}"
                )
    if args.out:
        write_csv(rows, args.out, COLUMNS)
        print(f"\nwrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
