"""Optional dependencies by extra (``pip install visattn[<extra>]``), and the error that names
the extra when one is missing. The blocks and models need only torch, torchvision and timm."""

from __future__ import annotations

__all__ = ["EXTRAS", "missing_extra"]

#: the packages of each optional extra of pyproject.toml (but ``docs``), as imported.
EXTRAS: dict[str, tuple[str, ...]] = {
    "train": ("lightning", "albumentations", "torchmetrics", "cv2", "tensorboard"),
    "ablate": ("matplotlib", "scipy", "pytorch_grad_cam"),
    "export": ("onnx", "onnxruntime", "onnxscript"),
    "cluster": ("ray",),
    "mlflow": ("mlflow",),
    "wandb": ("wandb",),
    "yolo": ("ultralytics",),  # AGPL-3.0: imported only by visattn.integrations.yolo
    "smp": ("segmentation_models_pytorch",),
}


def missing_extra(err: ImportError, extra: str, what: str) -> ImportError:
    """The error to raise when importing ``what`` failed with ``err``: an ``ImportError`` that
    names ``pip install visattn[extra]`` when the missing module belongs to ``extra``, else
    ``err`` itself (a missing module of no extra is a different problem)."""
    root = (err.name or "").split(".")[0]
    if root not in EXTRAS[extra]:
        return err
    new = ImportError(
        f"{what} needs the optional dependencies of visattn's '{extra}' extra "
        f"({', '.join(EXTRAS[extra])}); {root!r} is not installed. "
        f"Install them with: pip install visattn[{extra}]",
        name=err.name,
    )
    new.__cause__ = err
    return new
