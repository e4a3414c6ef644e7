"""Large Separable Kernel Attention (Lau, Po, Rehman; Expert Systems with Applications 2024,
"Large Separable Kernel Attention: Rethinking the Large Kernel Attention Design in CNN")."""

from __future__ import annotations

import torch
import torch.nn as nn

from ._utils import check_positive_int
from .capture import record_attention
from .registry import register_block


def _default_dilation(kernel_size: int) -> int:
    """The authors' dilation for their kernel sizes: 2 for k = 7, 11; 3 for k = 23 ... 53."""
    return 2 if kernel_size < 23 else 3


@register_block("lska", family="spatial", paper="Lau et al., ESWA 2024 (LSKA)")
class LargeSeparableKernelAttention(nn.Module):
    """LSKA: VAN's large kernel attention with every 2-D depthwise kernel split into 1-D pairs.

    Follows the paper's LSKA equations: a ``k x k`` kernel is decomposed, as in VAN's LKA, into a
    ``(2d - 1) x (2d - 1)`` depthwise conv, a ``floor(k/d) x floor(k/d)`` depthwise conv with
    dilation ``d`` and a 1x1 conv; LSKA separates each depthwise conv into a row (``1 x m``) and a
    column (``m x 1``) conv:

    * ``Z~ = DW_{(2d-1) x 1}(DW_{1 x (2d-1)}(F))``,
    * ``Z = DW-D_{floor(k/d) x 1}(DW-D_{1 x floor(k/d)}(Z~))`` (dilation ``d``),
    * ``A = W_{1x1} Z``, ``F~ = A * F`` (Hadamard product).

    The receptive field is ``d - 1 + d floor(k/d)`` (``= k`` for the authors' sizes 7, 11, 23, 35,
    41, 53, with ``d = 2`` for 7 and 11, ``d = 3`` above). Every conv has a bias, as in the
    authors' ``LSKA`` (``StevenLauHKHK/Large-Separable-Kernel-Attention``); no difference from
    that code is known. Their released ImageNet weights use ``k = 23`` (the default). The VAN
    wrapper around it (``1x1 conv, GELU, LSKA, 1x1 conv`` plus a shortcut) belongs to the
    backbone.

    Shapes: ``(N, C, H, W) -> (N, C, H, W)``; attention map ``A``, ``(N, C, H, W)``.

    Parameters (``m = floor(k/d)``): ``C^2 + (4 d + 2 m + 3) C`` (``C^2 + 29 C`` for ``k = 23``).

    Args:
        channels: input channels ``C``.
        kernel_size: the large kernel ``k`` (positive odd).
        dilation: ``d``; ``None`` takes the authors' 2 for ``k < 23``, else 3. ``floor(k/d)``
            must be odd.
    """

    def __init__(self, channels: int, kernel_size: int = 23, dilation: int | None = None) -> None:
        super().__init__()
        check_positive_int("kernel_size", kernel_size, odd=True)
        if dilation is None:
            dilation = _default_dilation(kernel_size)
        check_positive_int("dilation", dilation)
        m = kernel_size // dilation
        if m < 1 or m % 2 == 0:
            raise ValueError(
                f"option 'dilation'={dilation} gives a dilated kernel floor(k/d)={m} for "
                f"kernel_size={kernel_size}; it must be odd and positive"
            )
        self.kernel_size, self.dilation = kernel_size, dilation
        local = 2 * dilation - 1

        def dw(size: tuple[int, int], dil: int) -> nn.Conv2d:
            pad = (dil * (size[0] - 1) // 2, dil * (size[1] - 1) // 2)
            return nn.Conv2d(channels, channels, size, padding=pad, dilation=dil, groups=channels)

        self.conv0h = dw((1, local), 1)
        self.conv0v = dw((local, 1), 1)
        self.conv_spatial_h = dw((1, m), dilation)
        self.conv_spatial_v = dw((m, 1), dilation)
        self.conv1 = nn.Conv2d(channels, channels, 1)

    def init_identity(self) -> None:
        """native: the 1x1 conv's weight zero and its bias one, so A = 1."""
        nn.init.zeros_(self.conv1.weight)
        nn.init.ones_(self.conv1.bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        z = self.conv_spatial_v(self.conv_spatial_h(self.conv0v(self.conv0h(x))))
        a = self.conv1(z)
        if not torch.jit.is_scripting():
            record_attention(self, a)
        return x * a

    def extra_repr(self) -> str:
        return f"kernel_size={self.kernel_size}, dilation={self.dilation}"
