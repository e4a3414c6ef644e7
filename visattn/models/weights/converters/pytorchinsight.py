"""implus/PytorchInsight: Li's SK-ResNet-50*."""

from __future__ import annotations

import torch
import torch.nn as nn

from ._keys import Converter, rename


def _sk_pytorchinsight(state: dict[str, torch.Tensor], model: nn.Module) -> dict:
    """Li's released SK-ResNet-50 (implus/PytorchInsight, ``resnet_sk.py``, saved under
    ``state_dict`` with DataParallel's ``module.``): each Bottleneck holds its two 3x3 paths
    ``conv2``/``bn2`` (dense) and ``conv2g``/``bn2g`` (32 groups) and the fuse/select layers
    ``conv_fc1``, ``bn_fc1``, ``conv_fc2`` flat in the block; visattn's ``sk_resnet50`` holds them
    in the SK conv that replaces ``conv2`` (``paths.0``, ``paths.1``, ``fc_reduce``, ``bn``,
    ``fc_select``)."""
    block = r"^(layer\d+\.\d+)\."
    return rename(
        state,
        [
            (block + r"conv2\.weight$", r"\1.conv2.paths.0.0.weight"),
            (block + r"bn2\.", r"\1.conv2.paths.0.1."),
            (block + r"conv2g\.weight$", r"\1.conv2.paths.1.0.weight"),
            (block + r"bn2g\.", r"\1.conv2.paths.1.1."),
            (block + r"conv_fc1\.", r"\1.conv2.fc_reduce."),
            (block + r"bn_fc1\.", r"\1.conv2.bn."),
            (block + r"conv_fc2\.", r"\1.conv2.fc_select."),
        ],
    )


CONVERTERS: dict[str, Converter] = {
    "sk_pytorchinsight": _sk_pytorchinsight,
}
