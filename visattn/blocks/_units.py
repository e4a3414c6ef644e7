"""Residual units shared by blocks and models: the pre-activation bottleneck of He et al. and
the parameter-free zero-padding shortcut. They sit here, below both, so that blocks (the
Residual Attention module) never import :mod:`visattn.models`, and the models' ResNets reuse
the same class.
"""

from __future__ import annotations

import torch
import torch.nn as nn
import torch.nn.functional as F
from timm.layers import DropPath

from ..constants import BLOCK_POSITIONS

__all__ = [
    "PreActBottleneck",
    "ResidualSlots",
    "ZeroPadShortcut",
    "add_slots",
    "conv1x1",
    "conv3x3",
    "make_shortcut",
]


def add_slots(block: nn.Module) -> None:
    """Give ``block`` an empty attention slot ``attn_<position>`` (an ``nn.Identity``, no
    state_dict keys) for each of :data:`visattn.constants.BLOCK_POSITIONS`."""
    for position in BLOCK_POSITIONS:
        setattr(block, f"attn_{position}", nn.Identity())


class ResidualSlots(nn.Module):
    """A residual unit with attention slots, reached in the one order written here.

    ``forward`` is the same for every residual unit visattn has (its own ResNets' blocks, the
    adopted torchvision and timm blocks, the pre-activation unit)::

        branch, shortcut = split(x)
        out = branch_start(attn_pre(branch))
        out = branch_end(attn_prenorm(branch_middle(attn_inner(out))))   # inner_first
        out = branch_end(attn_inner(branch_middle(attn_prenorm(out))))   # otherwise
        out = drop_path(attn_standard(out)) + attn_identity(shortcut)
        return attn_output(finish(attn_post(out)))

    A unit gives the layers between the slots: :meth:`split` (the branch's input and the
    shortcut), :meth:`branch_start`, :meth:`branch_middle`, :meth:`branch_end` (the residual
    branch's three segments) and :meth:`finish` (the activation after the sum, none by default),
    and says with ``inner_first`` whether its middle activation (``attn_inner``) comes before
    its last 3x3 output (``attn_prenorm``), as in a basic block, or after it, as in a
    bottleneck. ``drop_path`` is a module (an
    ``nn.Identity`` when off). Call :meth:`init_slots` once the layers exist.
    """

    inner_first = False

    def init_slots(self) -> None:
        add_slots(self)
        # an instance attribute: TorchScript compiles the branch it selects
        self.inner_first = bool(type(self).inner_first)

    def split(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """The residual branch's input and the shortcut's output."""
        raise NotImplementedError

    def branch_start(self, x: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError

    def branch_middle(self, x: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError

    def branch_end(self, x: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError

    def finish(self, x: torch.Tensor) -> torch.Tensor:
        return x

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        branch, shortcut = self.split(x)
        out = self.branch_start(self.attn_pre(branch))
        if self.inner_first:
            out = self.branch_end(self.attn_prenorm(self.branch_middle(self.attn_inner(out))))
        else:
            out = self.branch_end(self.attn_inner(self.branch_middle(self.attn_prenorm(out))))
        out = self.drop_path(self.attn_standard(out))
        out = out + self.attn_identity(shortcut)
        return self.attn_output(self.finish(self.attn_post(out)))


def conv3x3(cin: int, cout: int, stride: int = 1, dilation: int = 1) -> nn.Conv2d:
    """A bias-free 3x3 convolution padded to keep the size (at stride 1) at any dilation."""
    return nn.Conv2d(cin, cout, 3, stride, dilation, dilation=dilation, bias=False)


def conv1x1(cin: int, cout: int, stride: int = 1) -> nn.Conv2d:
    return nn.Conv2d(cin, cout, 1, stride, bias=False)


class ZeroPadShortcut(nn.Module):
    """Shortcut option A of He et al. (CVPR 2016): identity on the first ``in_channels``
    channels, zeros for the extra ones, spatial subsampling by ``stride``. No parameters.

    Shapes: ``(N, Cin, H, W) -> (N, Cout, ceil(H / stride), ceil(W / stride))``.
    """

    def __init__(self, in_channels: int, out_channels: int, stride: int = 1) -> None:
        super().__init__()
        if out_channels < in_channels:
            raise ValueError(
                f"shortcut A pads channels and cannot reduce {in_channels} to {out_channels}; "
                "use shortcut='B'"
            )
        self.extra = out_channels - in_channels
        self.stride = stride

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.stride > 1:
            x = x[:, :, :: self.stride, :: self.stride]
        return F.pad(x, (0, 0, 0, 0, 0, self.extra)) if self.extra else x

    def extra_repr(self) -> str:
        return f"extra_channels={self.extra}, stride={self.stride}"


def make_shortcut(
    cin: int, cout: int, stride: int, kind: str, *, norm: bool = True
) -> nn.Module | None:
    """``None`` (identity) when the shape is kept, else option ``"A"`` (zero padding) or ``"B"``
    (1x1 projection, followed by BatchNorm when ``norm``)."""
    if stride == 1 and cin == cout:
        return None
    if kind == "A":
        return ZeroPadShortcut(cin, cout, stride)
    if kind == "B":
        conv = conv1x1(cin, cout, stride)
        return nn.Sequential(conv, nn.BatchNorm2d(cout)) if norm else conv
    raise ValueError(f"shortcut must be 'A' (zero padding) or 'B' (1x1 projection), got {kind!r}")


class PreActBottleneck(ResidualSlots):
    """Pre-activation bottleneck (He, Zhang, Ren, Sun, "Identity Mappings in Deep Residual
    Networks", ECCV 2016, Fig. 1b / 4e): ``BN-ReLU-1x1 - BN-ReLU-3x3(stride) - BN-ReLU-1x1``
    plus the shortcut, which is the identity or, when the shape changes, a 1x1 projection
    (option B, no BN) or zero padding (option A) of the *pre-activated* input (as in the
    authors' code, the first BN-ReLU is shared). The unit of ``preresnet164_cifar`` and of the
    Residual Attention Network (Wang et al., CVPR 2017). Convolutions have no bias.

    Attention slots (``nn.Identity`` until a placement fills them, no state_dict keys):
    ``attn_pre`` sees ``relu(bn1(x))`` (the input of the first convolution); ``attn_prenorm``
    and then ``attn_inner`` the output of the 3x3 convolution (before ``bn3``, the next stage's
    pre-activation: the norm after the last 3x3 is the point both name here);
    ``attn_standard`` the output of ``conv3``; there is no final activation, so ``attn_post``
    and ``attn_output`` (after it) both see the unit's output.

    Args:
        in_channels: ``Cin``.
        planes: inner width ``b`` of the bottleneck.
        stride: stride of the 3x3 convolution (and of the shortcut).
        out_channels: ``Cout``, ``4 * planes`` by default.
        shortcut: ``"B"`` 1x1 projection or ``"A"`` zero padding where the shape changes.
        drop_path: stochastic depth rate on the residual branch.

    Shapes: ``(N, Cin, H, W) -> (N, Cout, ceil(H / stride), ceil(W / stride))``.

    Parameters: ``2 * Cin + Cin * b + 4 * b + 9 * b * b + b * Cout``, plus ``Cin * Cout`` with a
    projection.
    """

    expansion = 4

    def __init__(
        self,
        in_channels: int,
        planes: int,
        stride: int = 1,
        *,
        out_channels: int | None = None,
        shortcut: str = "B",
        drop_path: float = 0.0,
    ) -> None:
        super().__init__()
        for option, value in (("in_channels", in_channels), ("planes", planes), ("stride", stride)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(
                    f"PreActBottleneck: {option} must be a positive int, got {value!r}"
                )
        out = planes * self.expansion if out_channels is None else out_channels
        self.in_channels, self.mid_channels, self.out_channels = in_channels, planes, out
        self.stride = stride
        self.bn1 = nn.BatchNorm2d(in_channels)
        self.conv1 = conv1x1(in_channels, planes)
        self.bn2 = nn.BatchNorm2d(planes)
        self.conv2 = conv3x3(planes, planes, stride)
        self.bn3 = nn.BatchNorm2d(planes)
        self.conv3 = conv1x1(planes, out)
        self.relu = nn.ReLU(inplace=True)
        self.downsample = make_shortcut(in_channels, out, stride, shortcut, norm=False)
        self.drop_path = DropPath(drop_path) if drop_path > 0 else nn.Identity()
        self.init_slots()

    def split(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        pre = self.relu(self.bn1(x))  # shared by the branch and a projection or padding
        return pre, (x if self.downsample is None else self.downsample(pre))

    def branch_start(self, x: torch.Tensor) -> torch.Tensor:
        return self.conv2(self.relu(self.bn2(self.conv1(x))))

    def branch_middle(self, x: torch.Tensor) -> torch.Tensor:
        return x  # prenorm and inner see the same tensor: the 3x3's output, before bn3

    def branch_end(self, x: torch.Tensor) -> torch.Tensor:
        return self.conv3(self.relu(self.bn3(x)))

    def zero_init_last(self) -> None:
        """Zero the last layer of the residual branch, so the unit starts as the identity."""
        nn.init.zeros_(self.conv3.weight)
