"""Does an attention block look at the right place? Two scores against a target's box.

* **Pointing game** (Zhang, Lin, Brandt, Shen, Sclaroff; ECCV 2016, "Top-down Neural Attention by
  Excitation Backprop", Sec. 5.1): a hit when the maximum of the map, upsampled (bilinear) to the
  image, falls inside the target's box (optionally within ``tolerance`` pixels of it; the paper
  uses 15 px on PASCAL/COCO images, we default to 0 for small images).
* **Energy in box** (Wang et al.; CVPR Workshops 2020, "Score-CAM", Sec. 5.2, the
  "energy-based pointing game"): the share of the map's non-negative mass that lies inside the
  box, ``sum_{(i,j) in box} m_ij / sum_ij m_ij``. Each map cell is treated as covering its
  footprint on the image uniformly and contributes the fraction of its area inside the box, which
  is exact for any scale factor (bilinear upsampling would smear mass across the box border).

Maps are ``(N, h, w)`` or ``(N, C, h, w)``; a channel axis is reduced by its mean (a mixed mask
of the Residual Attention Network or BAM). Maps of size 1x1 (channel attention such as SE) carry
no location and are rejected. Boxes are ``(N, 4)`` tensors ``(x0, y0, x1, y1)`` in pixel
coordinates of the image, ``x`` to the right, ``y`` down, with pixel ``(row i, col j)`` covering
``[j, j + 1) x [i, i + 1)``: a box ``(8, 8, 16, 16)`` holds pixels 8..15 in both directions.

:func:`score_model` runs both scores over a data set for every spatial, hybrid and residual block
of a network (built on :func:`visattn.capture_attention`); the ablation runner reports its means
as ``loc/pointing`` and ``loc/energy``.

**Grad-CAM** (Selvaraju, Cogswell, Das, Vedantam, Parikh, Batra; ICCV 2017, Eqs. 1-2) gives every
network a map, attention or not, so the baseline can be scored too, as the CBAM paper (Woo et
al., ECCV 2018, Sec. 4.3) does: ``alpha_k = mean_ij dy_c / dA_k,ij`` over the feature maps ``A_k``
of the last stage and ``L = ReLU(sum_k alpha_k A_k)``, for the target class ``c`` (the true
label). :func:`gradcam` computes it with the ``grad-cam`` package (pytorch-grad-cam, Gildenblat et
al.), which also min-max scales each map to ``[0, 1]`` and resizes it (bilinear) to the image;
:func:`score_gradcam` scores it with the same two functions (the runner's ``gradcam/pointing``
and ``gradcam/energy``).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch
import torch.nn as nn
import torch.nn.functional as F

from .._nets import device_of, eval_mode, last_stage
from ..blocks import capture_attention, is_block

__all__ = [
    "LOCALIZED_FAMILIES",
    "energy_in_box",
    "gradcam",
    "pointing_game",
    "score_gradcam",
    "score_model",
    "spatial_map",
]

#: Block families whose maps are scored by :func:`score_model`.
LOCALIZED_FAMILIES = ("spatial", "hybrid", "residual")


def spatial_map(maps: torch.Tensor) -> torch.Tensor:
    """``(N, h, w)`` or ``(N, C, h, w)`` -> ``(N, h, w)`` float map (channel mean for 4-D input).

    Raises:
        ValueError: a map of another rank, or one without spatial extent (``h * w == 1``).
    """
    if maps.dim() == 4:
        maps = maps.float().mean(1)
    elif maps.dim() != 3:
        raise ValueError(
            f"attention maps must be (N, h, w) or (N, C, h, w), got shape {tuple(maps.shape)}"
        )
    if maps.shape[-1] * maps.shape[-2] == 1:
        raise ValueError(
            f"attention maps of shape {tuple(maps.shape)} have no spatial extent (1x1: channel "
            "attention); only spatial, mixed or residual maps can be localized"
        )
    return maps.float()


def _check(maps: torch.Tensor, boxes: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    m = spatial_map(maps)
    boxes = torch.as_tensor(boxes, dtype=torch.float32, device=m.device)
    if boxes.shape != (m.shape[0], 4):
        raise ValueError(
            f"boxes must have shape (N, 4) = ({m.shape[0]}, 4) to match the maps, "
            f"got {tuple(boxes.shape)}"
        )
    return m, boxes


def _image_size(m: torch.Tensor, image_size: int | Sequence[int] | None) -> tuple[int, int]:
    if image_size is None:
        return int(m.shape[-2]), int(m.shape[-1])
    if isinstance(image_size, int):
        return image_size, image_size
    h, w = (int(s) for s in image_size)
    return h, w


def pointing_game(
    maps: torch.Tensor,
    boxes: torch.Tensor,
    image_size: int | Sequence[int] | None = None,
    *,
    tolerance: float = 0.0,
) -> torch.Tensor:
    """Pointing-game hits: does each map's maximum fall inside its box?

    Args:
        maps: ``(N, h, w)`` or ``(N, C, h, w)`` attention maps (channel mean for 4-D).
        boxes: ``(N, 4)`` boxes ``(x0, y0, x1, y1)`` in image pixels.
        image_size: ``(H, W)`` (or one int) of the image the boxes refer to; the maps are
            upsampled to it bilinearly before the maximum is taken. ``None``: the map's own size.
        tolerance: a hit also counts within this many pixels of the box (Zhang et al. use 15).

    Returns:
        ``(N,)`` float tensor of 1.0 (hit) / 0.0 (miss); ``.mean()`` is the hit rate. On ties the
        first maximum in row-major order counts.
    """
    m, boxes = _check(maps, boxes)
    size = _image_size(m, image_size)
    if tuple(m.shape[-2:]) != size:
        m = F.interpolate(m[:, None], size=size, mode="bilinear", align_corners=False)[:, 0]
    flat = m.flatten(1).argmax(1)
    w = m.shape[-1]
    cx = (flat % w).float() + 0.5  # pixel centre
    cy = torch.div(flat, w, rounding_mode="floor").float() + 0.5
    x0, y0, x1, y1 = boxes.unbind(1)
    hit = (
        (cx >= x0 - tolerance)
        & (cx <= x1 + tolerance)
        & (cy >= y0 - tolerance)
        & (cy <= y1 + tolerance)
    )
    return hit.float()


def _overlap(lo: torch.Tensor, hi: torch.Tensor, cells: int, extent: int) -> torch.Tensor:
    """``(N, cells)`` fraction of each of ``cells`` equal intervals of ``[0, extent)`` that lies
    inside ``[lo, hi]`` (one interval per row of ``lo``/``hi``)."""
    step = extent / cells
    edges = torch.arange(cells + 1, dtype=torch.float32, device=lo.device) * step
    left, right = edges[:-1][None], edges[1:][None]
    inside = torch.minimum(right, hi[:, None]) - torch.maximum(left, lo[:, None])
    return inside.clamp(min=0) / step


def energy_in_box(
    maps: torch.Tensor,
    boxes: torch.Tensor,
    image_size: int | Sequence[int] | None = None,
) -> torch.Tensor:
    """Share of each map's non-negative mass inside its box (energy-based pointing game).

    Args:
        maps: ``(N, h, w)`` or ``(N, C, h, w)`` attention maps (channel mean for 4-D);
            negative values are clamped to 0.
        boxes: ``(N, 4)`` boxes ``(x0, y0, x1, y1)`` in image pixels.
        image_size: ``(H, W)`` (or one int) of the image the boxes refer to; ``None``: the map's
            own size. Map cell ``(i, j)`` covers ``[j W/w, (j+1) W/w) x [i H/h, (i+1) H/h)``.

    Returns:
        ``(N,)`` float tensor in ``[0, 1]``; ``nan`` for a map with no positive mass (undefined).
    """
    m, boxes = _check(maps, boxes)
    size = _image_size(m, image_size)
    m = m.clamp(min=0)
    x0, y0, x1, y1 = boxes.unbind(1)
    fy = _overlap(y0, y1, m.shape[-2], size[0])  # (N, h)
    fx = _overlap(x0, x1, m.shape[-1], size[1])  # (N, w)
    inside = torch.einsum("nij,ni,nj->n", m, fy, fx)
    total = m.sum((1, 2))
    return torch.where(total > 0, inside / total.clamp(min=torch.finfo(m.dtype).tiny), math.nan)


@torch.no_grad()
def score_model(
    net: nn.Module,
    dataset: torch.utils.data.Dataset,
    boxes: torch.Tensor,
    *,
    max_images: int | None = 512,
    batch_size: int = 64,
    tolerance: float = 0.0,
) -> dict[str, dict[str, float]]:
    """Pointing game and energy in box of every spatial, hybrid and residual block of ``net``.

    The first ``max_images`` items of ``dataset`` (``(image, label)`` pairs, in index order, as a
    validation loader yields them) are run through ``net`` in eval mode inside
    :func:`visattn.capture_attention`. Maps with a spatial extent are scored against
    ``boxes[i]`` at the images' size; blocks of other families (channel attention), 1x1 maps,
    maps larger than the image and the non-local block's ``record="full"`` weight matrices (not
    maps; its default ``"received"`` per-position summary is scored) are skipped.

    Returns:
        ``{module path: {"pointing": hit rate, "energy": mean share, "images": n}}`` for each
        scored block, in module order; empty when ``net`` has no such block.
    """
    paths = [
        p
        for p, m in net.named_modules()
        if is_block(m)
        and getattr(m, "block_family", None) in LOCALIZED_FAMILIES
        and getattr(m, "record", None) != "full"  # nonlocal's (N, heads, HW, HWk) weights
    ]
    if not paths:
        return {}
    boxes, n = _items_and_boxes(dataset, boxes, max_images)
    device = device_of(net)
    hits: dict[str, list[torch.Tensor]] = {p: [] for p in paths}
    energy: dict[str, list[torch.Tensor]] = {p: [] for p in paths}
    with eval_mode(net):
        for idx in _batches(n, batch_size):
            images = torch.stack([torch.as_tensor(dataset[i][0]) for i in idx]).to(device)
            b = boxes[idx.start : idx.stop]
            size = tuple(images.shape[-2:])
            with capture_attention(net) as maps:
                net(images)
                for p in paths:
                    w = maps.get(p)
                    if (
                        w is None
                        or w.dim() not in (3, 4)
                        or w.shape[-1] * w.shape[-2] == 1
                        or w.shape[-2] > size[0]
                        or w.shape[-1] > size[1]
                    ):
                        continue
                    hits[p].append(pointing_game(w.cpu(), b, size, tolerance=tolerance))
                    energy[p].append(energy_in_box(w.cpu(), b, size))
    return {p: _summary(hits[p], energy[p]) for p in paths if hits[p]}


def _items_and_boxes(
    dataset: torch.utils.data.Dataset, boxes: torch.Tensor, max_images: int | None
) -> tuple[torch.Tensor, int]:
    """``boxes`` as float32 and the number of items to score, the first ``max_images`` of
    ``dataset``; raises unless ``boxes`` is ``(N, 4)`` with a box for each of them."""
    boxes = torch.as_tensor(boxes, dtype=torch.float32)
    n = len(dataset) if max_images is None else min(len(dataset), max_images)
    if boxes.dim() != 2 or boxes.shape[1] != 4 or boxes.shape[0] < n:
        raise ValueError(
            f"boxes must be (N, 4) with N >= {n} (one per data set item), got {tuple(boxes.shape)}"
        )
    return boxes, n


def _batches(n: int, batch_size: int) -> list[range]:
    """Item indices ``0..n-1`` in consecutive batches of ``batch_size``."""
    return [range(s, min(n, s + batch_size)) for s in range(0, n, batch_size)]


def _summary(hits: list[torch.Tensor], energy: list[torch.Tensor]) -> dict[str, float]:
    """Hit rate, mean energy share (images whose map is all zero left out; nan if all) and
    the number of images, from per-batch :func:`pointing_game` / :func:`energy_in_box`."""
    e = torch.cat(energy)
    return {
        "pointing": float(torch.cat(hits).mean()),
        "energy": float(e.nanmean()) if not e.isnan().all() else math.nan,
        "images": int(e.numel()),
    }


def gradcam(
    net: nn.Module,
    images: torch.Tensor,
    targets: Sequence[int] | torch.Tensor | None = None,
    layer: nn.Module | None = None,
) -> torch.Tensor:
    """Grad-CAM maps of ``images`` at ``layer`` (default: :func:`visattn._nets.last_stage`).

    Args:
        net: a classifier ``(N, C, H, W) -> (N, classes)``; run in eval mode (and left in the
            mode it was in).
        images: ``(N, C, H, W)`` network input.
        targets: the class per image to explain (default: the predicted class).
        layer: the module whose output activations are weighted.

    Returns:
        ``(N, H, W)`` float maps in ``[0, 1]`` (each min-max scaled by the package; all zero
        when no location has a positive weighted activation).

    Raises:
        ImportError: the ``grad-cam`` package is missing (``pip install visattn[ablate]``).
    """
    try:
        from pytorch_grad_cam import GradCAM
        from pytorch_grad_cam.utils.model_targets import ClassifierOutputTarget
    except ImportError as e:  # pragma: no cover - depends on the environment
        raise ImportError(
            "Grad-CAM needs the grad-cam package: pip install 'visattn[ablate]' (or grad-cam)"
        ) from e
    layer = last_stage(net)[1] if layer is None else layer
    device = device_of(net)
    cam_targets = None if targets is None else [ClassifierOutputTarget(int(t)) for t in targets]
    try:
        with eval_mode(net), torch.enable_grad(), GradCAM(model=net, target_layers=[layer]) as cam:
            maps = cam(input_tensor=images.to(device), targets=cam_targets)
    finally:
        net.zero_grad(set_to_none=True)
    return torch.from_numpy(maps).float()


def score_gradcam(
    net: nn.Module,
    dataset: torch.utils.data.Dataset,
    boxes: torch.Tensor,
    *,
    max_images: int | None = 512,
    batch_size: int = 64,
    tolerance: float = 0.0,
    layer: nn.Module | None = None,
) -> dict[str, float]:
    """Pointing game and energy in box of Grad-CAM for the true label of each image.

    The first ``max_images`` items of ``dataset`` (``(image, label)`` pairs) are explained at
    ``layer`` (default :func:`visattn._nets.last_stage`) and scored against ``boxes[i]``, as
    :func:`score_model` does for attention maps.

    Returns:
        ``{"pointing": hit rate, "energy": mean share (images with an all-zero map left out;
        nan if all), "images": n}``.
    """
    boxes, n = _items_and_boxes(dataset, boxes, max_images)
    hits, energy = [], []
    for idx in _batches(n, batch_size):
        items = [dataset[i] for i in idx]
        images = torch.stack([torch.as_tensor(x) for x, _ in items])
        labels = [int(y) for _, y in items]
        maps = gradcam(net, images, labels, layer)
        b = boxes[idx.start : idx.stop]
        size = tuple(images.shape[-2:])
        hits.append(pointing_game(maps, b, size, tolerance=tolerance))
        energy.append(energy_in_box(maps, b, size))
    return _summary(hits, energy)
