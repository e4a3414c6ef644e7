"""In-memory images: :class:`ArrayDataset` (CIFAR and ``shapes`` are held this way).

Every visattn dataset yields ``(image, label)``: the image is whatever its ``transform`` returns
from an ``(H, W, 3)`` uint8 RGB array (an albumentations pipeline gives a float ``(3, H, W)``
tensor); without a transform it is the uint8 ``(3, H, W)`` tensor itself (the
device-augmentation path).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import torch
from torch.utils.data import Dataset

__all__ = ["ArrayDataset", "Transform", "to_tensor_uint8"]

Transform = Callable[..., dict[str, Any]]


def to_tensor_uint8(image: np.ndarray) -> torch.Tensor:
    return torch.from_numpy(np.ascontiguousarray(image.transpose(2, 0, 1)))


class ArrayDataset(Dataset):
    """Images held in memory as one uint8 array.

    Args:
        images: ``(N, H, W, 3)`` uint8 RGB.
        targets: ``(N,)`` integer labels.
        classes: class names, index = label.
        transform: albumentations-style callable ``transform(image=...)["image"]``, or None for
            the raw uint8 ``(3, H, W)`` tensor.
        boxes: optional ``(N, 4)`` float ``(x0, y0, x1, y1)`` boxes in pixel coordinates.
    """

    def __init__(
        self,
        images: np.ndarray,
        targets: np.ndarray,
        classes: Sequence[str],
        transform: Transform | None = None,
        boxes: np.ndarray | None = None,
    ) -> None:
        if images.dtype != np.uint8 or images.ndim != 4 or images.shape[-1] != 3:
            raise ValueError(
                f"images must be (N, H, W, 3) uint8, got {images.shape} {images.dtype}"
            )
        if len(images) != len(targets):
            raise ValueError(f"{len(images)} images but {len(targets)} targets")
        self.images = images
        self.targets = np.asarray(targets, dtype=np.int64)
        self.classes = list(classes)
        self.transform = transform
        self.boxes = None if boxes is None else torch.as_tensor(boxes, dtype=torch.float32)

    def __len__(self) -> int:
        return len(self.images)

    def __getitem__(self, index: int) -> tuple[torch.Tensor, int]:
        image = self.images[index]
        x = (
            to_tensor_uint8(image)
            if self.transform is None
            else self.transform(image=image)["image"]
        )
        return x, int(self.targets[index])

    def subset(self, indices: np.ndarray) -> ArrayDataset:
        """A new dataset holding ``indices`` (copies the selected images)."""
        boxes = None if self.boxes is None else self.boxes[torch.as_tensor(indices)].numpy()
        return ArrayDataset(
            self.images[indices], self.targets[indices], self.classes, self.transform, boxes
        )
