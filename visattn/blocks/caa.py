"""Context Anchor Attention (Cai, Lai, Wang, Wang, Guo, Wu, Guo; CVPR 2024, "Poly Kernel Inception
Network for Remote Sensing Detection", PKINet)."""

from __future__ import annotations

import torch
import torch.nn as nn
import torch.nn.functional as F

from ._utils import check_positive_int
from .capture import record_attention
from .identity import ScaledSigmoid
from .registry import register_block


@register_block("caa", family="hybrid", paper="Cai et al., CVPR 2024 (PKINet)")
class ContextAnchorAttention(nn.Module):
    """CAA: a local average, then a cheap ``1 x k`` / ``k x 1`` strip-conv pair for long-range
    context, turned into a sigmoid weight for every channel and position.

    Follows the paper's CAA equations:

    * ``F_pool = Conv_{1x1}(P_avg(X))``, ``P_avg`` a ``7x7`` average pooling with stride 1 and
      zero padding 3 (border windows divide by 49, as PyTorch's ``AvgPool2d(7, 1, 3)``);
    * ``F_w = DWConv_{1 x k}(F_pool)``, ``F_h = DWConv_{k x 1}(F_w)`` (depthwise, with bias);
    * ``A = sigmoid(Conv_{1x1}(F_h))``; the block returns ``Y = X * A``. In PKINet ``A`` weights
      the output of the inception branch computed from the same input; used alone, it weights its
      own input.

    ``Conv_{1x1}`` is conv, BN (momentum 0.03, eps 1e-3) and SiLU by default, the defaults of the
    authors' ``CAA`` class (``PKINet/PKINet``). Their PKINet backbone builds CAA with no norm and no
    activation (plain 1x1 convs with bias): ``norm_act=False``. ``k = 11`` is the authors' size for
    the first block of a stage (they grow it by 2 per block).

    Shapes: ``(N, C, H, W) -> (N, C, H, W)``; attention map ``A``, ``(N, C, H, W)``.

    Parameters: ``2 C^2 + 2 k C + 6 C`` (``norm_act=False``: ``2 C^2 + 2 k C + 4 C``).

    Args:
        channels: input channels ``C``.
        kernel_size: ``k`` of the strip convs (positive odd).
        norm_act: BN and SiLU after each 1x1 conv (the authors' ``CAA`` defaults) or plain
            1x1 convs with bias (as PKINet builds it).
    """

    def __init__(self, channels: int, kernel_size: int = 11, norm_act: bool = True) -> None:
        super().__init__()
        check_positive_int("kernel_size", kernel_size, odd=True)
        self.norm_act = bool(norm_act)
        k = kernel_size

        def pointwise() -> nn.Sequential:
            if not self.norm_act:
                return nn.Sequential(nn.Conv2d(channels, channels, 1))
            return nn.Sequential(
                nn.Conv2d(channels, channels, 1, bias=False),
                nn.BatchNorm2d(channels, eps=1e-3, momentum=0.03),
                nn.SiLU(),
            )

        self.conv1 = pointwise()
        self.h_conv = nn.Conv2d(channels, channels, (1, k), padding=(0, k // 2), groups=channels)
        self.v_conv = nn.Conv2d(channels, channels, (k, 1), padding=(k // 2, 0), groups=channels)
        self.conv2 = pointwise()
        self.gate = nn.Sigmoid()

    def init_identity(self) -> None:
        """native: the last 1x1 stage outputs 0 (its BN or conv zero), gate 2*sigmoid: A = 1."""
        last = self.conv2[1] if self.norm_act else self.conv2[0]
        nn.init.zeros_(last.weight)
        nn.init.zeros_(last.bias)
        self.gate = ScaledSigmoid(2.0)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        f = self.conv1(F.avg_pool2d(x, 7, 1, 3))
        a = self.gate(self.conv2(self.v_conv(self.h_conv(f))))
        if not torch.jit.is_scripting():
            record_attention(self, a)
        return x * a

    def extra_repr(self) -> str:
        return f"norm_act={self.norm_act}"
