"""Global Second-order Pooling block (Gao, Xie, Wang, Li; CVPR 2019, "Global Second-order Pooling
Convolutional Networks"), channel-attention variant (GSoP-Net1's block)."""

from __future__ import annotations

import torch
import torch.nn as nn
import torch.nn.functional as F
from timm.layers import register_notrace_function
from torch.autograd.function import once_differentiable

from ._attention import float32_region
from ._utils import check_positive_int, get_layer, is_channels_last
from .capture import record_attention
from .identity import unit_gate
from .registry import register_block


class _CentredCovariance(torch.autograd.Function):
    """``Sigma = 1/M Zc Zc^T``, ``Zc = Z - mean``, ``Z`` ``(N, C', M)``, with a symmetric backward.

    Backward (the official ``MPNCOV.CovpoolLayer``'s ``dZ = (G + G^T) Z I_hat``, with
    ``Z I_hat = Zc / M`` and no ``M x M`` matrix): ``dZ = 1/M (G + G^T) Zc``. Its rows already have
    zero mean (they are combinations of the zero-mean rows of ``Zc``), so the centring needs no
    gradient term of its own. One ``(C' x C') x (C' x M)`` product instead of autograd's two plus
    the element-wise work of the mean subtraction. Only ``Zc`` is saved (``N C' M`` values).
    """

    @staticmethod
    def forward(ctx, z: torch.Tensor) -> torch.Tensor:
        zc = z - z.mean(dim=2, keepdim=True)
        ctx.save_for_backward(zc)
        return torch.bmm(zc, zc.transpose(1, 2)).div_(z.shape[2])

    @staticmethod
    @once_differentiable
    def backward(ctx, grad: torch.Tensor) -> torch.Tensor:
        (zc,) = ctx.saved_tensors
        sym = (grad + grad.transpose(1, 2)).div_(zc.shape[2])  # (N, C', C'), symmetric
        if zc.stride(2) == 1:  # (N, C', M) in memory
            return torch.bmm(sym, zc)
        # channels-last: (Zc^T S)^T = S Zc (S symmetric), computed transposed so that the
        # gradient has the layout of Zc (an (N, M, C') buffer) and needs no copy later
        return torch.bmm(zc.transpose(1, 2), sym).transpose(1, 2)


class _PointwiseConv(torch.autograd.Function):
    """A 1x1 convolution without bias, ``Z = W X`` per image (``X`` ``(N, C, H, W)``, ``W``
    ``(C', C, 1, 1)``), as batched matrix products in both directions.

    Backward: ``dX = W^T dZ`` and ``dW = sum_n dZ_n X_n^T``, two products. The same function as
    ``F.conv2d``; on CPU about 1.5x faster forward+backward than its oneDNN kernels, whose
    backward costs about twice the two products. A channels-last ``X`` is one ``(NHW, C)`` matrix
    (no copy) and gives a channels-last ``Z`` and ``dX``; otherwise the layouts are contiguous.
    """

    @staticmethod
    def forward(ctx, x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
        ctx.save_for_backward(x, weight)
        n, c, h, w = x.shape
        k = weight.shape[0]
        w2 = weight.reshape(k, c)
        if is_channels_last(x):
            z = torch.mm(x.permute(0, 2, 3, 1).reshape(n * h * w, c), w2.t())
            return z.view(n, h, w, k).permute(0, 3, 1, 2)
        z = torch.bmm(w2.expand(n, *w2.shape), x.reshape(n, c, h * w))
        return z.view(n, k, h, w)

    @staticmethod
    @once_differentiable
    def backward(ctx, grad: torch.Tensor) -> tuple[torch.Tensor | None, torch.Tensor | None]:
        x, weight = ctx.saved_tensors
        n, c, h, w = x.shape
        k = weight.shape[0]
        w2 = weight.reshape(k, c)
        gx = gw = None
        if is_channels_last(x):
            g2 = grad.permute(0, 2, 3, 1).reshape(n * h * w, k)  # a view if grad is channels-last
            if ctx.needs_input_grad[0]:
                gx = torch.mm(g2, w2).view(n, h, w, c).permute(0, 3, 1, 2)
            if ctx.needs_input_grad[1]:
                gw = torch.mm(g2.t(), x.permute(0, 2, 3, 1).reshape(n * h * w, c))
        else:
            g3 = grad.reshape(n, k, h * w)
            if ctx.needs_input_grad[0]:
                gx = torch.bmm(w2.t().expand(n, c, w2.shape[0]), g3).view(n, c, h, w)
            if ctx.needs_input_grad[1]:
                gw = torch.bmm(g3, x.reshape(n, c, h * w).transpose(1, 2)).sum(0)
        return gx, None if gw is None else gw.view_as(weight)


@register_notrace_function  # timm's FX feature path: a leaf call, traced as one node
def _pointwise_conv(x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    """``F.conv2d(x, weight)`` for a ``(C', C, 1, 1)`` weight; on CPU outside autocast through
    :class:`_PointwiseConv` (batched products, a faster backward). Elsewhere (CUDA, autocast,
    TorchScript) ``F.conv2d`` itself, so that autocast's casting policy applies unchanged."""
    if torch.jit.is_scripting():
        return F.conv2d(x, weight)
    if x.device.type != "cpu" or torch.is_autocast_enabled("cpu") or x.dtype != weight.dtype:
        return F.conv2d(x, weight)
    return _PointwiseConv.apply(x, weight)


@register_notrace_function  # timm's FX feature path: a leaf call, traced as one node
def _covariance_fp32(z: torch.Tensor) -> torch.Tensor:
    """Per-image covariance of the ``C'`` channels of ``z`` ``(N, C', H, W)``, in float32 or wider.

    ``Sigma = 1/M * (Z - mean) (Z - mean)^T`` with ``M = HW`` (the biased estimate the official
    code computes as ``Z I_hat Z^T``). Centring subtracts the per-channel mean, so no ``M x M``
    matrix is ever built: memory is ``O(N C' M + N C'^2)``. Autocast is switched off and the input
    cast up, so the covariance is float32 whatever the surrounding autocast dtype (float64 input
    stays float64). A channels-last ``z`` is read in place (no copy to ``(N, C', M)``).

    The backward is :class:`_CentredCovariance`'s. Under TorchScript (which applies no autocast
    by default and cannot call an autograd Function) it skips the context and the values come
    from the same operations with autograd's own backward.

    ``torch.fx`` calls it as one node (``torch.fx.wrap`` below): its autocast region takes the
    device type from the input, which a symbolic trace cannot know, and the traced graph keeps the
    float32 computation because the function itself runs at call time.
    """
    if torch.jit.is_scripting():  # TorchScript's autocast needs a constant device type
        return _covariance(z)
    with torch.autocast(device_type=z.device.type, enabled=False):
        return _CentredCovariance.apply(_positions_last(z))


def _positions_last(z: torch.Tensor) -> torch.Tensor:
    """``(N, C', H, W) -> (N, C', HW)`` in float32 or wider; a view of a channels-last ``z``."""
    z = z.to(torch.promote_types(z.dtype, torch.float32))
    n, c, h, w = z.shape
    if not is_channels_last(z):
        return z.reshape(n, c, h * w)
    return z.permute(0, 2, 3, 1).reshape(n, h * w, c).transpose(1, 2)  # (N, HW, C') in memory


def _covariance(z: torch.Tensor) -> torch.Tensor:
    """The covariance with autograd's own backward (the TorchScript path)."""
    z = _positions_last(z)
    z = z - z.mean(dim=2, keepdim=True)
    return torch.bmm(z, z.transpose(1, 2)).div_(z.shape[2])


@register_notrace_function  # timm's FX feature path: a leaf call, traced as one node
def _excitation_fp32(
    cov: torch.Tensor,
    row_weight: torch.Tensor,
    row_bias: torch.Tensor | None,
    fc_weight: torch.Tensor,
    fc_bias: torch.Tensor | None,
) -> torch.Tensor:
    """The row-wise convolution and the excitation conv on the normalised covariance, autocast
    off: ``(N, C', C') -> (N, C, 1, 1)`` gate logits in the covariance's dtype (float32 under
    autocast). The covariance of activations of size ``a`` is of size ``a^2`` and BN's eval mode
    does not rescale it, so at activations of 1e4 these products pass float16's 65,504 although
    the gate they feed lies in ``(0, 1)``; they are ``O(N C'^3)``, small beside the covariance.

    The row-wise convolution (``self.row_conv``, groups ``C'``, kernel ``(C', 1)``) is one einsum
    ``r[n, i, k] = sum_j W[i, k, j] Sigma_n[i, j] + b[i, k]``: the same function without the
    grouped convolution's per-group overhead (about 3x faster on CPU). Neither module is called,
    so forward hooks registered on ``row_conv`` or ``fc`` do not run.
    """
    if torch.jit.is_scripting():  # TorchScript's autocast needs a constant device type
        return _excitation(cov, row_weight, row_bias, fc_weight, fc_bias)
    with float32_region(cov):
        return _excitation(cov, row_weight, row_bias, fc_weight, fc_bias)


def _excitation(
    cov: torch.Tensor,
    row_weight: torch.Tensor,
    row_bias: torch.Tensor | None,
    fc_weight: torch.Tensor,
    fc_bias: torch.Tensor | None,
) -> torch.Tensor:
    return F.conv2d(_row_conv(cov, row_weight, row_bias), fc_weight, fc_bias)


def _row_conv(cov: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
    """The row-wise convolution ``(N, C', C') -> (N, 4C', 1, 1)`` as one einsum."""
    n, rd = cov.shape[0], cov.shape[1]
    r = torch.einsum("nij,ikj->nik", cov, weight.view(rd, 4, rd)).reshape(n, 4 * rd, 1, 1)
    return r if bias is None else r + bias.view(1, 4 * rd, 1, 1)


torch.fx.wrap("_covariance_fp32")  # plain torch.fx.symbolic_trace and torchvision's tracer
torch.fx.wrap("_excitation_fp32")
torch.fx.wrap("_pointwise_conv")


@register_block("gsop", family="channel", paper="Gao et al., CVPR 2019")
class GlobalSecondOrderPooling(nn.Module):
    r"""GSoP block: channel attention from the covariance matrix of a reduced feature.

    $$
    Z = \mathrm{Conv}_{1 \times 1}(X), \qquad
    \Sigma = \frac{1}{HW} (Z - \mu)(Z - \mu)^{\top}, \qquad
    s = \sigma\big(W \, \mathrm{RC}(\Sigma)\big), \qquad
    Y = s \odot X
    $$

    Follows Sec. 3.1 / Fig. 2 of the paper, ``s = sigmoid(W RC(Cov(Conv(X))))``, ``Y = s * X``:

    * squeeze: a 1x1 convolution ``C -> C'`` (``C' = min(rd_channels, C)``, 128 in the paper),
      followed by BN and ReLU (as in the official code; the paper does not spell them out);
      ``self.reduce``'s weight applied, on CPU outside autocast, as batched matrix products with
      a two-product backward (:class:`_PointwiseConv`; about 1.5x faster forward+backward than
      the oneDNN convolution), elsewhere by ``F.conv2d``;
    * covariance ``Sigma = 1/(HW) (Z - mu)(Z - mu)^T`` ``(N, C', C')``, computed in float32 even
      under autocast and without the official code's ``(HW) x (HW)`` centring matrix;
    * row-wise normalisation: a ``BatchNorm2d(C')`` over the covariance seen as ``(N, C', C', 1)``,
      i.e. each row ``i`` normalised over the batch and its ``C'`` entries (official ``row_bn``);
    * row-wise convolution: a grouped convolution, ``groups = C'``, kernel ``(C', 1)`` covering one
      row of ``Sigma``, producing ``4 C'`` outputs (4 per row) -> ``(N, 4C', 1, 1)``
      (``self.row_conv``'s weights, applied as one batched product ``r[n, i, k] =
      sum_j W[i, k, j] Sigma_n[i, j] + b[i, k]``: the same function, without the grouped
      convolution's per-group overhead, about 3x faster on CPU);
    * excitation: a 1x1 convolution ``4C' -> C`` and a sigmoid; scale ``Y = s * X``. The row-wise
      and the excitation convolutions run with autocast off (the covariance's size is the square
      of the activations', past float16's range at activations of 1e4).

    Differences from the official code (``ZilinGao/Global-Second-order-Pooling-Convolutional-
    Networks``), deliberate: it applies a ReLU to the block input (its block sits on the non-ReLU'd
    ``bn3`` output) and a stride-2 reduction conv in ResNet stage 1; both are placement details left
    to the caller here. Its reduction conv has a bias that the following BN makes redundant; here it
    has none.

    ``reduce``, ``row_conv`` and ``fc`` hold the weights but are not called as modules: forward
    hooks registered on them do not run.

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

    def init_identity(self) -> None:
        """native: excitation conv (4C' -> C) zero, gate 2*sigmoid (ScaledSigmoid), so s = 1."""
        self.gate = unit_gate(self.fc)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        z = self.act(self.bn(_pointwise_conv(x, self.reduce.weight)))
        cov = _covariance_fp32(z)  # (N, C', C'), float32 under autocast
        cov = cov.to(self.row_norm.weight.dtype).unsqueeze(-1)  # a bfloat16 model gets bfloat16
        logits = _excitation_fp32(  # (N, C, 1, 1)
            self.row_norm(cov).squeeze(-1),
            self.row_conv.weight,
            self.row_conv.bias,
            self.fc.weight,
            self.fc.bias,
        )
        s = self.gate(logits).to(x.dtype)
        if not torch.jit.is_scripting():
            record_attention(self, s)
        return x * s

    def extra_repr(self) -> str:
        return f"rd_channels={self.rd_channels}"
