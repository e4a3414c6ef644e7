"""Pictures of what attention blocks look at, for a network in memory.

:func:`visualize_model` runs images through the network inside
:func:`visattn.capture_attention` and writes one PNG per image, a grid of panels (``python -m
visattn.visualize --ckpt PATH --out DIR``, :mod:`visattn.visualize.command`, draws a training
checkpoint's validation images with it):

* the image (with the target's box when the data set has ``boxes``, and label / prediction),
* one panel per block with a spatial map, ``(N, 1, h, w)`` spatial gates and ``(N, C, h, w)``
  mixed masks (channel mean), upsampled bilinearly to the image and overlaid on it,
* one panel per stage (first component of the module path, e.g. ``layer2``) for channel
  attention ``(N, C, 1, 1)``: a heat map of the channel weights, one row per block, one column
  per channel,
* a Grad-CAM panel (Selvaraju et al., ICCV 2017;
  :func:`visattn.visualize.localization.gradcam`) of the last stage for the label (or the
  prediction when no label is known), beside the native maps, so that networks without spatial
  attention (the baseline, channel attention) get a picture too.

Each panel is ``PANEL_PX`` pixels square and the grid has at most ``MAX_COLS`` columns, so a
picture with ``k`` panels is ``min(k, MAX_COLS) * PANEL_PX`` wide and
``ceil(k / MAX_COLS) * PANEL_PX`` high.

The maps as pixels, without matplotlib figures (:func:`~visattn.visualize.maps.attention_panels`,
:func:`~visattn.visualize.maps.validation_pictures`), come from :mod:`visattn.visualize.maps`,
below :mod:`visattn.training`, whose ``AttentionPictures`` callback logs them.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from matplotlib.patches import Rectangle

from .._nets import last_stage
from .localization import gradcam as _gradcam
from .maps import attention_panels, run_and_capture

__all__ = [
    "MAX_COLS",
    "PANEL_PX",
    "attention_figures",
    "plot_attention",
    "visualize_model",
]

PANEL_PX = 240
MAX_COLS = 6
_DPI = 100


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
    logits, captured = run_and_capture(net, images, gradcam)
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
            last stage, see :func:`visattn._nets.last_stage`).

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
