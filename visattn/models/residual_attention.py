"""Residual Attention Networks (Wang, Jiang, Qian, Yang, Li, Zhang, Wang, Tang; CVPR 2017,
"Residual Attention Network for Image Classification").

Built from the ``residual_attention`` block (:mod:`visattn.blocks.residual_attention`) and the
pre-activation unit of :mod:`visattn.blocks._units` (shared with ``preresnet164_cifar``).

ImageNet (Table 2 of the paper), 224x224 input::

    conv 7x7/2, 64 - BN - ReLU - max-pool 3x3/2            -> 56x56
    unit(64 -> 256)             + n1 x Attention(256, 3 pooling levels)    56x56
    unit(256 -> 512, stride 2)  + n2 x Attention(512, 2 levels)            28x28
    unit(512 -> 1024, stride 2) + n3 x Attention(1024, 1 level)            14x14
    unit(1024 -> 2048, stride 2) + 2 x unit(2048)                          7x7
    BN - ReLU - global average pool - FC

with ``(n1, n2, n3) = (1, 1, 1)`` for Attention-56 and ``(1, 2, 3)`` for Attention-92, each unit
a pre-activation bottleneck (``1x1, 3x3, 1x1`` with ``out/4`` inner channels) and each attention
module with ``p, t, r = 1, 2, 1``.

CIFAR (32x32 input): the paper gives no table; it states the networks follow the pre-activation
ResNet-164 of He et al. (ECCV 2016), which it compares against at nearly equal size (Attention-92
on CIFAR-10: 1.9M parameters against ResNet-164's 1.7M). We therefore use ResNet-164's widths::

    conv 3x3, 16                                                        32x32
    unit(16 -> 64)              + n1 x Attention(64, 2 pooling levels)     32x32
    unit(64 -> 128, stride 2)   + n2 x Attention(128, 1 level)             16x16
    unit(128 -> 256, stride 2)  + n3 x Attention(256, 1 level)              8x8
    2 x unit(256)
    BN - ReLU - global average pool - FC

(mask branches pool 32 -> 8, 16 -> 8 and 8 -> 4). This is our reconstruction; the measured
parameter count is reported next to the paper's in the test suite and the project README.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
import torch.nn as nn

from ..blocks._units import PreActBottleneck
from ..blocks.residual_attention import ResidualAttention
from .features import TimmModelMixin, classifier_head

__all__ = ["ResidualAttentionNet"]


def _unit(cin: int, cout: int, stride: int = 1) -> PreActBottleneck:
    return PreActBottleneck(cin, cout // 4, stride, out_channels=cout)


def _stem(stem: str, in_chans: int, channels: int) -> nn.Sequential:
    """ImageNet: 7x7/2 conv, BN, ReLU, 3x3/2 max-pool; CIFAR: a 3x3 conv."""
    if stem == "imagenet":
        return nn.Sequential(
            nn.Conv2d(in_chans, channels, 7, 2, 3, bias=False),
            nn.BatchNorm2d(channels),
            nn.ReLU(inplace=True),
            nn.MaxPool2d(3, 2, 1),
        )
    return nn.Sequential(nn.Conv2d(in_chans, channels, 3, 1, 1, bias=False))


class ResidualAttentionNet(TimmModelMixin, nn.Module):
    """A Residual Attention Network: stages of one transition unit followed by attention modules.

    Args:
        attention_modules: attention modules per stage, e.g. ``(1, 2, 3)`` for Attention-92.
        widths: output channels of each attention stage and of the final stage (one more entry
            than ``attention_modules``; a final width equal to the last stage's adds no
            transition).
        mask_depths: pooling levels of the mask branch in each stage.
        final_units: pre-activation units in the final stage (transition included when the
            width changes).
        stem: ``"imagenet"`` (7x7/2 conv, BN, ReLU, 3x3/2 max-pool) or ``"cifar"`` (3x3 conv).
        stem_channels: output channels of the stem.
        learning: ``"arl"`` attention residual learning (Eq. 3) or ``"nal"`` naive (Eq. 1).
        mask: ``"mixed"``, ``"channel"`` or ``"spatial"`` attention (Eqs. 4, 5, 6).
        p, t, r: the attention modules' hyper-parameters (1, 2, 1 in the paper).
        mask_bias: bias on each mask head's last 1x1 convolution (``False``, the official
            prototxt; ``True`` was visattn's earlier default).
        align_corners: bilinear up-sampling convention of the mask branch (``True``, the
            prototxt's ``Interp`` layer; ``False`` was visattn's earlier default).
        num_classes: classifier outputs.
        in_chans: input channels.
        drop_rate: dropout before the classifier.

    Shapes: ``(N, in_chans, H, W) -> (N, num_classes)`` for any ``H, W``.

    timm's interface (:class:`visattn.models.features.TimmModelMixin`): ``feature_info`` has the
    stem (after its ReLU, ``stem.2``; the CIFAR stem is a bare convolution, ``stem.0``) and the
    output of every stage ``stages.0``.. (an attention stage ends with its attention modules;
    the last, final stage's feature is after ``norm``/``act``).
    """

    def __init__(
        self,
        *,
        attention_modules: Sequence[int],
        widths: Sequence[int],
        mask_depths: Sequence[int],
        final_units: int,
        stem: str,
        stem_channels: int,
        learning: str = "arl",
        mask: str = "mixed",
        p: int = 1,
        t: int = 2,
        r: int = 1,
        mask_bias: bool = False,
        align_corners: bool = True,
        num_classes: int = 1000,
        in_chans: int = 3,
        drop_rate: float = 0.0,
    ) -> None:
        super().__init__()
        if len(widths) != len(attention_modules) + 1 or len(mask_depths) != len(attention_modules):
            raise ValueError(
                "widths needs one entry per attention stage plus the final stage, and "
                "mask_depths one per attention stage"
            )
        if stem not in ("imagenet", "cifar"):
            raise ValueError(f"stem must be 'imagenet' or 'cifar', got {stem!r}")
        if not 0.0 <= drop_rate < 1.0:
            raise ValueError(f"drop_rate must be in [0, 1), got {drop_rate}")
        self.num_classes = num_classes
        self.in_chans = in_chans
        self.drop_rate = drop_rate
        self.default_input_size = (in_chans, 224, 224) if stem == "imagenet" else (in_chans, 32, 32)
        self.stem = _stem(stem, in_chans, stem_channels)
        cin = stem_channels
        reduction = 2 if stem == "imagenet" else 1
        self.feature_info = [
            {
                "num_chs": stem_channels,
                "reduction": reduction,
                "module": "stem.2" if stem == "imagenet" else "stem.0",
            }
        ]
        reduction *= 2 if stem == "imagenet" else 1  # the max-pool
        stages = []
        module_args = {"p": p, "t": t, "r": r, "learning": learning, "mask": mask}
        module_args.update(mask_bias=mask_bias, align_corners=align_corners)
        for i, (n, width, depth) in enumerate(zip(attention_modules, widths, mask_depths)):
            layers: list[nn.Module] = [_unit(cin, width, 1 if i == 0 else 2)]
            layers += [ResidualAttention(width, depth=depth, **module_args) for _ in range(n)]
            stages.append(nn.Sequential(*layers))
            reduction *= 1 if i == 0 else 2
            self.feature_info.append(
                {"num_chs": width, "reduction": reduction, "module": f"stages.{i}"}
            )
            cin = width
        width = widths[-1]
        final: list[nn.Module] = []
        if width != cin:
            final.append(_unit(cin, width, 2))
        final += [_unit(width, width) for _ in range(final_units - len(final))]
        stages.append(nn.Sequential(*final))
        reduction *= 2 if width != cin else 1
        self.feature_info.append({"num_chs": width, "reduction": reduction, "module": "act"})
        self.stages = nn.Sequential(*stages)
        self.num_features = width
        self.norm = nn.BatchNorm2d(width)
        self.act = nn.ReLU(inplace=True)
        self.avgpool, self.fc = classifier_head(width, num_classes)
        for m in self.modules():
            if isinstance(m, nn.Conv2d):
                nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")

    def forward_stem(self, x: torch.Tensor) -> torch.Tensor:
        for m in self.stem:
            if not isinstance(m, nn.MaxPool2d):
                x = m(x)
        return x

    def forward_stem_pool(self, x: torch.Tensor) -> torch.Tensor:
        for m in self.stem:
            if isinstance(m, nn.MaxPool2d):
                x = m(x)
        return x

    def feature_stages(self) -> list[nn.Module]:
        return list(self.stages)

    def forward_features(self, x: torch.Tensor) -> torch.Tensor:
        """``(N, in_chans, H, W) -> (N, num_features, H', W')``."""
        if not torch.jit.is_scripting():
            return super().forward_features(x)  # the feature API's loop (grad checkpointing)
        return self.act(self.norm(self.stages(self.stem(x))))

    def forward_norm(self, x: torch.Tensor) -> torch.Tensor:
        return self.act(self.norm(x))

    def scripted_intermediates(self, x: torch.Tensor, take: list[int]) -> list[torch.Tensor]:
        """``forward_intermediates(x, take, intermediates_only=True)`` without the feature
        API's Python list of stages, for TorchScript (:class:`FeatureStages`)."""
        x = self.forward_stem(x)
        outs = [x]
        x = self.forward_stem_pool(x)
        for stage in self.stages:
            x = stage(x)
            outs.append(x)
        outs[-1] = self.forward_norm(outs[-1])
        return [outs[i] for i in take]

    def prune_stages(self, n: int) -> None:
        self.stages = self.stages[:n]

    def prune_norm(self) -> None:
        self.norm, self.act = nn.Identity(), nn.Identity()
