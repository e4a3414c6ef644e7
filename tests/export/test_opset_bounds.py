"""visattn states the ONNX opsets torch's exporters write (torch keeps them in a private
module); this fails, naming the change, when the installed torch says otherwise."""

from __future__ import annotations

import pytest

from visattn import export


def test_the_stated_opset_bounds_are_the_installed_torchs() -> None:
    constants = pytest.importorskip("torch.onnx._constants")  # private: read only here
    installed = (
        constants.ONNX_MIN_OPSET,
        constants.ONNX_TORCHSCRIPT_EXPORTER_MAX_OPSET,
        constants.ONNX_MAX_OPSET,
    )
    stated = (*export.TORCHSCRIPT_OPSETS, export.MAX_DYNAMO_OPSET)
    assert installed == stated, (
        f"torch.onnx._constants (min, TorchScript max, max) are {installed}, visattn.export "
        f"states {stated}: update TORCHSCRIPT_OPSETS and MAX_DYNAMO_OPSET for this torch"
    )
