"""Regenerate the reference outputs of the authors' code, stored beside this script.

Each ``<name>.safetensors`` holds, in float64: a fixed input ``input``, the authors' module's
weights (``state.<their name>``), its output ``output``, a fixed cotangent ``cotangent`` and the
gradient of ``(output * cotangent).sum()`` with respect to the input (``input_grad``). Its
metadata records the provenance (repository, commit, file, the classes and functions taken from
it), the visattn block and options that should compute the same function, and which of the
authors' tensors goes into which of visattn's (``key_map``). The test
(``tests/blocks/test_authors_references.py``) needs only these files; this script needs the
authors' code.

The authors' code is not part of visattn. Get each repository at the commit in ``SOURCES``
(``git clone https://github.com/<repo> <code>/<owner>+<name>``, then ``git checkout <commit>``
in it); then::

    python tests/blocks/references/generate.py --code <code> [names ...]

The classes and functions named in ``SOURCES`` are cut from the authors' files (with Python's
``ast``) and run unchanged. Their files' imports are not run (they pull in mmcv, mmdet or
ultralytics); the names those classes use are given instead: torch, ``nn``, ``F``, math, numpy,
einops, ``BaseModule`` (mmengine's is an ``nn.Module`` with an ``init_cfg``) and, for PKINet,
a stand-in for mmcv's ``ConvModule`` (a convolution, then the norm and activation its configs
name, under mmcv's attribute names; below).

Everything runs with float64 as torch's default dtype, on the CPU, in eval mode. Weights are drawn
by the tests' ``helpers.weights.randomize`` (conv and linear weights N(0, 1/fan_in), other
parameters N(0, 0.5^2), batch norms' running statistics and affine parameters as a trained
network's), seeded per block, so a regenerated file equals the stored one where the authors' code
has not changed.
"""

from __future__ import annotations

import argparse
import ast
import functools
import json
import math
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import einops
import torch
import torch.nn.functional as F
from torch import nn

HERE = Path(__file__).resolve().parent
# the file format's version; the test refuses files of another
FORMAT = 1


@dataclass(frozen=True)
class Source:
    """One block's reference: where the authors' module is and how it is called."""

    name: str  # the stored file's stem
    block: str  # visattn's block
    options: dict[str, Any]  # visattn's options that give the authors' function
    repo: str
    commit: str
    symbols: tuple[tuple[str, str], ...]  # (file, class or function) in the order to run them
    build: str  # expression that builds the authors' module
    shape: tuple[int, ...]  # the input's shape
    call: str = "m(x)"  # expression for the output, given ``m`` (the module) and ``x``
    positive: bool = False  # draw the input's absolute value (see GSoP)
    zero: tuple[str, ...] = ()  # the authors' tensors visattn does not have: set to zero
    keep: tuple[str, ...] = ()  # only the authors' tensors under these prefixes (GSoP)
    # parts of the authors' names replaced before tensors are paired by name, then by order
    rename: dict[str, str] = field(default_factory=dict)
    # the authors' tensors whose input channels come in reverse order ([max; mean] for [mean; max])
    flip: tuple[str, ...] = ()
    namespace: dict[str, Any] = field(default_factory=dict)  # names the code needs
    note: str = ""


class _BaseModule(nn.Module):
    """mmengine's ``BaseModule`` as far as these classes use it: an ``nn.Module`` that takes
    ``init_cfg``."""

    def __init__(self, init_cfg: Any = None) -> None:
        super().__init__()
        self.init_cfg = init_cfg


class _ConvModule(nn.Module):
    """Stand-in for mmcv's ``ConvModule`` as PKINet's CAA builds it: ``conv`` (with a bias when
    there is no norm, mmcv's ``bias="auto"``), then ``bn`` and ``activate`` when their configs
    are given (only BN and SiLU occur)."""

    def __init__(
        self,
        in_channels: int,
        out_channels: int,
        kernel_size: Any,
        stride: Any = 1,
        padding: Any = 0,
        groups: int = 1,
        norm_cfg: dict | None = None,
        act_cfg: dict | None = None,
    ) -> None:
        super().__init__()
        self.conv = nn.Conv2d(
            in_channels,
            out_channels,
            kernel_size,
            stride,
            padding,
            groups=groups,
            bias=norm_cfg is None,
        )
        self.bn = None
        if norm_cfg is not None:
            assert norm_cfg["type"] == "BN", norm_cfg
            self.bn = nn.BatchNorm2d(
                out_channels, eps=norm_cfg.get("eps", 1e-5), momentum=norm_cfg.get("momentum", 0.1)
            )
        self.activate = None
        if act_cfg is not None:
            assert act_cfg["type"] == "SiLU", act_cfg
            self.activate = nn.SiLU()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.conv(x)
        if self.bn is not None:
            x = self.bn(x)
        return x if self.activate is None else self.activate(x)


def _trunc_normal_(t: torch.Tensor, std: float = 1.0, **_: Any) -> torch.Tensor:
    return nn.init.trunc_normal_(t, std=std)


def _no_init(*_: Any, **__: Any) -> None:
    """mmcv's initialisers (``kaiming_init``, ``constant_init``): the weights are drawn anew."""


#: the names the cut-out classes find in place of their files' imports
COMMON: dict[str, Any] = {
    "torch": torch,
    "nn": nn,
    "F": F,
    "math": math,
    "BaseModule": _BaseModule,
    "trunc_normal_": _trunc_normal_,
    "kaiming_init": _no_init,
    "constant_init": _no_init,
    "Parameter": nn.Parameter,
    "rearrange": einops.rearrange,
}

_BRA = "ops/bra_legacy.py"
_PSA = "semantic-segmentation/network/PSA.py"
SOURCES: tuple[Source, ...] = (
    Source(
        "lsk",
        "lsk",
        {},
        "zcablii/LSKNet",
        "cbe06cabcb0be0dd94ee48b8ffcd12a9f95c85ad",
        (("mmrotate/models/backbones/lsknet.py", "LSKblock"),),
        "LSKblock(16)",
        (2, 16, 9, 11),
    ),
    Source(
        "lska_k23",
        "lska",
        {"kernel_size": 23},
        "StevenLauHKHK/Large-Separable-Kernel-Attention",
        "bb2a8d2cfd7e9ff48a34306197249d90153c8d4e",
        (("models/van.py", "LSKA"),),
        "LSKA(8, 23)",
        (2, 8, 13, 12),
    ),
    Source(
        "lska_k7",
        "lska",
        {"kernel_size": 7},
        "StevenLauHKHK/Large-Separable-Kernel-Attention",
        "bb2a8d2cfd7e9ff48a34306197249d90153c8d4e",
        (("models/van.py", "LSKA"),),
        "LSKA(8, 7)",
        (2, 8, 9, 10),
    ),
    Source(
        "acmix",
        "acmix",
        {},
        "LeapLabTHU/ACmix",
        "81dddb6dff98f5e238a7fb6ab174e256489c07fa",
        tuple(
            ("ResNet/test_bottleneck.py", s)
            for s in ("position", "stride", "init_rate_half", "init_rate_0", "ACmix")
        ),
        "ACmix(16, 16)",
        (2, 16, 9, 8),
    ),
    Source(
        "bam",
        "bam",
        {"reduction": 4, "combine": "product", "layout": "official"},
        "Jongchan/attention-module",
        "459efad0e05ee7dde50c41ca10a3d0800bc3792a",
        tuple(("MODELS/bam.py", s) for s in ("Flatten", "ChannelGate", "SpatialGate")),
        # BAM(C) fixes r = 16; the gates take r, so the module is put together as BAM's __init__
        "_bam(16, 4)",
        (3, 16, 10, 10),
        namespace={"gate_activation": None},
        note="the authors' ChannelGate reads an undefined global gate_activation; it is given None",
    ),
    Source(
        "cbam",
        "cbam",
        {"reduction": 4, "use_bn": True},
        "Jongchan/attention-module",
        "459efad0e05ee7dde50c41ca10a3d0800bc3792a",
        tuple(
            ("MODELS/cbam.py", s)
            for s in (
                "BasicConv",
                "Flatten",
                "ChannelGate",
                "logsumexp_2d",
                "ChannelPool",
                "SpatialGate",
                "CBAM",
            )
        ),
        "CBAM(16, 4)",
        (2, 16, 7, 9),
        flip=("SpatialGate.spatial.conv.weight",),
        note="the authors pool [max; mean] over channels, visattn [mean; max]: the spatial conv's "
        "two input channels are swapped when loaded",
    ),
    Source(
        "coord",
        "coord",
        {},
        "houqb/CoordAttention",
        "7619bea9acbe260b3793833cc78cef3f124c8112",
        tuple(("coordatt.py", s) for s in ("h_sigmoid", "h_swish", "CoordAtt")),
        "CoordAtt(16, 16)",
        (2, 16, 7, 9),
        zero=("conv1.bias",),
        note="the authors' conv1 has a bias before its BN, which visattn leaves out; it is zero",
    ),
    Source(
        "triplet",
        "triplet",
        {},
        "landskape-ai/triplet-attention",
        "2cf02fb91196408ac6352f7984a0336aa4f7677a",
        tuple(
            ("triplet_attention.py", s)
            for s in (
                "BasicConv",
                "ZPool",
                "AttentionGate",
                "TripletAttention",
            )
        ),
        "TripletAttention()",
        (2, 8, 7, 9),
    ),
    Source(
        "scsa",
        "scsa",
        {"heads": 2, "window": 4},
        "HZAI-ZJNU/SCSA",
        "8c46866f12fc1abe6fa3d905c1f615e23c79865c",
        (("mmpretrain/models/attentions/SCSA.py", "SCSA"),),
        "SCSA(16, 2, window_size=4)",
        (2, 16, 9, 11),
    ),
    Source(
        "mlca",
        "mlca",
        {},
        "wandahangFY/MLCA",
        "afbeb47a0f140b7ac446405218ac5d993931db28",
        (("MLCA.py", "MLCA"),),
        "MLCA(32)",
        (2, 32, 7, 9),
    ),
    Source(
        "agent_attn",
        "agent_attn",
        {"heads": 2, "agent_num": 9, "feat_size": 7},
        "LeapLabTHU/Agent-Attention",
        "207ce3eb357b22ef8a15f8fa21cd1f14697bbaba",
        (("agent_transformer/models/agent_pvt.py", "AgentAttention"),),
        "AgentAttention(16, 49, num_heads=2, qkv_bias=True, agent_num=9)",
        (2, 16, 7, 7),
        call="x + _tokens(m, x)",  # visattn's block is residual, as the authors' Block uses it
    ),
    Source(
        "area_attn",
        "area_attn",
        {"heads": 2, "area": 2},
        "sunsmarterjie/yolov12",
        "d3cbe103b992ff6dd20c722e84e1b6f18f4c5efc",
        (
            ("ultralytics/nn/modules/conv.py", "autopad"),
            ("ultralytics/nn/modules/conv.py", "Conv"),
            ("ultralytics/nn/modules/block.py", "AAttn"),
        ),
        "AAttn(16, 2, area=2)",
        (2, 16, 6, 5),
        call="x + m(x)",  # the authors' ABlock adds its input back
        namespace={"USE_FLASH_ATTN": False},
        rename={".conv.": ".0.", ".bn.": ".1."},
    ),
    Source(
        "caa",
        "caa",
        {"kernel_size": 11, "norm_act": True},
        "NUST-Machine-Intelligence-Laboratory/PKINet",
        "c1e72da3f63a5279facced24d0e40320a5ceaddd",
        (("mmrotate/models/backbones/pkinet.py", "CAA"),),
        "CAA(16)",
        (2, 16, 9, 13),
        call="x * m(x)",
        namespace={"ConvModule": _ConvModule},
        rename={".conv.": ".", ".bn.": ".1."},
        note="CAA returns its attention factor; the caller multiplies (PKINet's block does)",
    ),
    Source(
        "eca",
        "eca",
        {"kernel_size": 3},
        "BangguWu/ECANet",
        "b332f6b3e6e2afe8a3287dc8ee8440a0fbec74c4",
        (("models/eca_module.py", "eca_layer"),),
        "eca_layer(16, 3)",
        (2, 16, 5, 6),
    ),
    Source(
        "gct",
        "gct",
        {"norm": "official"},
        "z-x-yang/GCT",
        "68983edd87f8cfbe709b1b51214c69eb9c81abd7",
        (("PyTorch/GCT.py", "GCT"),),
        "GCT(16)",
        (2, 16, 5, 6),
    ),
    Source(
        "srm",
        "srm",
        {"std": "official"},
        "hyunjaelee410/style-based-recalibration-module",
        "f6221c77e797c4530dddba03616153708d636bd1",
        (("models/recalibration_modules.py", "SRMLayer"),),
        "SRMLayer(16)",
        (2, 16, 5, 6),
    ),
    Source(
        "fca",
        "fca",
        {"reduction": 4, "dct_size": 7},
        "cfzd/FcaNet",
        "aa5fb63505575bb4e4e094613565379c3f6ada33",
        tuple(
            ("model/layer.py", s)
            for s in (
                "get_freq_indices",
                "MultiSpectralAttentionLayer",
                "MultiSpectralDCTLayer",
            )
        ),
        "MultiSpectralAttentionLayer(32, 7, 7, reduction=4)",
        (2, 32, 14, 14),
        keep=("fc.",),
        note="the authors' DCT filters are a fixed buffer that visattn computes itself",
    ),
    Source(
        "simam",
        "simam",
        {"variance": "unbiased"},
        "ZjjConan/SimAM",
        "ae98f43a34a051cc82f6e618853c690e1f4c92e6",
        (("networks/attentions/simam_module.py", "simam_module"),),
        "simam_module()",
        (2, 8, 5, 6),
    ),
    Source(
        "bra",
        "bra",
        {"heads": 2, "n_win": 2, "topk": 2, "lepe_kernel": 3},
        "rayleizhu/BiFormer",
        "1697bbbeafb8680524898f1dcaac10defd0604be",
        (
            (_BRA, "TopkRouting"),
            (_BRA, "KVGather"),
            (_BRA, "QKVLinear"),
            (_BRA, "BiLevelRoutingAttention"),
        ),
        "BiLevelRoutingAttention(16, num_heads=2, n_win=2, topk=2, side_dwconv=3, auto_pad=True)",
        (2, 16, 8, 8),
        call="x + m(x.permute(0, 2, 3, 1)).permute(0, 3, 1, 2)",  # residual
    ),
    Source(
        "gc",
        "gc",
        {"reduction": 4, "zero_init_last": False},
        "xvjiarui/GCNet",
        "029db5407dc27147eb1d41f62b09dfed8ec88837",
        tuple(("mmdet/ops/gcb/context_block.py", s) for s in ("last_zero_init", "ContextBlock")),
        "ContextBlock(16, 1 / 4, pooling_type='att', fusion_types=('channel_add',))",
        (2, 16, 5, 6),
    ),
    Source(
        "gsop",
        "gsop",
        {"rd_channels": 16},
        "ZilinGao/Global-Second-order-Pooling-Convolutional-Networks",
        "662a6996623f8e2783291fc5efaa16cc30d227ac",
        (
            ("torchvision/models/MPNCOV/python/MPNCOV.py", "Covpool"),
            ("torchvision/models/MPNCOV/python/MPNCOV.py", "CovpoolLayer"),
            ("torchvision/models/resnet.py", "Bottleneck"),
        ),
        # planes > 64: the authors' reduction conv has stride 1 (stride 2 is their stage 1 only)
        "Bottleneck(260, 65, attention='1', att_dim=16)",
        (2, 260, 4, 3),
        call="x * m.chan_att(x)",
        positive=True,
        zero=("conv_for_DR.bias",),
        keep=("conv_for_DR.", "bn_for_DR.", "row_bn.", "row_conv_group.", "fc_adapt_channels."),
        namespace={"MPNCOV": None},  # filled in by _gsop_namespace
        note="chan_att of the authors' Bottleneck on a non-negative input (their ReLU before it "
        "is then the identity); their reduction conv's bias, which visattn leaves out, is zero",
    ),
    Source(
        "scse",
        "scse",
        {"combine": "max"},
        "ai-med/squeeze_and_excitation",
        "acdd26e7e3956b8e3d3b32663a784ebd64c844dd",
        tuple(
            ("squeeze_and_excitation/squeeze_and_excitation.py", s)
            for s in ("ChannelSELayer", "SpatialSELayer", "ChannelSpatialSELayer")
        ),
        "ChannelSpatialSELayer(16)",
        (2, 16, 5, 6),
        note="the authors' released scSE combines by max-out (their TMI 2019 extension)",
    ),
    Source(
        "cot",
        "cot",
        {},
        "JDAI-CV/CoTNet",
        "895e02467d5691c5227f501732dc84390706a25f",
        (("models/cotnet.py", "CotLayer"),),
        "CotLayer(16, 3)",
        (2, 16, 6, 7),
        namespace={"LocalConvolution": None, "get_act_layer": None},  # see _cot_namespace
        note="the authors' LocalConvolution is a cupy CUDA kernel (cupy_layers/"
        "aggregation_zeropad.py); its forward kernel's index arithmetic is transcribed to torch "
        "in generate.py (_LocalConvolution) and runs in its place; timm's get_act_layer gives "
        "their swish",
    ),
    Source(
        "psa_parallel",
        "psa",
        {"layout": "parallel", "form": "official"},
        "DeLightCMU/PSA",
        "20e307ad708ae6a39239aa50ffa32e0c36c92894",
        ((_PSA, "PSA_p"),),
        "PSA_p(16, 16)",
        (2, 16, 7, 9),
    ),
    Source(
        "psa_sequential",
        "psa",
        {"layout": "sequential", "form": "official"},
        "DeLightCMU/PSA",
        "20e307ad708ae6a39239aa50ffa32e0c36c92894",
        ((_PSA, "PSA_s"),),
        "PSA_s(16, 16)",
        (2, 16, 7, 9),
    ),
    Source(
        "danet",
        "danet",
        {"fusion": "sum", "cam_logits": "negated"},
        "junfu1115/DANet",
        "b0a0fa008148f102321cdaa7ca38fb0ddd0239d1",
        tuple(("encoding/nn/da_att.py", s) for s in ("PAM_Module", "CAM_Module")),
        "nn.ModuleDict({'pam': PAM_Module(16), 'cam': CAM_Module(16)})",
        (2, 16, 5, 6),
        call="m['pam'](x) + m['cam'](x)",  # DANet's head sums the two (after its own convs)
        rename={
            "pam.gamma": "alpha",
            "cam.gamma": "beta",
            "pam.query_conv": "query",
            "pam.key_conv": "key",
            "pam.value_conv": "value",
        },
        namespace={
            "Module": nn.Module,
            "Conv2d": nn.Conv2d,
            "Parameter": nn.Parameter,
            "Softmax": nn.Softmax,
        },
        note="the position and channel modules side by side and summed, as DANet's head sums "
        "them; the head's 3x3 convolutions around each are not part of the block",
    ),
    Source(
        "cc",
        "cc",
        {"recurrence": 2, "gamma": True},
        "speedinghzl/CCNet",
        "1fae6c67229c3863232494762b0afd9a8d7ff309",
        (("cc_attention/functions.py", "CrissCrossAttention"),),
        "CrissCrossAttention(16)",
        (2, 16, 5, 6),
        call="m(m(x))",  # RCCA: the same module applied twice
        namespace={"Softmax": nn.Softmax, "INF": None},  # INF: filled in by _inf
        note="the authors' INF puts its -inf diagonal on the GPU (.cuda()); the same tensor is "
        "built on the CPU",
    ),
    Source(
        "external",
        "external",
        {"form": "official"},
        "MenghaoGuo/EANet",
        "59c03cb0a286d3a29a797f8ea07fb89d7af56b60",
        (("model_torch.py", "External_attention"),),
        "External_attention(16)",
        (2, 16, 5, 6),
        namespace={"norm_layer": nn.BatchNorm2d, "_BatchNorm": nn.modules.batchnorm._BatchNorm},
        note="the authors' norm_layer is a SynchronizedBatchNorm2d, which is BatchNorm2d in eval "
        "mode on one device",
    ),
    Source(
        "ema",
        "ema",
        {"groups": 4},
        "YOLOonMe/EMA-attention-module",
        "afc37ecf52454c03421a86105fc5c16eb4ea1ad3",
        (("EMA_attention_module", "EMA"),),
        "EMA(16, factor=4)",
        (2, 16, 7, 9),
    ),
    Source(
        "sge",
        "sge",
        {"groups": 4, "std": "unbiased"},
        "implus/PytorchInsight",
        "2864528f8b83f52c3df76f7c3804aa468b91e5cf",
        (("classification/models/imagenet/resnet_sge.py", "SpatialGroupEnhance"),),
        "SpatialGroupEnhance(4)",
        (2, 16, 7, 9),
    ),
    Source(
        "shuffle",
        "shuffle",
        {"groups": 2},
        "wofmanaf/SA-Net",
        "00a676085e2ad12f3e2053109ece4840de6a5ce1",
        (("models/sa_resnet.py", "sa_layer"),),
        "sa_layer(16, groups=2)",
        (2, 16, 7, 9),
    ),
)


class _LocalConvolution(nn.Module):
    """CoTNet's ``LocalConvolution`` on the CPU: ``aggregation_zeropad_forward_kernel`` of the
    authors' ``cupy_layers/aggregation_zeropad.py`` written out in torch, index for index::

        top[n, head, c, h, w] = sum_{kh, kw} weight[n, head, c % weight_channels, kh * K + kw, h, w]
                                * bottom[n, c, h_in, w_in]   (h_in, w_in inside the map)
        h_in = -pad + h * stride + kh * dilation  (likewise w_in)

    ``weight``: ``(N, heads, weight_channels, K * K, H_out, W_out)``; the output is
    ``(N, heads * C, H_out, W_out)``, as their kernel writes it."""

    def __init__(
        self,
        in_channels: int,
        out_channels: int,
        kernel_size: int,
        stride: int = 1,
        padding: int = 0,
        dilation: int = 1,
        pad_mode: int = 0,
    ) -> None:
        super().__init__()
        self.k, self.stride, self.pad, self.dilation = kernel_size, stride, padding, dilation

    def forward(self, bottom: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
        n, c, hb, wb = bottom.shape
        heads, wc, _, ht, wt = weight.shape[1:]
        top = bottom.new_zeros(n, heads, c, ht, wt)
        hs = torch.arange(ht).view(ht, 1)
        ws = torch.arange(wt).view(1, wt)
        for kh in range(self.k):
            for kw in range(self.k):
                h_in = -self.pad + hs * self.stride + kh * self.dilation
                w_in = -self.pad + ws * self.stride + kw * self.dilation
                inside = (h_in >= 0) & (h_in < hb) & (w_in >= 0) & (w_in < wb)
                b = bottom[:, :, h_in.clamp(0, hb - 1), w_in.clamp(0, wb - 1)] * inside
                wgt = weight[:, :, torch.arange(c) % wc, kh * self.k + kw]
                top = top + wgt * b.unsqueeze(1)
        return top.reshape(n, heads * c, ht, wt)


def _inf(b: int, h: int, w: int) -> torch.Tensor:
    """CCNet's ``INF`` on the CPU: ``(B W, H, H)`` with ``-inf`` on each diagonal, 0 elsewhere."""
    return -torch.diag(torch.tensor(float("inf")).repeat(h), 0).unsqueeze(0).repeat(b * w, 1, 1)


def _bam(ns: dict[str, Any], channels: int, reduction: int) -> nn.Module:
    """BAM's __init__ with the reduction passed on (the authors' BAM(C) keeps the gates' 16)."""

    class BAM(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.channel_att = ns["ChannelGate"](channels, reduction)
            self.spatial_att = ns["SpatialGate"](channels, reduction)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            # the authors' BAM.forward, with F.sigmoid written as torch.sigmoid
            att = 1 + torch.sigmoid(self.channel_att(x) * self.spatial_att(x))
            return att * x

    return BAM()


def _tokens(m: nn.Module, x: torch.Tensor) -> torch.Tensor:
    """A token module on a map: (N, C, H, W) -> (N, HW, C) -> module(tokens, H, W) -> map."""
    n, c, h, w = x.shape
    out = m(x.flatten(2).transpose(1, 2), h, w)
    return out.transpose(1, 2).reshape(n, c, h, w)


def cut(text: str, names: list[str]) -> str:
    """The source of the top-level classes and functions ``names`` of a file, in that order."""
    tree = ast.parse(text)
    found = {
        node.name: ast.get_source_segment(text, node)
        for node in tree.body
        if isinstance(node, ast.ClassDef | ast.FunctionDef)
    }
    missing = [n for n in names if n not in found]
    if missing:
        raise KeyError(f"not found at top level: {missing}")
    return "\n\n".join(found[n] for n in names)


def _checkout(code: Path, repo: str) -> Path:
    path = code / repo.replace("/", "+")
    if not path.is_dir():
        raise FileNotFoundError(
            f"{path}: clone https://github.com/{repo} there (see this file's doc)"
        )
    return path


def _read(path: Path, commit: str, file: str) -> str:
    """A file of a checkout (a work tree, or a bare repository read at ``commit``)."""
    if (path / file).is_file():
        return (path / file).read_text()
    return subprocess.run(
        ["git", f"--git-dir={path}", "show", f"{commit or 'HEAD'}:{file}"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout


def _head(path: Path) -> str:
    git = (
        ["git", f"--git-dir={path / '.git'}"]
        if (path / ".git").exists()
        else ["git", f"--git-dir={path}"]
    )
    return subprocess.run(
        [*git, "rev-parse", "HEAD"], check=True, capture_output=True, text=True
    ).stdout.strip()


def authors_module(src: Source, code: Path) -> tuple[nn.Module, dict[str, Any], str]:
    """The authors' module of ``src`` built from their code, its namespace, and the commit."""
    path = _checkout(code, src.repo)
    commit = src.commit or _head(path)
    ns: dict[str, Any] = {**COMMON, **src.namespace, "__name__": f"authors_{src.name}"}
    for file in dict.fromkeys(f for f, _ in src.symbols):
        names = [s for f, s in src.symbols if f == file]
        if src.name == "gsop" and file.endswith("MPNCOV.py"):
            mpn: dict[str, Any] = {**COMMON, "Function": torch.autograd.Function}
            exec(compile(cut(_read(path, commit, file), names), file, "exec"), mpn)
            ns["MPNCOV"] = argparse.Namespace(**{n: mpn[n] for n in names})
            continue
        exec(compile(cut(_read(path, commit, file), names), file, "exec"), ns)
    if "INF" in src.namespace:
        ns["INF"] = _inf
    if "LocalConvolution" in src.namespace:
        from timm.layers import get_act_layer

        ns.update(LocalConvolution=_LocalConvolution, get_act_layer=get_act_layer)
    module = eval(src.build, {**ns, "_bam": functools.partial(_bam, ns)})
    return module, ns, commit


def _seed(name: str) -> int:
    return sum(ord(c) * 31**i for i, c in enumerate(name)) % 2**31


def tensors(module: nn.Module, src: Source) -> dict[str, torch.Tensor]:
    """The authors' floating-point parameters and buffers that visattn's block has too."""
    out = {}
    for k, v in module.state_dict().items():
        if not v.is_floating_point() or k in src.zero:
            continue
        if src.keep and not k.startswith(src.keep):
            continue
        out[k] = v
    return out


def key_map(
    theirs: dict[str, torch.Tensor], block: nn.Module, rename: dict[str, str]
) -> list[list[str]]:
    """Pairs (their name, visattn's name): first the names that agree (after ``rename``), then
    the rest in the two modules' orders; every pair of the same size, every tensor paired."""
    ours = {k: v for k, v in block.state_dict().items() if v.is_floating_point()}

    def renamed(k: str) -> str:
        for old, new in rename.items():
            k = k.replace(old, new)
        return k

    pairs = {a: renamed(a) for a in theirs if renamed(a) in ours}
    rest_a = [a for a in theirs if a not in pairs]
    rest_b = [b for b in ours if b not in pairs.values()]
    pairs.update(zip(rest_a, rest_b))
    if len(rest_a) != len(rest_b) or any(
        theirs[a].numel() != ours[b].numel() for a, b in pairs.items()
    ):
        raise ValueError(
            "tensors differ:\n  authors "
            + str([(k, tuple(v.shape)) for k, v in theirs.items()])
            + "\n  visattn "
            + str([(k, tuple(v.shape)) for k, v in ours.items()])
        )
    return [[a, b] for a, b in pairs.items()]


def generate(src: Source, code: Path) -> tuple[dict[str, torch.Tensor], dict[str, str]]:
    """The stored tensors and metadata of one reference."""
    from helpers.weights import randomize  # the tests' draw: trained-looking weights and norms

    import visattn

    module, ns, commit = authors_module(src, code)
    randomize(module, _seed(src.name))
    gen = torch.Generator().manual_seed(_seed(src.name) + 1)
    with torch.no_grad():
        for k in src.zero:
            module.get_parameter(k).zero_()
    module.eval()
    x = torch.randn(src.shape, generator=gen)
    if src.positive:
        x = x.abs()
    x.requires_grad_(True)
    y = eval(src.call, {**ns, "m": module, "x": x, "_tokens": _tokens})
    g = torch.randn(y.shape, generator=gen)
    (grad,) = torch.autograd.grad(y, x, g)
    theirs = tensors(module, src)
    block = visattn.create_block(src.block, src.shape[1], **src.options)
    data = {
        "input": x.detach(),
        "output": y.detach(),
        "cotangent": g,
        "input_grad": grad,
        **{f"state.{k}": v.detach().clone() for k, v in theirs.items()},
    }
    meta = {
        "format": str(FORMAT),
        "block": src.block,
        "options": json.dumps(src.options, sort_keys=True),
        "repo": src.repo,
        "commit": commit,
        "symbols": json.dumps([list(s) for s in src.symbols]),
        "build": src.build,
        "call": src.call,
        "zeroed": json.dumps(list(src.zero)),
        "flip": json.dumps(list(src.flip)),
        "key_map": json.dumps(key_map(theirs, block, src.rename)),
        "note": src.note,
    }
    return data, meta


GUIDE = HERE.parents[2] / "docs" / "guides" / "blocks.md"
START, END = "<!-- references:start -->", "<!-- references:end -->"


def guide_table() -> str:
    """The blocks guide's table: block, source, and the worst float64 difference measured now
    between visattn's block and the stored outputs (output and input gradient)."""
    sys.path.insert(0, str(HERE.parent))
    from test_authors_references import REFERENCES, load, worst

    rows = [
        "| reference | block | authors' code (repository, commit: file, class) "
        "| max abs. difference |",
        "|---|---|---|---|",
    ]
    for path in REFERENCES:
        tensors, meta = load(path)
        files = dict.fromkeys(f for f, _ in json.loads(meta["symbols"]))
        symbols = [s for _, s in json.loads(meta["symbols"])]
        head = meta["build"].split("(")[0]
        main = head if head in symbols else ", ".join(s for s in symbols if s[0].isupper())
        where = ", ".join(f"`{f}`" for f in files)
        rows.append(
            f"| `{path.stem}` | `{meta['block']}` "
            f"| [{meta['repo']}](https://github.com/{meta['repo']}) "
            f"`{meta['commit'][:10]}`: {where}, `{main}` | {worst(tensors, meta):.1e} |"
        )
    return "\n".join(rows)


def write_guide() -> None:
    text = GUIDE.read_text()
    head, rest = text.split(START)
    _, tail = rest.split(END)
    GUIDE.write_text(f"{head}{START}\n{guide_table()}\n{END}{tail}")


def main(argv: list[str] | None = None) -> int:
    from safetensors.torch import save_file

    sys.path.insert(0, str(HERE.parents[1]))  # tests/, for helpers
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--code", type=Path, help="folder of the authors' checkouts")
    parser.add_argument("names", nargs="*", help="references to regenerate (default: all)")
    parser.add_argument(
        "--guide",
        action="store_true",
        help="only rewrite the blocks guide's table from the stored files",
    )
    args = parser.parse_args(argv)
    if args.guide:
        write_guide()
        return 0
    torch.set_default_dtype(torch.float64)
    if args.code is None:
        parser.error("--code is needed to regenerate")
    wanted = set(args.names) or {s.name for s in SOURCES}
    unknown = wanted - {s.name for s in SOURCES}
    if unknown:
        parser.error(f"unknown references {sorted(unknown)}")
    for src in SOURCES:
        if src.name not in wanted:
            continue
        data, meta = generate(src, args.code)
        save_file(
            {k: v.contiguous() for k, v in data.items()}, HERE / f"{src.name}.safetensors", meta
        )
        print(f"{src.name}: {src.repo}@{meta['commit'][:10]} -> {src.name}.safetensors")
    return 0


if __name__ == "__main__":
    sys.exit(main())
