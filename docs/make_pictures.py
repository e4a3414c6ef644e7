"""Make the gallery's pictures: what each block attends to, in a small trained network.

For each registered block: a ResNet-20 (CIFAR-style, 32x32 inputs) with the block at the last
residual block of each of its three stages (``blocks: "last"``; conv-replacing blocks replace
that block's middle conv) is trained from random weights on the embedded ``shapes`` data (no
files, no network), for ``--steps`` SGD steps of batch 32. Then
:func:`visattn.visualize.attention_figures` draws, on one held-out image with the target's box,
what each of the three blocks applied:

* a spatial map (``(N, 1, h, w)`` gates, or the channel mean of ``(N, C, h, w)`` masks) is
  overlaid on the image, one panel per block;
* channel weights (``(N, C, 1, 1)``: SE, ECA, GSoP, SK, ...) have no spatial extent; they are
  drawn as a heat strip per stage (one column per channel).

The family decides which of the two a block gets, from what :func:`visattn.capture_attention`
records; no block is handled by hand. The PNGs are committed under ``docs/assets/attention/``
(small, regenerable with this script); the docs build only reads them, and a block's page shows
its picture when the file exists.

    nice -n 19 env OMP_NUM_THREADS=1 python docs/make_pictures.py            # blocks without one
    nice -n 19 env OMP_NUM_THREADS=1 python docs/make_pictures.py --force    # remake all
    python docs/make_pictures.py --blocks se cbam --force --steps 200
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import matplotlib.pyplot as plt
import torch
import torch.nn.functional as F
from matplotlib.text import Text

import visattn
from visattn.constants import STATS
from visattn.data.shapes import make_shapes
from visattn.visualize import attention_figures

OUT = Path(__file__).resolve().parent / "assets" / "attention"
BATCH = 32
DPI = 100
#: the gallery shows a picture at the page's width (about 750 px for a 950 px picture): its
#: text, drawn for a picture seen at full size, is enlarged by this much to stay readable
FONT_SCALE = 1.4


def _data(n: int, seed: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """``n`` shapes images: normalised input, labels, boxes and the ``[0, 1]`` pictures."""
    images, labels, boxes, _ = make_shapes(n, seed=seed)
    raw = torch.from_numpy(images).permute(0, 3, 1, 2).float() / 255
    mean, std = (torch.tensor(v).view(1, 3, 1, 1) for v in STATS["shapes"])
    return (raw - mean) / std, torch.from_numpy(labels), torch.from_numpy(boxes), raw


def train(name: str, steps: int, num_train: int, seed: int = 0) -> torch.nn.Module:
    """ResNet-20 with ``name`` at the last block of each stage, SGD with a one-cycle schedule on
    ``num_train`` shapes images for ``steps`` steps of batch 32; returned in eval mode."""
    torch.manual_seed(seed)
    position = "conv" if visattn.block_info(name).replaces_conv else "standard"
    net = visattn.create_model(
        "resnet20_cifar",
        num_classes=9,
        attention={"name": name, "position": position, "blocks": "last"},
    )
    x, y, _, _ = _data(num_train, seed=1000 + seed)
    opt = torch.optim.SGD(net.parameters(), lr=0.05, momentum=0.9, weight_decay=5e-4)
    sched = torch.optim.lr_scheduler.OneCycleLR(opt, 0.05, total_steps=steps, pct_start=0.15)
    net.train()
    generator = torch.Generator().manual_seed(seed)
    for _ in range(steps):
        idx = torch.randint(num_train, (BATCH,), generator=generator)
        loss = F.cross_entropy(net(x[idx]), y[idx])
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        sched.step()
    return net.eval()


def legible(fig: plt.Figure, scale: float = FONT_SCALE) -> None:
    """Enlarge every text of ``fig`` by ``scale`` and lay the panels out again, so that no
    title or label is cut or overlaps a neighbour (the saved box is then fitted to them)."""
    for text in fig.findobj(Text):
        text.set_fontsize(text.get_fontsize() * scale)
    fig.tight_layout(pad=0.4)


def picture(name: str, *, steps: int, num_train: int) -> tuple[Path, float]:
    """Train ``name``'s network and write ``OUT/<name>.png``; returns the path and the
    held-out accuracy (256 images of another seed than the training set's)."""
    net = train(name, steps, num_train)
    x, y, boxes, raw = _data(256, seed=7)
    with torch.no_grad():
        right = net(x).argmax(1) == y
    acc = right.float().mean().item()
    i = int(torch.nonzero(right)[0]) if right.any() else 0  # the first correct one, if any
    (fig,) = attention_figures(
        net,
        x[i : i + 1],
        display=raw[i : i + 1],
        boxes=boxes[i : i + 1],
        titles=[f"{name}, held-out acc {acc:.2f}\nlabel {int(y[i])}"],
        labels=[int(y[i])],
        gradcam=False,
    )
    legible(fig)
    path = OUT / f"{name}.png"
    # the box fitted to what was drawn: a two-line title above a panel is kept whole
    fig.savefig(path, dpi=DPI, bbox_inches="tight", pad_inches=0.08)
    plt.close(fig)
    return path, acc


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--blocks", nargs="*", help="block names (default: all registered)")
    ap.add_argument("--force", action="store_true", help="remake existing pictures")
    ap.add_argument("--steps", type=int, default=60, help="SGD steps of batch 32 per block")
    ap.add_argument("--num-train", type=int, default=3200, help="training images")
    args = ap.parse_args(argv)
    torch.set_num_threads(1)
    OUT.mkdir(parents=True, exist_ok=True)
    names = args.blocks or visattn.list_blocks()
    for name in names:
        visattn.block_info(name)  # an unknown name fails here, with close matches, before work
    start = time.process_time()
    for k, name in enumerate(names, 1):
        if (OUT / f"{name}.png").exists() and not args.force:
            continue
        t0, c0 = time.perf_counter(), time.process_time()
        path, acc = picture(name, steps=args.steps, num_train=args.num_train)
        print(
            f"[{k}/{len(names)}] {name}: {path.name} ({path.stat().st_size // 1024} KB), "
            f"held-out acc {acc:.3f}, {time.process_time() - c0:.0f} s CPU, "
            f"{time.perf_counter() - t0:.0f} s wall",
            flush=True,
        )
    print(f"total {time.process_time() - start:.0f} s CPU", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
