"""Make the gallery's pictures: what each block attends to, in a small trained network.

For each block: a ResNet-20 with the block in every residual block (replacing the middle conv
for conv-replacing blocks) is trained briefly on the embedded ``shapes`` data (no files, no
network), then :func:`visattn.visualize.visualize_model` draws the maps the blocks applied on one
held-out image, with the target's box. The PNGs are committed under
``docs/assets/attention/`` (small, and regenerable with this script); the docs build only reads
them.

    python docs/make_pictures.py                  # every registered block without a picture
    python docs/make_pictures.py --blocks se cbam --force
"""

from __future__ import annotations

import argparse
import math
import time
from pathlib import Path

import torch
import torch.nn.functional as F

import visattn
from visattn.constants import STATS
from visattn.data.shapes import make_shapes
from visattn.visualize import visualize_model

OUT = Path(__file__).resolve().parent / "assets" / "attention"


def _data(n: int, seed: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    images, labels, boxes, _ = make_shapes(n, seed=seed)
    raw = torch.from_numpy(images).permute(0, 3, 1, 2).float() / 255
    mean, std = (torch.tensor(v).view(1, 3, 1, 1) for v in STATS["cifar10"])
    return (raw - mean) / std, torch.from_numpy(labels), torch.from_numpy(boxes), raw


def train(name: str, epochs: int, num_train: int, seed: int = 0) -> torch.nn.Module:
    """ResNet-20 with ``name`` everywhere, SGD with a cosine schedule on ``shapes``."""
    torch.manual_seed(seed)
    position = "conv" if visattn.block_info(name).replaces_conv else "standard"
    net = visattn.create_model(
        "resnet20_cifar", num_classes=9, attention={"name": name, "position": position}
    )
    x, y, _, _ = _data(num_train, seed=1000 + seed)
    steps = epochs * math.ceil(num_train / 64)
    opt = torch.optim.SGD(net.parameters(), lr=0.05, momentum=0.9, weight_decay=5e-4)
    sched = torch.optim.lr_scheduler.OneCycleLR(opt, 0.05, total_steps=steps, pct_start=0.15)
    net.train()
    for _ in range(epochs):
        order = torch.randperm(num_train)
        for i in range(0, num_train, 64):
            idx = order[i : i + 64]
            if len(idx) < 2:
                continue
            loss = F.cross_entropy(net(x[idx]), y[idx])
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            sched.step()
    return net.eval()


def picture(name: str, *, epochs: int, num_train: int) -> tuple[Path, float]:
    net = train(name, epochs, num_train)
    x, y, boxes, raw = _data(256, seed=7)  # held out: another seed than training
    with torch.no_grad():
        acc = (net(x).argmax(1) == y).float().mean().item()
    i = int(torch.nonzero(net(x[:32]).argmax(1) == y[:32])[0]) if acc > 0 else 0
    (path,) = visualize_model(
        net,
        x[i : i + 1],
        OUT,
        display=raw[i : i + 1],
        boxes=boxes[i : i + 1],
        titles=[f"{name} (held-out acc {acc:.2f})"],
        names=[name],
        labels=[int(y[i])],
        gradcam=False,
    )
    return path, acc


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--blocks", nargs="*", help="block names (default: all registered)")
    ap.add_argument("--force", action="store_true", help="remake existing pictures")
    ap.add_argument("--epochs", type=int, default=2)
    ap.add_argument("--num-train", type=int, default=2000)
    args = ap.parse_args(argv)
    torch.set_num_threads(1)
    OUT.mkdir(parents=True, exist_ok=True)
    names = args.blocks or visattn.list_blocks()
    for k, name in enumerate(names, 1):
        if (OUT / f"{name}.png").exists() and not args.force:
            continue
        t0 = time.perf_counter()
        path, acc = picture(name, epochs=args.epochs, num_train=args.num_train)
        print(
            f"[{k}/{len(names)}] {name}: {path.name}, held-out acc {acc:.3f}, "
            f"{time.perf_counter() - t0:.0f} s",
            flush=True,
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
