"""Non-local block with bilinear attentional transforms (Chi, Yuan, Yu, Tang; CVPR 2020, "Non-Local
Neural Networks With Grouped Bilinear Attentional Transforms")."""

from __future__ import annotations

import torch
import torch.nn as nn
import torch.nn.functional as F

from ._utils import check_positive_int, get_layer, reduced_channels
from .capture import is_capturing, record_attention
from .registry import register_block


def _conv_bn_act(c_in: int, c_out: int, act: type[nn.Module]) -> nn.Sequential:
    """1x1 conv without bias (the BN after it makes one redundant), BN, activation."""
    return nn.Sequential(nn.Conv2d(c_in, c_out, 1, bias=False), nn.BatchNorm2d(c_out), act())


def _pad_to_multiple(x: torch.Tensor, s: int) -> torch.Tensor:
    """``x`` ``(N, C, H, W)`` zero-padded at the bottom/right to multiples of ``s`` (unchanged if
    already). ``torch.fx`` calls it as one node (``torch.fx.wrap`` below): the test on the size
    is only known when the graph runs."""
    h, w = x.shape[2], x.shape[3]
    ph, pw = -(-h // s) * s - h, -(-w // s) * s - w
    if ph or pw:
        x = F.pad(x, (0, pw, 0, ph))
    return x


torch.fx.wrap("_pad_to_multiple")


@torch.fx.wrap
def _adaptive_max(a: torch.Tensor, s: int, dim: int) -> torch.Tensor:
    """``F.adaptive_max_pool2d`` to ``s`` bins along ``dim`` (2: rows, 3: columns) and 1 along the
    other, written as ``s`` window maxima with the same windows (``floor(i L / s)`` to
    ``ceil((i + 1) L / s)``): the ONNX exporter has no non-global adaptive max pooling."""
    length = a.shape[dim]
    parts: list[torch.Tensor] = []
    for i in range(s):
        lo, hi = (i * length) // s, ((i + 1) * length + s - 1) // s
        part = a[:, :, lo:hi, :] if dim == 2 else a[:, :, :, lo:hi]
        parts.append(part.amax(dim=(2, 3), keepdim=True))
    return torch.cat(parts, dim=dim)


class BilinearAttnTransform(nn.Module):
    """The grouped bilinear attentional transform ``Y = P X Q`` (the paper's grouped BA transform),
    ``(N, C', H, W) -> (N, C', H, W)``; not registered, :class:`BatNonLocal` uses it.

    From a 1x1 conv ``C' -> G`` (+ BN, activation) ``A``:

    * ``P = sigmoid(conv_p(MaxPool_{s x 1}(A)))``, ``Q = sigmoid(conv_q(MaxPool_{1 x s}(A)))``:
      each group ``g`` gets an ``s x s`` row transform and an ``s x s`` column transform (convs
      ``G -> s^2 G`` with kernels ``(s, 1)`` and ``(1, s)``, with bias);
    * ``P`` is normalised so each row sums to 1, ``Q`` so each column sums to 1 (computed as a
      softmax of ``log sigmoid``, the same value, which stays finite where every sigmoid of a
      row underflows to 0: the authors' ``P / P.sum()`` gives 0/0 there, as an untrained
      ResNet-56 in eval mode met);
    * block-level transform: ``H`` is split into ``s`` blocks of ``t = H / s`` rows, and output
      row ``i t + a`` is ``sum_j P_ij x_{j t + a}`` (``P kron I_t``); columns likewise with
      ``Q kron I_u``; the channels of group ``g`` share its ``P`` and ``Q``;
    * then a 1x1 conv ``C' -> C'`` (+ BN, activation).

    Sizes that are not multiples of ``s`` (the paper's and timm's code require them) are
    zero-padded at the bottom/right for the transform and cropped after it.
    """

    def __init__(self, channels: int, block_size: int, groups: int, act: type[nn.Module]) -> None:
        super().__init__()
        s = block_size
        self.block_size, self.groups = s, groups
        self.conv1 = _conv_bn_act(channels, groups, act)
        self.conv_p = nn.Conv2d(groups, s * s * groups, (s, 1))
        self.conv_q = nn.Conv2d(groups, s * s * groups, (1, s))
        self.conv2 = _conv_bn_act(channels, channels, act)

    def transforms(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """``P`` (rows sum to 1) and ``Q`` (columns sum to 1), each ``(N, G, s, s)``."""
        n, s, g = x.shape[0], self.block_size, self.groups
        a = self.conv1(x)
        p = F.logsigmoid(self.conv_p(_adaptive_max(a, s, 2)).view(n, g, s, s))
        q = F.logsigmoid(self.conv_q(_adaptive_max(a, s, 3)).view(n, g, s, s))
        return p.softmax(dim=3), q.softmax(dim=2)

    def apply_transforms(self, x: torch.Tensor, p: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
        """``(P kron I_t) X (Q kron I_u)`` per group, without building the ``H x H`` matrices."""
        n, c, h, w = x.shape[0], x.shape[1], x.shape[2], x.shape[3]
        s, g = self.block_size, self.groups
        x = _pad_to_multiple(x, s)
        hp, wp = x.shape[2], x.shape[3]
        y = torch.einsum("ngij,ngcjtw->ngcitw", p, x.reshape(n, g, c // g, s, hp // s, wp))
        y = torch.einsum("ngchju,ngjk->ngchku", y.reshape(n, g, c // g, hp, s, wp // s), q)
        return y.reshape(n, c, hp, wp)[:, :, :h, :w]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        p, q = self.transforms(x)
        return self.conv2(self.apply_transforms(x, p, q))


@register_block(
    "bat",
    family="spatial",
    paper="Chi et al., CVPR 2020",
    # the authors' nlnet: between residual blocks, every second one of the middle stages
    composed_at={"position": "output", "stages": [2, 3], "blocks": "odd"},
)
class BatNonLocal(nn.Module):
    """BAT block: a non-local block whose attention is a grouped bilinear transform ``P X Q``.

    ``z = x + drop(phi_2(BAT(phi_1(x))))`` (the paper's non-local block with its BA
    transform): ``phi_1`` a 1x1 conv ``C -> C' = C / r`` with BN and ReLU (``r = 2``), ``BAT``
    the grouped bilinear attentional transform (:class:`BilinearAttnTransform`, ``s x s``
    block-level transforms per group of ``C' / G`` channels, ``s = 7``, ``G = 4``), ``phi_2``
    a 1x1 conv ``C' -> C`` with BN and ReLU. Instead of an ``HW x HW`` affinity, each position
    mixes with the same offset in the other ``s`` row blocks and ``s`` column blocks, so the cost
    is ``O(s C' HW)`` rather than ``O(C' (HW)^2)``.

    The defaults are the authors' (``BA-Transform/BAT-Image-Classification``, ``BATBlock``:
    ``r = 2``, ``k = 4`` groups; ``s = 7`` as their ResNets pass it). timm's
    ``BatNonLocalAttn`` halves the inner width and the groups: ``reduction=4, groups=2`` is
    timm's module (its width is ``make_divisible(C / 4, 8)``, equal to ``C // 4`` for every
    ResNet width). The official code and timm put ``Dropout2d(0.2)`` on the branch
    (``drop_rate=0.2``; 0 here by default, 0.2 in ``bat_resnet50``) and require ``H`` and ``W``
    to be multiples of ``s``; here other sizes are padded (see :class:`BilinearAttnTransform`).
    timm computes ``P X Q`` with explicit ``H x H`` and ``W x W`` Kronecker matrices; here they
    are never built.

    Shapes: ``(N, C, H, W) -> (N, C, H, W)``. The attention map recorded is the weight each
    input position *receives*, ``(N, 1, H, W)``: the column sums of ``P kron I`` times the row
    sums of ``Q kron I``, averaged over groups and normalised to sum to 1 per image (only
    computed while ``capture_attention`` is active).

    Parameters (default options, ``C' = C // 2``, ``G = 4``, ``s = 7``):
    ``2 C C' + C'^2 + C' G + 4 C' + 2 G + 2 s^3 G^2 + 2 s^2 G + 2 C``
    (``phi_1`` ``C C' + 2 C'``; BAT: ``C' G + 2 G``, ``conv_p``/``conv_q``
    ``2 (s^3 G^2 + s^2 G)``, ``C'^2 + 2 C'``; ``phi_2`` ``C' C + 2 C``).

    Args:
        channels: input channels ``C``.
        reduction: ``C' = C // reduction`` (2, the authors'; timm's rd_ratio 0.25 is 4).
        block_size: ``s``, the size of the block-level transforms (7, official code and timm).
        groups: ``G``, the number of transform groups (must divide ``C'``; 4, the authors';
            timm's 2).
        drop_rate: ``Dropout2d`` on the branch (0.2 in the official code and timm).
        act_layer: activation after each BN (name or class), ReLU.
    """

    #: why an ONNX graph with symbolic height and width cannot hold this block: the export
    #: refuses ``dynamic_size`` up front (:func:`visattn.export.export_onnx`)
    fixed_size_export = (
        "pads its maps to a multiple of its transform size by amounts the exporter writes as "
        "constants of the traced size"
    )

    def __init__(
        self,
        channels: int,
        reduction: float = 2,
        block_size: int = 7,
        groups: int = 4,
        drop_rate: float = 0.0,
        act_layer: str | type[nn.Module] = "relu",
    ) -> None:
        super().__init__()
        check_positive_int("block_size", block_size)
        check_positive_int("groups", groups)
        if (
            isinstance(drop_rate, bool)
            or not isinstance(drop_rate, (int, float))
            or not (0 <= drop_rate < 1)
        ):
            raise ValueError(f"option 'drop_rate' must be in [0, 1), got {drop_rate!r}")
        inner = reduced_channels(channels, reduction)
        if inner % groups:
            raise ValueError(
                f"option 'groups'={groups} must divide the inner channels C // reduction = {inner}"
            )
        act = get_layer(act_layer, "act_layer")
        self.inner_channels = inner
        self.conv1 = _conv_bn_act(channels, inner, act)
        self.ba = BilinearAttnTransform(inner, block_size, groups, act)
        self.conv2 = _conv_bn_act(inner, channels, act)
        self.dropout = nn.Dropout2d(drop_rate)
        self.branch_scale: nn.Parameter | None = None  # set by init_identity

    def init_identity(self) -> None:
        """native: learnable scale gamma = 0 on the branch, z = x + gamma * branch.

        The branch ends in BN + ReLU, so zeroing its BN would leave it without gradient.
        """
        self.branch_scale = nn.Parameter(torch.zeros(1))

    def _received(self, p: torch.Tensor, q: torch.Tensor, h: int, w: int) -> torch.Tensor:
        s = self.ba.block_size
        t, u = -(-h // s), -(-w // s)
        rows = p.sum(dim=2).repeat_interleave(t, dim=2)[..., :h]  # (N, G, H)
        cols = q.sum(dim=3).repeat_interleave(u, dim=2)[..., :w]  # (N, G, W)
        r = (rows.unsqueeze(3) * cols.unsqueeze(2)).mean(dim=1, keepdim=True)
        return r / r.sum(dim=(2, 3), keepdim=True)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        xl = self.conv1(x)
        p, q = self.ba.transforms(xl)
        y = self.dropout(self.conv2(self.ba.conv2(self.ba.apply_transforms(xl, p, q))))
        if not torch.jit.is_scripting():  # noqa: SIM102 (scripting skips the inner test)
            if is_capturing(self):  # the summary costs extra passes: only when asked
                record_attention(self, self._received(p, q, x.shape[2], x.shape[3]))
        if self.branch_scale is not None:
            y = y * self.branch_scale
        return x + y

    def extra_repr(self) -> str:
        return f"inner_channels={self.inner_channels}"
