"""visattn models as segmentation-models-pytorch encoders (the ``smp`` extra).

Every visattn model is a timm model ``visattn_<name>``, so smp's timm-universal encoders take it
by the name ``tu-visattn_<name>`` (``import visattn`` first, which registers the names in timm)::

    import segmentation_models_pytorch as smp
    import visattn

    unet = smp.Unet("tu-visattn_se_resnet50", encoder_weights=None, classes=3)
    deeplab = smp.DeepLabV3Plus("tu-visattn_cbam_resnet50", encoder_weights=None, classes=3)

* Unet, FPN, UNet++ and the others take the five feature levels at strides 2, 4, 8, 16, 32.
* DeepLabV3 / DeepLabV3+ ask timm for ``output_stride`` 16 (or 8): visattn's ImageNet ResNets
  then dilate their later stages as timm's ResNets do.
* ``encoder_weights=None`` builds with random weights; visattn has no weights to download, so
  smp's default ``"imagenet"`` raises ``ValueError``. To start from a local file, pass
  ``encoder_weights=True, pretrained_cfg_overlay=dict(file="resnet50.pth")`` (smp hands the
  extra keywords to timm).

smp decides how to read a model's features from its default build (it calls
``timm.create_model(name, features_only=True)`` without the caller's options), and refuses
any other stride pattern with ``Unsupported model downsampling pattern``. :func:`encoder_name`
runs the same check first and says why a model cannot be an encoder:

* CIFAR networks reduce by 1, 1, 2, 4 (a 3x3 stem at full resolution, three stages): no
  stride-32 pyramid;
* ``gsop_resnet50`` keeps layer4 at stride 1 (GSoP-Net1's layout, strides up to 16); a
  caller's ``last_stride=2`` does not reach smp's check. ``gsop_resnet50_s32`` is the same
  network at stride 32;
* Residual Attention Networks have no dilated form for ``output_stride`` 16 or 8, and a
  network whose attention replaces a later stage's conv (``botnet50``'s MHSA) cannot dilate it,
  nor can a block sized for the stride-32 maps (``ge_resnet50``'s global-extent gather).

Every ``tu-visattn_*`` encoder smp builds can be compiled with ``torch.jit.script`` (smp's
Unet, DeepLabV3+, ...): ``features_only`` gives :class:`~visattn.models.features.FeatureStages`.

This module does not import smp; it needs only visattn (and timm).
"""

from __future__ import annotations

from typing import Any

import timm
import torch

from ..models.registry import get_model_spec, registered_models

__all__ = ["SMP_REDUCTIONS", "encoder_name"]

#: the feature strides smp's timm-universal encoders read (depth 5, "traditional" style)
SMP_REDUCTIONS = (2, 4, 8, 16, 32)


def _reductions(timm_name: str, **options: Any) -> list[int]:
    """The feature strides of the ``features_only`` build with ``options`` (none: the default
    build smp reads). With options, the build also runs once at the model's input size, so a
    block that cannot take the maps they make refuses here, with its own reason."""
    try:
        with torch.device("meta"):  # the layout only: no weights allocated
            model = _features(timm_name, options)
    except (NotImplementedError, RuntimeError):  # a block whose set-up reads tensor values
        model = _features(timm_name, options)
    return list(model.feature_info.reduction())


def _features(timm_name: str, options: dict[str, Any]) -> torch.nn.Module:
    """The ``features_only`` build, run once at its input size where ``options`` are given
    (on the device in effect: meta tensors under ``torch.device("meta")``)."""
    model = timm.create_model(timm_name, features_only=True, **options)
    if options:
        with torch.no_grad():
            model.eval()(torch.zeros(1, *model.pretrained_cfg["input_size"]))
    return model


def encoder_name(model: str, *, output_stride: int = 32) -> str:
    """The smp encoder name of the visattn model ``model`` (``"tu-visattn_<model>"``), after
    checking that smp can build that encoder at ``output_stride`` (32: Unet, FPN, UNet++ and
    the others; 16 or 8: DeepLabV3 / DeepLabV3+'s ``encoder_output_stride``).

    Raises:
        UnknownModelError: (a ``KeyError``) ``model`` is not a visattn model; names close ones.
        ValueError: smp could not use the model, with the reason (see the module docstring).
    """
    spec = get_model_spec(model)
    name = spec.name
    reductions = _reductions(f"visattn_{name}")
    if tuple(reductions) != SMP_REDUCTIONS:
        said = ", ".join(map(str, reductions))
        if spec.dataset == "cifar":
            why = (
                "a CIFAR network has no stride-32 pyramid: its 3x3 stem keeps the input's "
                "resolution and its three stages give features at strides 1, 2, 4"
            )
            fix = "use an ImageNet model such as 'se_resnet50' or 'cbam_resnet50'"
        elif spec.defaults.get("last_stride") == 1:
            why = (
                "layer4 keeps stride 1 by default (the authors' layout), and smp checks the "
                "default build, so last_stride=2 passed through smp does not reach that check"
            )
            s32 = f"{name}_s32"
            fix = (
                f"use '{s32}', the same network at stride 32"
                if s32 in registered_models()
                else "register the model with last_stride=2 under a name of its own"
            )
        else:
            why, fix = "its feature levels have other strides", "use an ImageNet ResNet"
        raise ValueError(
            f"visattn model {name!r} cannot be an smp encoder: its features are at strides "
            f"{said}, and smp's timm-universal encoders need {', '.join(map(str, SMP_REDUCTIONS))}"
            f"; {why}; {fix}"
        )
    if output_stride != 32:
        if output_stride not in (8, 16):
            raise ValueError(f"output_stride must be 8, 16 or 32, got {output_stride!r}")
        if "output_stride" not in spec.options():
            raise ValueError(
                f"visattn model {name!r} has no output_stride option (no dilated form), so "
                "it cannot be a DeepLab encoder; use a visattn ResNet such as 'se_resnet50'"
            )
        try:  # what smp builds for DeepLab: a block that cannot work dilated refuses here
            _reductions(f"visattn_{name}", output_stride=output_stride)
        except ValueError as err:
            raise ValueError(
                f"visattn model {name!r} cannot be a DeepLab encoder at output_stride "
                f"{output_stride}: {err}"
            ) from err
    return f"tu-visattn_{name}"
