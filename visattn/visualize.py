"""Pictures of what attention blocks look at, from a checkpoint or a network in memory.

``python -m visattn.visualize --ckpt PATH --out DIR`` (or :func:`visualize`) loads a training
checkpoint (:func:`visattn.training.load.load_run`: the network and the data module rebuilt from
the hyper-parameters saved in it), runs a few validation images through the network
inside :func:`visattn.capture_attention` and writes one PNG per image, a grid of panels:

* the image (with the target's box when the data set has ``boxes``, and label / prediction),
* one panel per block with a spatial map, ``(N, 1, h, w)`` spatial gates and ``(N, C, h, w)``
  mixed masks (channel mean), upsampled bilinearly to the image and overlaid on it,
* one panel per stage (first component of the module path, e.g. ``layer2``) for channel
  attention ``(N, C, 1, 1)``: a heat map of the channel weights, one row per block, one column
  per channel,
* a Grad-CAM panel (Selvaraju et al., ICCV 2017; :func:`visattn.localization.gradcam`) of the
  last stage for the label (or the prediction when no label is known), beside the native maps,
  so that networks without spatial attention (the baseline, channel attention) get a picture
  too.

Each panel is ``PANEL_PX`` pixels square and the grid has at most ``MAX_COLS`` columns, so a
picture with ``k`` panels is ``min(k, MAX_COLS) * PANEL_PX`` wide and
``ceil(k / MAX_COLS) * PANEL_PX`` high.
"""

from __future__ import annotations

import argparse
import math
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from matplotlib.patches import Rectangle

from .blocks import capture_attention, is_block
from .localization import gradcam as _gradcam
from .localization import last_stage

__all__ = [
    "MAX_COLS",
    "PANEL_PX",
    "attention_figures",
    "attention_panels",
    "logger_pictures",
    "plot_attention",
    "validation_pictures",
    "visualize",
    "visualize_model",
]

PANEL_PX = 240
MAX_COLS = 6
_DPI = 100


def _stage(path: str) -> str:
    return path.split(".", 1)[0] if path else "model"


def attention_panels(
    maps: Mapping[str, torch.Tensor], image_size: Sequence[int]
) -> tuple[dict[str, torch.Tensor], dict[str, dict[str, torch.Tensor]]]:
    """Split captured maps of ONE image into spatial maps and per-stage channel weights.

    Args:
        maps: ``{module path: tensor}`` for one image, each ``(C, h, w)`` or ``(h, w)``.
        image_size: ``(H, W)`` of the image; maps larger than it (e.g. a non-local block's full
            ``(heads, HW, HW)`` weights) are not pictures and are left out.

    Returns:
        ``(spatial, channel)``: ``spatial[path]`` is an ``(h, w)`` map (channel mean),
        ``channel[stage][path]`` a ``(C,)`` vector of channel weights.
    """
    spatial: dict[str, torch.Tensor] = {}
    channel: dict[str, dict[str, torch.Tensor]] = {}
    height, width = int(image_size[0]), int(image_size[1])
    for path, m in maps.items():
        m = m.float()
        if m.dim() == 2:
            m = m[None]
        if m.dim() != 3:
            continue
        h, w = m.shape[-2:]
        if h * w == 1:
            channel.setdefault(_stage(path), {})[path] = m.flatten()
        elif h <= height and w <= width:
            spatial[path] = m.mean(0)
    return spatial, channel


def _grid(n_panels: int) -> tuple[int, int]:
    cols = min(n_panels, MAX_COLS)
    return cols, math.ceil(n_panels / cols)


def _draw_box(ax: plt.Axes, box: Sequence[float] | None) -> None:
    """The target's ``(x0, y0, x1, y1)`` box, dashed, on a panel (nothing for ``None``)."""
    if box is not None:
        x0, y0, x1, y1 = (float(v) for v in box)
        ax.add_patch(
            Rectangle(
                (x0 - 0.5, y0 - 0.5),
                x1 - x0,
                y1 - y0,
                fill=False,
                edgecolor="white",
                linewidth=1.2,
                linestyle="--",
            )
        )


def _channel_panel(
    fig: plt.Figure, ax: plt.Axes, stage: str, weights: Mapping[str, torch.Tensor]
) -> None:
    """One stage's channel weights, a row per block, as an image with a colour bar."""
    width = max(w.numel() for w in weights.values())
    grid = np.full((len(weights), width), np.nan, dtype=np.float32)
    for r, w in enumerate(weights.values()):
        grid[r, : w.numel()] = w.numpy()
    im = ax.imshow(grid, aspect="auto", cmap="viridis", interpolation="nearest")
    ax.set_yticks(range(len(weights)))
    ax.set_yticklabels([p[len(stage) + 1 :] or p for p in weights], fontsize=5)
    ax.set_xlabel("channel", fontsize=6)
    ax.tick_params(axis="x", labelsize=5)
    ax.set_title(f"{stage}: channel weights", fontsize=7)
    fig.colorbar(im, ax=ax, fraction=0.046, pad=0.02).ax.tick_params(labelsize=5)


def plot_attention(
    image: torch.Tensor,
    maps: Mapping[str, torch.Tensor],
    *,
    box: Sequence[float] | None = None,
    title: str = "",
    cam: torch.Tensor | None = None,
    cam_title: str = "Grad-CAM",
) -> plt.Figure:
    """The panel grid of one image (see the module docstring).

    Args:
        image: ``(C, H, W)`` picture with values in ``[0, 1]`` (C = 1 or 3).
        maps: ``{module path: (C, h, w) tensor}`` captured for this image.
        box: the target's ``(x0, y0, x1, y1)`` in pixels, drawn on every spatial panel.
        title: caption of the image panel.
        cam: an ``(h, w)`` Grad-CAM map drawn as the panel after the image, or ``None``.
        cam_title: that panel's caption.
    """
    img = image.detach().float().cpu().clamp(0, 1)
    size = tuple(img.shape[-2:])
    spatial, channel = attention_panels(maps, size)
    if cam is not None:
        spatial = {cam_title: cam.detach().float().cpu(), **spatial}
    n = 1 + len(spatial) + len(channel)
    cols, rows = _grid(n)
    inch = PANEL_PX / _DPI
    fig, axes = plt.subplots(
        rows, cols, figsize=(cols * inch, rows * inch), dpi=_DPI, squeeze=False
    )
    axes = axes.flatten()
    shown = img.permute(1, 2, 0).numpy()
    kw = {"cmap": "gray"} if shown.shape[-1] == 1 else {}
    shown = shown[..., 0] if shown.shape[-1] == 1 else shown

    axes[0].imshow(shown, **kw)
    _draw_box(axes[0], box)
    axes[0].set_title(title or "image", fontsize=7)
    i = 1
    for path, m in spatial.items():
        up = F.interpolate(m[None, None], size=size, mode="bilinear", align_corners=False)[0, 0]
        ax = axes[i]
        ax.imshow(shown, **kw)
        ax.imshow(up.numpy(), cmap="jet", alpha=0.5)
        _draw_box(ax, box)
        ax.set_title(
            f"{path}\n{tuple(m.shape)} [{float(m.min()):.2f}, {float(m.max()):.2f}]", fontsize=6
        )
        i += 1
    for stage, weights in channel.items():
        _channel_panel(fig, axes[i], stage, weights)
        i += 1
    for ax in axes[: 1 + len(spatial)]:
        ax.set_xticks([])
        ax.set_yticks([])
    for ax in axes[i:]:
        ax.axis("off")
    fig.tight_layout(pad=0.4)
    return fig


def _run_and_capture(
    net: nn.Module, images: torch.Tensor, gradcam: bool
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """The logits of ``images`` in eval mode and the maps every attention block applied (on the
    CPU); a network without blocks needs ``gradcam`` to be pictured at all."""
    has_blocks = any(is_block(m) for m in net.modules())
    if not has_blocks and not gradcam:
        raise ValueError(
            f"visualize: {type(net).__name__} contains no registered attention block; keep "
            "gradcam=True to picture it with Grad-CAM"
        )
    param = next(net.parameters(), None)
    device = param.device if param is not None else torch.device("cpu")
    was_training = net.training
    net.eval()
    try:
        if not has_blocks:
            return net(images.to(device)), {}
        with capture_attention(net) as maps:
            logits = net(images.to(device))
            return logits, {p: m.detach().float().cpu() for p, m in maps.items()}
    finally:
        net.train(was_training)


@torch.no_grad()
def attention_figures(
    net: nn.Module,
    images: torch.Tensor,
    *,
    display: torch.Tensor | None = None,
    boxes: torch.Tensor | None = None,
    titles: Sequence[str] | None = None,
    class_names: Sequence[str] | None = None,
    labels: Sequence[int] | None = None,
    gradcam: bool = True,
) -> list[plt.Figure]:
    """One panel grid (:func:`plot_attention`) per image, for a network in memory: what
    :func:`visualize_model` saves and ``visattn.training.callbacks.AttentionPictures`` logs.

    Arguments as :func:`visualize_model`'s. The caller closes the figures
    (``plt.close(fig)``). The network's mode is left as it was.
    """
    logits, captured = _run_and_capture(net, images, gradcam)
    if display is None:
        lo = images.amin((1, 2, 3), keepdim=True)
        hi = images.amax((1, 2, 3), keepdim=True)
        display = (images - lo) / (hi - lo).clamp(min=1e-12)
    preds = logits.argmax(1).cpu() if logits.dim() == 2 else None
    cams = None
    if gradcam:
        layer_name, layer = last_stage(net)
        cam_targets = labels if labels is not None else (None if preds is None else preds.tolist())
        with torch.enable_grad():
            cams = _gradcam(net, images, cam_targets, layer)
    figures = []
    for i in range(images.shape[0]):
        per_image = {p: m[i] for p, m in captured.items() if m.shape[0] == images.shape[0]}
        title = titles[i] if titles is not None else f"image {i}"
        if preds is not None:
            p = int(preds[i])
            title += f", pred {class_names[p] if class_names is not None else p}"
        cam_title = ""
        if cams is not None:
            target = "label" if labels is not None else "prediction"
            cam_title = f"Grad-CAM {layer_name} ({target})"
        figures.append(
            plot_attention(
                display[i].cpu(),
                per_image,
                box=None if boxes is None else boxes[i],
                title=title,
                cam=None if cams is None else cams[i],
                cam_title=cam_title,
            )
        )
    return figures


def visualize_model(
    net: nn.Module,
    images: torch.Tensor,
    out_dir: str | Path,
    *,
    display: torch.Tensor | None = None,
    boxes: torch.Tensor | None = None,
    titles: Sequence[str] | None = None,
    names: Sequence[str] | None = None,
    class_names: Sequence[str] | None = None,
    labels: Sequence[int] | None = None,
    gradcam: bool = True,
) -> list[Path]:
    """Write one attention PNG per image for a network in memory.

    Args:
        net: a network with registered attention blocks (run in eval mode).
        images: ``(N, C, H, W)`` network input.
        out_dir: output folder (created).
        display: ``(N, C, H, W)`` pictures in ``[0, 1]`` to draw (default: ``images`` min-max
            scaled per image).
        boxes: ``(N, 4)`` target boxes to draw, or ``None``.
        titles: caption per image (the prediction is appended); names: file stem per image
            (default ``attention_<i>``); class_names: to spell the prediction.
        labels: the true class per image (Grad-CAM explains it; default: the prediction).
        gradcam: add the Grad-CAM panel (needs the ``grad-cam`` package; the network needs a
            last stage, see :func:`visattn.localization.last_stage`).

    Returns:
        The PNG paths, one per image.

    Raises:
        ValueError: ``net`` has no registered attention block and ``gradcam`` is off.
    """
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    figures = attention_figures(
        net,
        images,
        display=display,
        boxes=boxes,
        titles=titles,
        class_names=class_names,
        labels=labels,
        gradcam=gradcam,
    )
    paths = []
    for i, fig in enumerate(figures):
        path = out / f"{names[i] if names is not None else f'attention_{i}'}.png"
        fig.savefig(path, dpi=_DPI)
        plt.close(fig)
        paths.append(path)
    return paths


def _colour(values: torch.Tensor, cmap: str) -> torch.Tensor:
    """``(..., h, w)`` values, min-max scaled (as ``imshow`` scales a panel), as ``(..., 3, h,
    w)`` colours of the matplotlib colour map ``cmap``."""
    lo = values.amin((-2, -1), keepdim=True)
    hi = values.amax((-2, -1), keepdim=True)
    scaled = ((values - lo) / (hi - lo).clamp(min=1e-12)).nan_to_num(0.0)
    rgba = matplotlib.colormaps[cmap](scaled.numpy())
    return torch.from_numpy(rgba[..., :3]).float().movedim(-1, -3)


def _overlay(display: torch.Tensor, maps: torch.Tensor) -> torch.Tensor:
    """``(N, h, w)`` maps, upsampled (bilinear) to the ``(N, C, H, W)`` pictures and drawn over
    them at half opacity in the ``jet`` colours of :func:`plot_attention`'s panels."""
    up = F.interpolate(maps[:, None].float(), size=display.shape[-2:], mode="bilinear")
    base = display.expand(-1, 3, -1, -1) if display.shape[1] == 1 else display
    return 0.5 * base + 0.5 * _colour(up[:, 0], "jet")


def _channel_grid(weights: Mapping[str, torch.Tensor], cell: int) -> torch.Tensor:
    """One stage's ``{path: (N, C)}`` channel weights as ``(N, 3, blocks * 4cell, C * cell)``
    pictures: a row per block, a column per channel, in :func:`plot_attention`'s ``viridis``."""
    rows = list(weights.values())
    width = max(w.shape[1] for w in rows)
    grid = torch.full((rows[0].shape[0], len(rows), width), float("nan"))
    for r, w in enumerate(rows):
        grid[:, r, : w.shape[1]] = w.float()
    fill = grid.nan_to_num(float(grid.nan_to_num(0.0).amin()))
    pictures = _colour(fill, "viridis")
    return pictures.repeat_interleave(4 * cell, -2).repeat_interleave(cell, -1)


@torch.no_grad()
def logger_pictures(
    net: nn.Module,
    images: torch.Tensor,
    display: torch.Tensor,
    *,
    labels: Sequence[int] | None = None,
    gradcam: bool = True,
    min_size: int = 96,
) -> dict[str, torch.Tensor]:
    """The maps of :func:`plot_attention`'s panels, one picture per map kind and images side by
    side, as pixels (no matplotlib figure: cheap enough to log during training).

    Args:
        net: the network (run in eval mode; its mode is left as it was).
        images: ``(N, C, H, W)`` network input.
        display: ``(N, C, H, W)`` pictures of them in ``[0, 1]``.
        labels: the true class per image (Grad-CAM explains it; default: the prediction).
        gradcam: add the Grad-CAM overlay of the last stage (the ``grad-cam`` package).
        min_size: pictures smaller than this are enlarged (nearest neighbour) by a whole factor.

    Returns:
        ``{tag: (3, H', W') picture in [0, 1]}``, the ``N`` images in a row: ``gradcam/<stage>``
        (the overlay), ``attention/<block path>`` (each spatial or mixed map, channel mean,
        overlaid) and ``channels/<stage>`` (the channel weights of the stage's blocks, a row
        per block).
    """
    from torchvision.utils import make_grid

    logits, captured = _run_and_capture(net, images, gradcam)
    n, size = images.shape[0], tuple(images.shape[-2:])
    scale = max(1, -(-min_size // max(size)))
    display = display.detach().float().cpu().clamp(0, 1)
    if scale > 1:
        display = F.interpolate(display, scale_factor=scale, mode="nearest")
    batches: dict[str, torch.Tensor] = {}
    if gradcam:
        layer_name, layer = last_stage(net)
        targets = labels if labels is not None else logits.argmax(1).tolist()
        with torch.enable_grad():
            batches[f"gradcam/{layer_name}"] = _overlay(
                display, _gradcam(net, images, targets, layer)
            )
    per_image = [
        attention_panels({p: m[i] for p, m in captured.items() if m.shape[0] == n}, size)
        for i in range(n)
    ]
    for path in per_image[0][0] if per_image else ():
        batches[f"attention/{path}"] = _overlay(
            display, torch.stack([s[path] for s, _ in per_image])
        )
    for stage in per_image[0][1] if per_image else ():
        weights = {
            p: torch.stack([c[stage][p] for _, c in per_image]) for p in per_image[0][1][stage]
        }
        batches[f"channels/{stage}"] = _channel_grid(weights, cell=max(1, scale))
    return {
        tag: make_grid(b.clamp(0, 1), nrow=n, padding=2, pad_value=1.0)
        for tag, b in batches.items()
    }


def validation_pictures(dm: Any, indices: Sequence[int]) -> dict[str, Any]:
    """The keyword arguments of :func:`attention_figures` / :func:`visualize_model` for the
    validation images ``indices`` of a set-up data module (``dm.val_dataset``,
    ``dm.denormalize``): ``images`` ``(N, C, H, W)``, ``display`` (denormalised, in ``[0, 1]``),
    ``labels``, ``boxes`` (when the data set has them), ``titles`` and ``class_names``.

    Raises:
        ValueError: an index outside the validation set.
    """
    val = dm.val_dataset
    bad = [i for i in indices if not 0 <= i < len(val)]
    if bad:
        raise ValueError(f"indices {bad} are outside the validation set (0..{len(val) - 1})")
    items = [val[i] for i in indices]
    images = torch.stack([torch.as_tensor(x) for x, _ in items])
    labels = [int(y) for _, y in items]
    all_boxes = getattr(val, "boxes", None)
    classes = getattr(val, "classes", None)
    return {
        "images": images,
        "display": dm.denormalize(images).clamp(0, 1),
        "labels": labels,
        "boxes": None if all_boxes is None else torch.as_tensor(all_boxes)[list(indices)],
        "titles": [
            f"val {i}: label {classes[y] if classes is not None else y}"
            for i, y in zip(indices, labels)
        ],
        "class_names": classes,
    }


def visualize(
    ckpt_path: str | Path,
    out_dir: str | Path,
    num_images: int = 4,
    *,
    indices: Sequence[int] | None = None,
    data_overrides: Mapping[str, Any] | None = None,
    device: str = "cpu",
) -> list[Path]:
    """Attention pictures of validation images for a training checkpoint.

    Args:
        ckpt_path: a checkpoint written by train_cls.py (or the ablation runner).
        out_dir: output folder; files ``attention_val<index>.png``.
        num_images: how many validation images (the first ones) when ``indices`` is not given.
        indices: validation-set indices to draw.
        data_overrides: data-module options to change, e.g. ``{"root": "/data/cifar"}`` when
            the data lives elsewhere than at training time.
        device: where to run the network.

    Returns:
        The PNG paths, one per image.
    """
    from .training.load import load_run  # the train extra, needed for checkpoints only

    loaded = load_run(ckpt_path, data_overrides=data_overrides, device=device)
    net, dm = loaded.net, loaded.datamodule
    if dm is None:
        raise ValueError(f"{ckpt_path} holds no data-module options to draw validation images from")
    dm.setup("validate")
    if indices is None:
        if num_images < 1:
            raise ValueError(f"num_images must be >= 1, got {num_images}")
        indices = list(range(min(num_images, len(dm.val_dataset))))
    pictures = validation_pictures(dm, indices)
    return visualize_model(
        net,
        pictures.pop("images"),
        out_dir,
        names=[f"attention_val{i:05d}" for i in indices],
        **pictures,
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m visattn.visualize",
        description="Write attention-map pictures of validation images for a checkpoint.",
    )
    parser.add_argument("--ckpt", required=True, help="checkpoint written by train_cls.py")
    parser.add_argument("--out", required=True, help="output folder")
    parser.add_argument("--num-images", type=int, default=4)
    parser.add_argument("--indices", type=int, nargs="+", help="validation indices to draw")
    parser.add_argument("--data-root", help="data root, when it moved since training")
    parser.add_argument("--device", default="cpu")
    args = parser.parse_args(argv)
    overrides = {"root": args.data_root} if args.data_root else None
    paths = visualize(
        args.ckpt,
        args.out,
        args.num_images,
        indices=args.indices,
        data_overrides=overrides,
        device=args.device,
    )
    for p in paths:
        print(p)
    return 0


if __name__ == "__main__":
    sys.exit(main())
