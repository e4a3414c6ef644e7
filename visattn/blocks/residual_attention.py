"""Residual Attention module (Wang, Jiang, Qian, Yang, Li, Zhang, Wang, Tang; CVPR 2017,
"Residual Attention Network for Image Classification")."""

from __future__ import annotations

import torch
import torch.nn as nn
import torch.nn.functional as F

from ._units import PreActBottleneck
from ._utils import check_choice, check_positive_int
from .capture import record_attention
from .registry import register_block

__all__ = ["ResidualAttention"]

LEARNINGS = ("arl", "nal")
MASKS = ("mixed", "channel", "spatial")
SPATIAL_NORM_EPS = 1e-5


def _unit(channels: int) -> PreActBottleneck:
    """A pre-activation bottleneck ``C -> C`` with ``C // 4`` inner channels (the paper's unit)."""
    return PreActBottleneck(channels, channels // 4, out_channels=channels)


def _units(channels: int, n: int) -> nn.Sequential:
    return nn.Sequential(*(_unit(channels) for _ in range(n)))


def _upsample(t: torch.Tensor, size: tuple[int, int], align_corners: bool) -> torch.Tensor:
    return F.interpolate(t, size=size, mode="bilinear", align_corners=align_corners)


@register_block(
    "residual_attention",
    family="residual",
    paper="Wang et al., CVPR 2017",
    fp16_limit=(
        "its modulated trunk (1 + M) T, the block's own feature map, passes 65,504 at "
        "activations of order 1e4 (up to twice the trunk's) and feeds the next residual unit's "
        "convolution, as in eval mode, where BN does not rescale it"
    ),
)
class ResidualAttention(nn.Module):
    r"""Attention module of the Residual Attention Network.

    $$
    H_{i,c}(x) = \big(1 + M_{i,c}(x)\big) \, T_{i,c}(x) \ \ \text{(ARL, Eq. 3)}, \qquad
    H_{i,c}(x) = M_{i,c}(x) \, T_{i,c}(x) \ \ \text{(NAL, Eq. 1)}
    $$

    $$
    f_{\mathrm{mixed}}(s_{i,c}) = \frac{1}{1 + e^{-s_{i,c}}}, \quad
    f_{\mathrm{channel}}(s_{i,c}) = \frac{s_{i,c}}{\lVert s_i \rVert}, \quad
    f_{\mathrm{spatial}}(s_{i,c}) = \frac{1}{1 + e^{-(s_{i,c} - \mathrm{mean}_c) / \mathrm{std}_c}}
    $$

    Follows Sec. 3 of the paper (Eqs. 1 and 3-6, Figs. 2-3):

    * ``p`` pre-processing residual units, then a split into
    * the trunk ``T(x)``: ``t`` residual units, and
    * the mask ``M(x)``: bottom-up, ``depth`` levels of (max-pool 3x3 stride 2 pad 1, ``r``
      units); every level but the innermost also feeds a skip-connection unit. Top-down, from
      the innermost level: ``r`` units, bilinear up-sampling to the next skip's own size, add the
      skip; after the outermost level ``r`` units and up-sampling to the trunk's size. Then
      ``BN-ReLU-1x1-BN-ReLU-1x1`` and the activation ``f`` (option ``mask``, Sec. 3.3, Eqs.
      4-6):

      - ``mixed``: ``sigmoid(s_ic)`` per channel and position (Eq. 4),
      - ``channel``: ``s_ic / ||s_i||_2``, L2 normalisation across channels at each position
        (Eq. 5),
      - ``spatial``: ``sigmoid((s_ic - mean_c) / std_c)`` with mean and (biased) standard
        deviation of channel ``c`` over the positions (Eq. 6; ``eps=1e-5`` in the square root).

    * combination (option ``learning``): ``arl`` attention residual learning ``(1 + M) * T``
      (Eq. 3, default) or ``nal`` naive attention learning ``M * T`` (Eq. 1),
    * ``p`` post-processing units.

    The paper leaves two details open; the defaults follow the authors' released Caffe
    prototxt (fwang91/residual-attention-network), which is what the named models
    ``attention56``/``attention92`` follow:

    * ``mask_bias=False``: the mask head's last 1x1 convolution has no bias (``True`` adds one,
      visattn's behaviour before it followed the prototxt);
    * ``align_corners=True``: Caffe's ``Interp`` layer maps corner pixels onto corner pixels,
      which is ``F.interpolate(..., align_corners=True)`` (``False`` gives the half-pixel
      convention, visattn's earlier behaviour).

    Up-sampling always targets the actual size of the skip it is added to, so any input size
    works (odd sizes, and maps that max-pooling reduces to 1x1). The paper's 56/28/14-pixel
    stage modules use ``depth`` 3/2/1 (2/1/0 skip connections).

    Records ``M`` of shape ``(N, C, H, W)``.

    Shapes: ``(N, C, H, W) -> (N, C, H, W)``.

    float16: ``(1 + M) T`` is up to twice the trunk's features; with activations of order 1e4
    (eval mode at activation scale 1e4, BN not rescaling) it passes float16's 65,504 before the
    post-processing unit's convolution, as any conv network's features would. Under float16
    (autocast or a half model) a non-finite output from a finite input raises
    ``FloatingPointError`` naming the block (``block_info("residual_attention").fp16_limit``);
    bfloat16 autocast and float32 are finite. At activation scales 1 and 100 float16 is finite.

    Parameters: ``(2p + t + 2 * r * depth + depth - 1) * U + 2 * C * C + 4 * C`` (plus ``C``
    with ``mask_bias=True``), with ``U`` the parameters of one pre-activation unit ``C -> C``
    (:mod:`visattn.blocks._units`):
    ``U = 2 * C + 2 * C * b + 4 * b + 9 * b * b``, ``b = C // 4``; the mask head has two BNs and
    two 1x1 convolutions. Defaults (p=1, t=2, r=1, depth=1): ``6 * U + 2 * C * C + 4 * C``.

    Args:
        channels: input and output channels ``C`` (at least 4).
        p: pre- and post-processing units (1 in the paper).
        t: trunk units (2 in the paper).
        r: units between adjacent pooling layers of the mask branch (1 in the paper).
        depth: max-pool levels of the mask branch.
        learning: ``arl`` | ``nal``.
        mask: ``mixed`` | ``channel`` | ``spatial``.
        mask_bias: bias on the mask head's last 1x1 convolution (``False``: the prototxt).
        align_corners: bilinear up-sampling convention (``True``: the prototxt's ``Interp``).
    """

    def __init__(
        self,
        channels: int,
        p: int = 1,
        t: int = 2,
        r: int = 1,
        depth: int = 1,
        learning: str = "arl",
        mask: str = "mixed",
        mask_bias: bool = False,
        align_corners: bool = True,
    ) -> None:
        super().__init__()
        if channels < 4:
            raise ValueError(f"channels must be >= 4 (bottleneck units use C // 4), got {channels}")
        if isinstance(p, bool) or not isinstance(p, int) or p < 0:
            raise ValueError(f"option 'p' must be a non-negative int, got {p!r}")
        check_positive_int("t", t)
        check_positive_int("r", r)
        check_positive_int("depth", depth)
        check_choice("learning", learning, LEARNINGS)
        check_choice("mask", mask, MASKS)
        for option, value in (("mask_bias", mask_bias), ("align_corners", align_corners)):
            if not isinstance(value, bool):
                raise ValueError(f"option '{option}' must be a bool, got {value!r}")
        self.learning, self.mask = learning, mask
        self.align_corners = align_corners
        self.pre = _units(channels, p)
        self.trunk = _units(channels, t)
        self.pool = nn.MaxPool2d(3, 2, 1)
        self.down = nn.ModuleList(_units(channels, r) for _ in range(depth))
        self.skips = nn.ModuleList(_unit(channels) for _ in range(depth - 1))
        self.up = nn.ModuleList(_units(channels, r) for _ in range(depth))
        self.mask_head = nn.Sequential(
            nn.BatchNorm2d(channels),
            nn.ReLU(inplace=True),
            nn.Conv2d(channels, channels, 1, bias=False),
            nn.BatchNorm2d(channels),
            nn.ReLU(inplace=True),
            nn.Conv2d(channels, channels, 1, bias=mask_bias),
        )
        self.post = _units(channels, p)

    def mask_logits(self, x: torch.Tensor) -> torch.Tensor:
        """The mask branch before its activation: ``(N, C, H, W) -> (N, C, H, W)``."""
        # ModuleLists are only iterated, never indexed by a variable: TorchScript compiles that
        skips: list[torch.Tensor] = []
        m = x
        for level, down in enumerate(self.down):
            m = down(self.pool(m))
            for j, skip_unit in enumerate(self.skips):
                if j == level:
                    skips.append(skip_unit(m))
        # top-down: up[i] runs at the resolution of level i (innermost last)
        depth = len(self.up)
        for level in range(depth - 1, 0, -1):
            for j, up in enumerate(self.up):
                if j == level:
                    m = up(m)
            skip = skips[level - 1]
            m = _upsample(m, (skip.shape[2], skip.shape[3]), self.align_corners) + skip
        for j, up in enumerate(self.up):
            if j == 0:
                m = up(m)
        m = _upsample(m, (x.shape[2], x.shape[3]), self.align_corners)
        return self.mask_head(m)

    def activate(self, s: torch.Tensor, eps: float = SPATIAL_NORM_EPS) -> torch.Tensor:
        """The mask activation ``f`` of Eqs. 4-6 applied to the mask logits ``s`` (``eps`` in
        the square root of Eq. 6)."""
        if self.mask == "mixed":
            return torch.sigmoid(s)
        if self.mask == "channel":
            return F.normalize(s, p=2.0, dim=1)
        mean = s.mean(dim=(2, 3), keepdim=True)
        var = s.var(dim=(2, 3), keepdim=True, unbiased=False)
        return torch.sigmoid((s - mean) * torch.rsqrt(var + eps))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.pre(x)
        trunk = self.trunk(x)
        m = self.activate(self.mask_logits(x))
        if not torch.jit.is_scripting():
            record_attention(self, m)
        out = (1 + m) * trunk if self.learning == "arl" else m * trunk
        return self.post(out)
