"""Bottleneck Attention Module (Park, Woo, Lee, Kweon; BMVC 2018, "BAM: Bottleneck Attention
Module")."""

from __future__ import annotations

import torch
import torch.nn as nn

from ._utils import check_choice, check_positive_int, get_layer, reduced_channels, spatial_mean
from .capture import record_attention
from .registry import register_block


@register_block("bam", family="hybrid", paper="Park et al., BMVC 2018")
class BAM(nn.Module):
    r"""BAM: ``F' = F + F * M(F)`` with ``M(F) = sigmoid(M_c(F) + M_s(F))`` (Eqs. (1)-(2)).

    $$
    F' = F + F \otimes M(F), \qquad M(F) = \sigma\big(M_c(F) + M_s(F)\big)
    $$

    $$
    M_c(F) = \mathrm{BN}\big(\mathrm{MLP}(\mathrm{AvgPool}(F))\big), \qquad
    M_s(F) = \mathrm{BN}\big(f_3^{1 \times 1}(f_2^{3 \times 3}(f_1^{3 \times 3}(
        f_0^{1 \times 1}(F))))\big)
    $$

    * channel branch (Eq. (3)): ``M_c(F) = BN(MLP(AvgPool(F)))``, MLP ``C -> C/r -> C`` with one
      ReLU hidden layer, ``(N, C, 1, 1)``;
    * spatial branch (Eq. (4)): ``M_s(F) = BN(f_3^{1x1}(f_2^{3x3}(f_1^{3x3}(f_0^{1x1}(F)))))``:
      a 1x1 reduction ``C -> C/r``, two 3x3 convs with dilation ``d = 4`` (padding ``d``, size
      kept), a 1x1 conv to one channel and BN, ``(N, 1, H, W)``; the inner convs are followed by
      BN + ReLU, as in the official code;
    * ``combine="sum"`` (paper, default): ``M = sigmoid(M_c + M_s)`` broadcast to ``(N, C, H, W)``.

    ``combine="product"`` is what the official code (``Jongchan/attention-module``,
    ``MODELS/bam.py``) computes: ``M = sigmoid(M_c * M_s)``, the product of the two branches'
    PRE-sigmoid outputs (not ``sigmoid(M_c) * sigmoid(M_s)``), then ``(1 + M) * F``. The official
    code also places its BNs differently, which ``layout="official"`` reproduces (the layout of
    the authors' released BAM-ResNet-50): the channel MLP has BN + ReLU on its hidden layer and
    no BN on its output, the spatial branch no BN after its last 1x1 conv, and every conv and
    linear has a bias. In ``layout="paper"`` (default) convs/linears followed by BN carry no
    bias.

    ``F + F * M = (1 + M) * F`` with ``M`` in ``(0, 1)``: the output/input ratio is in ``(1, 2)``.
    The channel branch's BN normalises one value per channel and image, so training needs N > 1.

    Shapes: ``(N, C, H, W) -> (N, C, H, W)``; attention map ``M`` ``(N, C, H, W)``.

    Parameters (default options, ``C_r = C // 16``): ``3 C C_r + 18 C_r^2 + 8 C_r + 2 C + 2``
    (channel: ``C C_r + C_r`` + ``C_r C`` + BN ``2C``; spatial: ``C C_r`` + BN ``2 C_r``, two 3x3
    ``2 (9 C_r^2 + 2 C_r)``, ``C_r`` + BN ``2``); ``layout="official"``:
    ``3 C C_r + 18 C_r^2 + 13 C_r + C + 1`` (channel: ``C C_r + C_r`` + BN ``2 C_r`` +
    ``C_r C + C``; spatial: ``C C_r + C_r`` + BN ``2 C_r``, two 3x3 ``2 (9 C_r^2 + 3 C_r)``,
    ``C_r + 1``).

    Args:
        channels: input channels ``C``.
        reduction: ratio ``r`` of both branches (16 in the paper).
        dilation: dilation ``d`` of the two 3x3 convs (4 in the paper).
        combine: ``"sum"`` (paper) or ``"product"`` (official code), see above.
        act_layer: hidden activation (name or class), ReLU in the paper.
        layout: ``"paper"`` (Eqs. (3)-(4): BN on each branch's output) or ``"official"`` (the
            official code's BNs and biases, see above).
    """

    def __init__(
        self,
        channels: int,
        reduction: float = 16,
        dilation: int = 4,
        combine: str = "sum",
        act_layer: str | type[nn.Module] = "relu",
        layout: str = "paper",
    ) -> None:
        super().__init__()
        check_choice("combine", combine, ("sum", "product"))
        check_choice("layout", layout, ("paper", "official"))
        check_positive_int("dilation", dilation)
        hidden = reduced_channels(channels, reduction)
        act = get_layer(act_layer, "act_layer")
        self.combine, self.layout = combine, layout
        official = layout == "official"
        if official:  # Linear-BN-ReLU-Linear, as 1x1 convs on the pooled (N, C, 1, 1)
            self.channel = nn.Sequential(
                nn.Conv2d(channels, hidden, 1),
                nn.BatchNorm2d(hidden),
                act(),
                nn.Conv2d(hidden, channels, 1),
            )
        else:
            self.channel = nn.Sequential(
                nn.Conv2d(channels, hidden, 1),
                act(),
                nn.Conv2d(hidden, channels, 1, bias=False),
                nn.BatchNorm2d(channels),
            )
        layers: list[nn.Module] = [
            nn.Conv2d(channels, hidden, 1, bias=official),
            nn.BatchNorm2d(hidden),
            act(),
        ]
        for _ in range(2):
            layers += [
                nn.Conv2d(hidden, hidden, 3, padding=dilation, dilation=dilation, bias=official),
                nn.BatchNorm2d(hidden),
                act(),
            ]
        layers += [nn.Conv2d(hidden, 1, 1, bias=official)]
        if not official:
            layers.append(nn.BatchNorm2d(1))
        self.spatial = nn.Sequential(*layers)
        self.attn_scale: nn.Parameter | None = None  # set by init_identity

    def init_identity(self) -> None:
        """native: learnable scale gamma = 0 on the attention term, F' = F + gamma * F * M(F).

        BAM's own ``(1 + M) F`` cannot be ``F`` with a sigmoid ``M``, so the scale is added.
        """
        self.attn_scale = nn.Parameter(torch.zeros(1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        mc = self.channel(spatial_mean(x))  # (N, C, 1, 1)
        ms = self.spatial(x)  # (N, 1, H, W)
        m = torch.sigmoid(mc + ms if self.combine == "sum" else mc * ms)
        if self.attn_scale is not None:
            m = m * self.attn_scale
        if not torch.jit.is_scripting():
            record_attention(self, m)
        return torch.addcmul(x, x, m)  # F + F * M(F)

    def extra_repr(self) -> str:
        return f"combine={self.combine!r}, layout={self.layout!r}"
