"""Global Second-order Pooling block (Gao, Xie, Wang, Li; CVPR 2019, "Global Second-order Pooling
Convolutional Networks"), channel-attention variant (GSoP-Net1's block)."""

from __future__ import annotations

import torch
import torch.nn as nn
from timm.layers import register_notrace_function

from ._utils import check_positive_int, get_layer
from .capture import record_attention
from .registry import register_block


@register_notrace_function  # timm's FX feature path: a leaf call, traced as one node
def _covariance_fp32(z: torch.Tensor) -> torch.Tensor:
    """Per-image covariance of the ``C'`` channels of ``z`` ``(N, C', H, W)``, in float32 or wider.

    ``Sigma = 1/M * (Z - mean) (Z - mean)^T`` with ``M = HW`` (the biased estimate the official
    code computes as ``Z I_hat Z^T``). Centring subtracts the per-channel mean, so no ``M x M``
    matrix is ever built: memory is ``O(N C' M + N C'^2)``. Autocast is switched off and the input
    cast up, so the covariance is float32 whatever the surrounding autocast dtype (float64 input
    stays float64). Under TorchScript (which applies no autocast by default) it skips the
    context.

    ``torch.fx`` calls it as one node (``torch.fx.wrap`` below): its autocast region takes the
    device type from the input, which a symbolic trace cannot know, and the traced graph keeps the
    float32 computation because the function itself runs at call time.
    """
    if torch.jit.is_scripting():  # TorchScript's autocast needs a constant device type
        return _covariance(z)
    with torch.autocast(device_type=z.device.type, enabled=False):
        return _covariance(z)


def _covariance(z: torch.Tensor) -> torch.Tensor:
    z = z.flatten(2).to(torch.promote_types(z.dtype, torch.float32))
    z = z - z.mean(dim=2, keepdim=True)
    return torch.bmm(z, z.transpose(1, 2)).div_(z.shape[2])


torch.fx.wrap("_covariance_fp32")  # plain torch.fx.symbolic_trace and torchvision's tracer


@register_block("gsop", family="channel", paper="Gao et al., CVPR 2019")
class GlobalSecondOrderPooling(nn.Module):
    """GSoP block: channel attention from the covariance matrix of a reduced feature.

    Follows Sec. 3.1 / Fig. 2 of the paper, ``s = sigmoid(W RC(Cov(Conv(X))))``, ``Y = s * X``:

    * squeeze: a 1x1 convolution ``C -> C'`` (``C' = min(rd_channels, C)``, 128 in the paper),
      followed by BN and ReLU (as in the official code; the paper does not spell them out);
    * covariance ``Sigma = 1/(HW) (Z - mu)(Z - mu)^T`` ``(N, C', C')``, computed in float32 even
      under autocast and without the official code's ``(HW) x (HW)`` centring matrix;
    * row-wise normalisation: a ``BatchNorm2d(C')`` over the covariance seen as ``(N, C', C', 1)``,
      i.e. each row ``i`` normalised over the batch and its ``C'`` entries (official ``row_bn``);
    * row-wise convolution: a grouped convolution, ``groups = C'``, kernel ``(C', 1)`` covering one
      row of ``Sigma``, producing ``4 C'`` outputs (4 per row) -> ``(N, 4C', 1, 1)``;
    * excitation: a 1x1 convolution ``4C' -> C`` and a sigmoid; scale ``Y = s * X``.

    Differences from the official code (``ZilinGao/Global-Second-order-Pooling-Convolutional-
    Networks``), deliberate: it applies a ReLU to the block input (its block sits on the non-ReLU'd
    ``bn3`` output) and a stride-2 reduction conv in ResNet stage 1; both are placement details left
    to the caller here. Its reduction conv has a bias that the following BN makes redundant; here it
    has none.

    Shapes: ``(N, C, H, W) -> (N, C, H, W)``; attention map ``(N, C, 1, 1)``.

    Parameters (default options, ``C' = min(128, C)``): ``5 C C' + 4 C'^2 + 8 C' + C``
    (reduction ``C C'`` + BN ``2C'``, row BN ``2C'``, row conv ``4C'^2 + 4C'``, FC ``4C'C + C``).

    Args:
        channels: input channels ``C``.
        rd_channels: ``C'``, the channels whose covariance is taken (capped at ``C``).
        act_layer: activation after the reduction (name or class), ReLU in the official code.
        gate_layer: gate (name or class), sigmoid in the paper.
    """

    def __init__(
        self,
        channels: int,
        rd_channels: int = 128,
        act_layer: str | type[nn.Module] = "relu",
        gate_layer: str | type[nn.Module] = "sigmoid",
    ) -> None:
        super().__init__()
        check_positive_int("rd_channels", rd_channels)
        rd = min(rd_channels, channels)
        self.rd_channels = rd
        self.reduce = nn.Conv2d(channels, rd, 1, bias=False)
        self.bn = nn.BatchNorm2d(rd)
        self.act = get_layer(act_layer, "act_layer")()
        self.row_norm = nn.BatchNorm2d(rd)
        self.row_conv = nn.Conv2d(rd, 4 * rd, kernel_size=(rd, 1), groups=rd)
        self.fc = nn.Conv2d(4 * rd, channels, 1)
        self.gate = get_layer(gate_layer, "gate_layer")()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        z = self.act(self.bn(self.reduce(x)))
        cov = _covariance_fp32(z)  # (N, C', C'), float32 under autocast
        cov = cov.to(self.row_norm.weight.dtype).unsqueeze(-1)  # a bfloat16 model gets bfloat16
        r = self.row_conv(self.row_norm(cov))  # (N, 4C', 1, 1)
        s = self.gate(self.fc(r)).to(x.dtype)
        if not torch.jit.is_scripting():
            record_attention(self, s)
        return x * s

    def extra_repr(self) -> str:
        return f"rd_channels={self.rd_channels}"
