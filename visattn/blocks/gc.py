"""Global Context block (Cao, Xu, Lin, Wei, Hu; ICCV Workshops 2019, "GCNet: Non-local Networks Meet
Squeeze-Excitation Networks and Beyond")."""

from __future__ import annotations

import torch
import torch.nn as nn

from ._utils import get_layer, reduced_channels
from .capture import record_attention
from .registry import register_block


@register_block("gc", family="channel", paper="Cao et al., ICCVW 2019")
class GlobalContext(nn.Module):
    """GC block: softmax attention pooling, bottleneck transform with LayerNorm, fusion by addition.

    Follows Eq. (4) of the paper (Fig. 4(d)),
    ``z_i = x_i + W_v2 ReLU(LN(W_v1 sum_j [exp(W_k x_j) / sum_m exp(W_k x_m)] x_j))``:

    * context modelling: a 1x1 conv ``W_k: C -> 1`` (with bias) and a softmax over the ``HW``
      positions give weights ``a`` ``(N, 1, H, W)``; the context is ``sum_j a_j x_j``
      ``(N, C, 1, 1)``;
    * transform: 1x1 conv ``C -> C/r``, ``LayerNorm([C/r, 1, 1])``, ReLU, 1x1 conv ``C/r -> C``
      (convs with bias, as in the official code);
    * fusion by broadcast addition ``x + transform(context)``, the same vector at every position.

    As in the official code (``xvjiarui/GCNet``, ``last_zero_init``) and timm, the last conv starts
    at zero, so a fresh block is the identity; ``zero_init_last=False`` keeps PyTorch's default
    init.

    Shapes: ``(N, C, H, W) -> (N, C, H, W)``. The attention map recorded is the softmax pooling
    weights ``a`` ``(N, 1, H, W)`` (each image's map sums to 1), not the added vector.

    Parameters (default options, ``C_r = C // 16``): ``2 C C_r + 3 C_r + 2 C + 1``
    (``W_k``: ``C + 1``; ``W_v1``: ``C C_r + C_r``; LN: ``2 C_r``; ``W_v2``: ``C_r C + C``).

    Args:
        channels: input channels ``C``.
        reduction: bottleneck ratio ``r`` (``1/r`` = 1/16 in the paper's ImageNet models).
        act_layer: bottleneck activation (name or class), ReLU in the paper.
        zero_init_last: start the last conv at zero (block = identity at init).
    """

    def __init__(
        self,
        channels: int,
        reduction: float = 16,
        act_layer: str | type[nn.Module] = "relu",
        zero_init_last: bool = True,
    ) -> None:
        super().__init__()
        hidden = reduced_channels(channels, reduction)
        self.conv_attn = nn.Conv2d(channels, 1, 1)
        self.fc1 = nn.Conv2d(channels, hidden, 1)
        self.norm = nn.LayerNorm([hidden, 1, 1])
        self.act = get_layer(act_layer, "act_layer")()
        self.fc2 = nn.Conv2d(hidden, channels, 1)
        self._zero_init_last = bool(zero_init_last)  # not `zero_init_last`: timm calls that
        self.reset_parameters()

    def reset_parameters(self) -> None:
        nn.init.kaiming_normal_(self.conv_attn.weight, mode="fan_in", nonlinearity="relu")
        nn.init.zeros_(self.conv_attn.bias)
        if self._zero_init_last:
            nn.init.zeros_(self.fc2.weight)
            nn.init.zeros_(self.fc2.bias)

    def init_identity(self) -> None:
        """native: the last conv W_v2 starts at zero (the official init), so y = x + 0."""
        nn.init.zeros_(self.fc2.weight)
        nn.init.zeros_(self.fc2.bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        n, c, h, w = x.shape
        a = self.conv_attn(x).view(n, 1, h * w).softmax(dim=-1)  # (N, 1, HW)
        context = torch.bmm(x.flatten(2), a.to(x.dtype).transpose(1, 2)).view(n, c, 1, 1)
        t = self.fc2(self.act(self.norm(self.fc1(context))))
        if not torch.jit.is_scripting():
            record_attention(self, a.view(n, 1, h, w))
        return x + t
