"""Attention inserted into a trained ResNet-20 (CIFAR-10): accuracy at insertion and after one
short fine-tuning epoch, with ``init: default`` (the paper's initialisation) and ``init:
identity`` (every inserted block computes its input).

    python benchmarks/bench_finetune.py --data-root /path/holding/cifar-10-batches-py

Steps, all through the library's own command line (``visattn.training.cli``, as
``train_cls.py``):

1. train ResNet-20 (``configs/cifar10/resnet20.yaml``, no attention) on a fixed random subset of
   ``--num-train`` CIFAR-10 training images for ``--epochs`` epochs (SGD 0.1, cosine), reused
   from ``--work`` when its ``last.ckpt`` is already there;
2. validate the trained network (``validate`` subcommand, the checkpoint loaded by
   ``create_model(checkpoint_path=...)``): the original accuracy;
3. for each block (SE, CBAM, ECA, BAM, placed as ``configs/attention/<block>.yaml`` does) and each
   ``init``: ``validate`` the network with the block inserted and the checkpoint loaded, before
   any step (step 0), then ``fit`` one epoch of the fine-tuning recipe
   ``configs/finetune/cifar10_resnet20_se.yaml`` (its placement replaced by the block's) on a
   fixed random subset of ``--ft-train`` images and report the validation accuracy after it.

Validation uses a fixed random subset of ``--num-val`` images of the official test set (the val
split of ``configs/data/cifar10.yaml``), the same subset in every step. The table goes to
``--out`` (markdown), rewritten after every row so that an interrupted run keeps what it has.
The copy of CIFAR-10 is checked against the official md5 sums unless ``--no-verify``; without
the data the script says so and exits with status 0.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import yaml
from _common import machine_description

from visattn import block_info
from visattn.files import read_metrics_csv
from visattn.training.cli import cli_main, run

REPO = Path(__file__).resolve().parents[1]
BASE_CONFIG = REPO / "configs/cifar10/resnet20.yaml"
FT_CONFIG = REPO / "configs/finetune/cifar10_resnet20_se.yaml"
BLOCKS = ("se", "cbam", "eca", "bam")
INITS = ("identity", "default")


def placement(block: str, init: str) -> dict[str, Any]:
    """The placement of ``configs/attention/<block>.yaml`` with ``init`` set."""
    piece = yaml.safe_load((REPO / "configs/attention" / f"{block}.yaml").read_text())
    return {**piece["model"]["attention"], "init": init}


def validate(args: list[str]) -> dict[str, float]:
    """Run the ``validate`` subcommand; its ``val/acc`` and ``val/loss``."""
    cli = cli_main(["validate", *args])
    metrics = cli.trainer.callback_metrics
    return {"acc": float(metrics["val/acc"]), "loss": float(metrics["val/loss"])}


def _pct(v: float | None) -> str:
    return "" if v is None else f"{100 * v:.2f}"


def _delta(v: float | None, ref: float) -> str:
    return "" if v is None else f"{100 * (v - ref):+.2f}"


def render(settings: dict[str, Any], original: dict[str, float], rows: list[dict]) -> str:
    lines = [
        "# Attention inserted into a trained ResNet-20 (CIFAR-10)",
        "",
        "command: `python " + " ".join(sys.argv) + "`",
        "",
        *(f"- {k}: {v}" for k, v in {**machine_description("cpu"), **settings}.items()),
        "",
        f"Original network (no attention): val accuracy {_pct(original['acc'])}%, "
        f"val loss {original['loss']:.6f}.",
        "",
        "| block | init | val acc at insertion (%) | vs original | val loss at insertion "
        "| val acc after 1 fine-tuning epoch (%) | vs original |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        ref = original["acc"]
        lines.append(
            f"| {r['block']} | {r['init']} | {_pct(r['acc0'])} | {_delta(r['acc0'], ref)} "
            f"| {r['loss0']:.6f} | {_pct(r['acc1'])} | {_delta(r['acc1'], ref)} |"
        )
    lines += ["", "Identity forms (`visattn.block_info(name).identity_form`):", ""]
    lines += [f"- {b}: {block_info(b).identity_form}" for b in BLOCKS]
    return "\n".join(lines) + "\n"


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--data-root", default="data", help="folder holding cifar-10-batches-py")
    p.add_argument("--no-verify", action="store_true", help="accept a re-packed CIFAR-10 copy")
    p.add_argument("--num-train", type=int, default=4000, help="training subset of step 1")
    p.add_argument("--epochs", type=int, default=3, help="epochs of step 1")
    p.add_argument("--ft-train", type=int, default=1280, help="images in the fine-tuning epoch")
    p.add_argument("--num-val", type=int, default=1000, help="validation subset (test set)")
    p.add_argument("--blocks", nargs="+", default=list(BLOCKS), choices=BLOCKS)
    p.add_argument("--accelerator", default="cpu")
    p.add_argument("--work", default=None, help="run folder (default: a temporary one)")
    p.add_argument("--out", default=str(REPO / "benchmarks/results/finetune_cifar10.md"))
    return p


def _common_options(a: argparse.Namespace) -> list[str]:
    """The command-line options of every run: data, one device, no progress output."""
    return [
        f"--data.root={a.data_root}",
        f"--data.verify={'false' if a.no_verify else 'true'}",
        f"--data.num_val={a.num_val}",
        "--data.num_workers=0",
        f"--trainer.accelerator={a.accelerator}",
        "--trainer.devices=1",
        "--trainer.enable_progress_bar=false",
        "--trainer.enable_model_summary=false",
        "--trainer.num_sanity_val_steps=0",
    ]


def _settings(a: argparse.Namespace, work: Path) -> dict[str, str]:
    """The report's description of the runs."""
    return {
        "data": f"CIFAR-10 at {a.data_root}; val = fixed random {a.num_val} of the 10,000 test "
        "images (same subset throughout)",
        "source network": f"resnet20_cifar, no attention, {a.epochs} epochs on a fixed random "
        f"{a.num_train} of the 50,000 training images (configs/cifar10/resnet20.yaml with "
        f"--model.schedule cosine --trainer.max_epochs {a.epochs}: SGD lr 0.1, momentum 0.9, "
        "wd 1e-4, batch 128, standard crop+flip)",
        "fine-tuning epoch": f"configs/finetune/cifar10_resnet20_se.yaml (SGD lr 0.01 cosine to 0 "
        "over the epoch, lr_mult backbone 0.1 / attention 1.0 / head 0.1, "
        f"freeze_backbone_epochs 1: backbone and its BN statistics fixed in this epoch), its "
        f"placement replaced by the block's, --trainer.max_epochs 1, on a fixed random "
        f"{a.ft_train} training images ({-(-a.ft_train // 128)} steps of 128)",
        "placements": ", ".join(
            f"{b}: {json.dumps({k: v for k, v in placement(b, 'x').items() if k != 'init'})}"
            for b in a.blocks
        ),
        "work folder": str(work),
    }


def _train_source(a: argparse.Namespace, common: list[str], work: Path) -> Path:
    """The source network's last checkpoint, trained first unless the work folder has it."""
    ckpt = work / "source/lightning_logs/version_0/checkpoints/last.ckpt"
    if not ckpt.is_file():
        s = run(
            [
                "fit",
                f"--config={BASE_CONFIG}",
                *common,
                f"--data.num_train={a.num_train}",
                "--model.schedule=cosine",
                f"--trainer.max_epochs={a.epochs}",
                f"--trainer.default_root_dir={work / 'source'}",
            ]
        )
        print(f"source network: val acc {s['last_val_acc']:.4f} after {s['epochs']} epochs")
    return ckpt


def _placed(ft: list[str], block: str, init: str) -> list[str]:
    """The fine-tuning options with the config's placement replaced by ``block``'s."""
    # null first: over the config's placement, the CLI would merge fields (keeping its
    # SE 'args' for another block); after null the placement is parsed afresh
    new = f"--model.attention={json.dumps(placement(block, init))}"
    return [*ft, "--model.attention=null", new]


def _finetune(a: argparse.Namespace, args: list[str], folder: Path, row: dict[str, Any]) -> None:
    """One fine-tuning epoch; its val accuracy and loss go into ``row``."""
    s = run(
        [
            "fit",
            *args,
            f"--data.num_train={a.ft_train}",
            "--trainer.max_epochs=1",
            f"--trainer.default_root_dir={folder / 'ft'}",
        ]
    )
    row["acc1"] = s["last_val_acc"]
    last = read_metrics_csv(s["metrics_csv"])[-1]
    row["loss1"] = last.get("val/loss")


def main(argv: list[str] | None = None) -> int:
    a = _parser().parse_args(argv)
    if not (Path(a.data_root) / "cifar-10-batches-py").is_dir():
        print(f"skipped: no CIFAR-10 under {a.data_root} (cifar-10-batches-py); pass --data-root")
        return 0
    work = Path(a.work or tempfile.mkdtemp(prefix="bench_finetune_"))
    common = _common_options(a)
    settings = _settings(a, work)
    t0 = time.perf_counter()
    ckpt = _train_source(a, common, work)
    settings["source training wall time"] = f"{time.perf_counter() - t0:.0f} s"
    load = f"--model.model_kwargs={json.dumps({'checkpoint_path': str(ckpt)})}"
    ft = [f"--config={FT_CONFIG}", *common, load]
    original = validate(
        [*ft, "--model.attention=null", f"--trainer.default_root_dir={work / 'original'}"]
    )
    print(f"original: {original}")

    rows: list[dict[str, Any]] = []
    out = Path(a.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    for block in a.blocks:
        for init in INITS:
            t1 = time.perf_counter()
            name, args = f"{block}_{init}", _placed(ft, block, init)
            step0 = validate([*args, f"--trainer.default_root_dir={work / name / 'step0'}"])
            row = {"block": block, "init": init, "acc0": step0["acc"], "loss0": step0["loss"]}
            row["acc1"] = None
            rows.append(row)
            out.write_text(render(settings, original, rows))
            _finetune(a, args, work / name, row)
            out.write_text(render(settings, original, rows))
            print(f"{name}: {row} ({time.perf_counter() - t1:.0f} s)", flush=True)
    settings["total wall time"] = f"{time.perf_counter() - t0:.0f} s"
    out.write_text(render(settings, original, rows))
    print(out.read_text())
    return 0


if __name__ == "__main__":
    sys.exit(main())
