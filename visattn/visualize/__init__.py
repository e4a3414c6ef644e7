"""What attention blocks look at: the maps, their scores and the pictures, in one place.

* :mod:`visattn.visualize.maps`: a network's attention maps (captured with
  :func:`visattn.capture_attention`) and Grad-CAM as pixels, no matplotlib figure; what the
  ``AttentionPictures`` training callback logs.
* :mod:`visattn.visualize.localization`: does a map look at the right place? The pointing game
  and the energy in a target's box, for attention maps and for Grad-CAM; the ablation runner's
  ``loc/*`` and ``gradcam/*`` columns.
* :mod:`visattn.visualize.figures`: matplotlib pictures of a network in memory.
* :mod:`visattn.visualize.command`: ``python -m visattn.visualize --ckpt PATH --out DIR``, the
  pictures of a training checkpoint's validation images (:func:`~.command.visualize`).

The first three sit below :mod:`visattn.training` and need torch, torchvision and the blocks
(and the ``grad-cam`` package for Grad-CAM; matplotlib for the figures, whose names load on
first use); the command sits above it (reading a checkpoint needs the ``train`` extra) and is
imported from its own module.
"""

from __future__ import annotations

from typing import Any

from .localization import (
    LOCALIZED_FAMILIES,
    energy_in_box,
    gradcam,
    pointing_game,
    score_gradcam,
    score_model,
    spatial_map,
)
from .maps import attention_panels, logger_pictures, run_and_capture, validation_pictures

#: the maps' and the scores' names; :mod:`visattn.visualize.figures`' names (``visualize``,
#: ``plot_attention``, ...) load with it (and matplotlib) on first use
__all__ = [
    "LOCALIZED_FAMILIES",
    "attention_panels",
    "energy_in_box",
    "gradcam",
    "logger_pictures",
    "pointing_game",
    "run_and_capture",
    "score_gradcam",
    "score_model",
    "spatial_map",
    "validation_pictures",
]


def __getattr__(name: str) -> Any:
    if not name.startswith("_") and name != "figures":
        from . import figures  # matplotlib: the ablate extra

        if name in figures.__all__:
            return getattr(figures, name)
    if name in ("visualize", "main"):  # above training: not loaded from below it
        raise AttributeError(
            f"visattn.visualize.{name} is visattn.visualize.command.{name} (it reads "
            "checkpoints: the train extra)"
        )
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
