"""Attention maps of a network as pixels: what the ``AttentionPictures`` callback logs during
training (:func:`logger_pictures`) and the pieces :mod:`visattn.visualize.figures` draws its
matplotlib panels from (:func:`attention_panels`, :func:`run_and_capture`,
:func:`validation_pictures`).

It sits below :mod:`visattn.training` (whose callback uses it) and needs torch, torchvision and
the blocks; matplotlib only for its colour maps, and the ``grad-cam`` package only for the
Grad-CAM overlay (:func:`visattn.visualize.localization.gradcam`, Selvaraju et al., ICCV 2017).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import torch
import torch.nn as nn
import torch.nn.functional as F
from torchvision.utils import make_grid

from .._nets import device_of, eval_mode, last_stage
from ..blocks import capture_attention, is_block
from .localization import gradcam as _gradcam

__all__ = ["attention_panels", "logger_pictures", "run_and_capture", "validation_pictures"]


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


def run_and_capture(
    net: nn.Module, images: torch.Tensor, gradcam: bool
) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """The logits of ``images`` (``(N, C, H, W)``) in eval mode and ``{module path: map}``, the
    maps every attention block applied (:func:`visattn.capture_attention`, on the CPU). The
    network's mode is left as it was.

    Raises:
        ValueError: ``net`` has no registered attention block and ``gradcam`` is off (the
            Grad-CAM panel is then the only picture there could be).
    """
    has_blocks = any(is_block(m) for m in net.modules())
    if not has_blocks and not gradcam:
        raise ValueError(
            f"visualize: {type(net).__name__} contains no registered attention block; keep "
            "gradcam=True to picture it with Grad-CAM"
        )
    images = images.to(device_of(net))
    with eval_mode(net):
        if not has_blocks:
            return net(images), {}
        with capture_attention(net) as maps:
            logits = net(images)
        return logits, {p: m.detach().float().cpu() for p, m in maps.items()}


def _colour(values: torch.Tensor, cmap: str) -> torch.Tensor:
    """``(..., h, w)`` values, min-max scaled (as ``imshow`` scales a panel), as ``(..., 3, h,
    w)`` colours of the matplotlib colour map ``cmap``."""
    lo = values.amin((-2, -1), keepdim=True)
    hi = values.amax((-2, -1), keepdim=True)
    scaled = ((values - lo) / (hi - lo).clamp(min=1e-12)).nan_to_num(0.0)
    import matplotlib  # the colour maps only; no figure is drawn

    rgba = matplotlib.colormaps[cmap](scaled.numpy())
    return torch.from_numpy(rgba[..., :3]).float().movedim(-1, -3)


def _overlay(display: torch.Tensor, maps: torch.Tensor) -> torch.Tensor:
    """``(N, h, w)`` maps, upsampled (bilinear) to the ``(N, C, H, W)`` pictures and drawn over
    them at half opacity in the ``jet`` colours of the panels of
    :func:`visattn.visualize.figures.plot_attention`."""
    up = F.interpolate(maps[:, None].float(), size=display.shape[-2:], mode="bilinear")
    base = display.expand(-1, 3, -1, -1) if display.shape[1] == 1 else display
    return 0.5 * base + 0.5 * _colour(up[:, 0], "jet")


def _channel_grid(weights: Mapping[str, torch.Tensor], cell: int) -> torch.Tensor:
    """One stage's ``{path: (N, C)}`` channel weights as ``(N, 3, blocks * 4cell, C * cell)``
    pictures: a row per block, a column per channel, in the panels' ``viridis``."""
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
    """The maps of :func:`visattn.visualize.figures.plot_attention`'s panels, one picture per map
    kind and images side by side, as pixels (no matplotlib figure: cheap enough to log during
    training).

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
    logits, captured = run_and_capture(net, images, gradcam)
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
    """The keyword arguments of :func:`~visattn.visualize.figures.attention_figures` /
    :func:`~visattn.visualize.figures.visualize_model` for the
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
