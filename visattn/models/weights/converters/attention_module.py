"""Jongchan/attention-module: Woo et al.'s CBAM ResNets and Park et al.'s BAM-ResNet-50."""

from __future__ import annotations

import torch
import torch.nn as nn

from ._keys import Converter, as_conv1x1, rename


def _cbam_official(state: dict[str, torch.Tensor], model: nn.Module) -> dict:
    """Woo et al.'s released CBAM ResNets (Jongchan/attention-module): ``layerX.Y.cbam`` with
    ``ChannelGate.mlp.{1,3}`` (``nn.Linear``) and ``SpatialGate.spatial.{conv,bn}`` (a conv
    without bias and a BN; build the model with ``use_bn=True``). Their spatial gate pools
    ``[max; mean]``, visattn's ``[mean; max]``: the conv's two input channels are swapped."""
    out = rename(
        state,
        [
            (r"\.cbam\.ChannelGate\.mlp\.1\.", ".attn_standard.channel.fc1."),
            (r"\.cbam\.ChannelGate\.mlp\.3\.", ".attn_standard.channel.fc2."),
            (r"\.cbam\.SpatialGate\.spatial\.conv\.", ".attn_standard.spatial.conv."),
            (r"\.cbam\.SpatialGate\.spatial\.bn\.", ".attn_standard.spatial.bn."),
        ],
    )
    for k, v in out.items():
        if k.endswith("attn_standard.spatial.conv.weight") and v.shape[1] == 2:
            out[k] = v.flip(1).contiguous()
    return as_conv1x1(out, model)


#: the authors' BAM sub-module names -> index in visattn's ``layout="official"`` Sequentials
_BAM_OFFICIAL = {
    r"channel_att\.gate_c\.gate_c_fc_0": "channel.0",
    r"channel_att\.gate_c\.gate_c_bn_1": "channel.1",
    r"channel_att\.gate_c\.gate_c_fc_final": "channel.3",
    r"spatial_att\.gate_s\.gate_s_conv_reduce0": "spatial.0",
    r"spatial_att\.gate_s\.gate_s_bn_reduce0": "spatial.1",
    r"spatial_att\.gate_s\.gate_s_conv_di_0": "spatial.3",
    r"spatial_att\.gate_s\.gate_s_bn_di_0": "spatial.4",
    r"spatial_att\.gate_s\.gate_s_conv_di_1": "spatial.6",
    r"spatial_att\.gate_s\.gate_s_bn_di_1": "spatial.7",
    r"spatial_att\.gate_s\.gate_s_conv_final": "spatial.9",
}


def _bam_official(state: dict[str, torch.Tensor], model: nn.Module) -> dict:
    """Park et al.'s released BAM-ResNet-50 (Jongchan/attention-module, the CBAM file's repo):
    ``bam1``..``bam3`` after layer1..layer3 are visattn's stage slots ``layerN.attn_stage``,
    with ``channel_att.gate_c`` (``nn.Linear`` + ``BatchNorm1d``) and ``spatial_att.gate_s``
    as the block's ``layout="official"`` (build ``bam_resnet50_official``); the linears become
    1x1 convs."""
    rules = [(r"^bam(\d)\.", r"layer\1.attn_stage.")]
    rules += [(rf"\.attn_stage\.{k}\.", f".attn_stage.{v}.") for k, v in _BAM_OFFICIAL.items()]
    return as_conv1x1(rename(state, rules), model)


CONVERTERS: dict[str, Converter] = {
    "cbam_official": _cbam_official,
    "bam_official": _bam_official,
}
