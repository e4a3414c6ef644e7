"""Selective Kernel convolution (Li, Wang, Hu, Yang; CVPR 2019, "Selective Kernel Networks")."""

from __future__ import annotations

from collections.abc import Sequence

import torch
import torch.nn as nn

from ._utils import (
    check_positive_int,
    init_conv_io,
    reduced_channels,
    same_memory_format,
    spatial_mean,
)
from .capture import record_attention
from .conventions import Reduced
from .registry import register_block

# format bookkeeping outside the traced graph (torch.fx cannot branch on a proxy)
torch.fx.wrap("same_memory_format")

__all__ = ["SelectiveKernel"]


def _check_kernels(kernel_sizes: Sequence[int]) -> tuple[int, ...]:
    if isinstance(kernel_sizes, (str, int)) or not isinstance(kernel_sizes, (tuple, list)):
        raise ValueError(
            f"option 'kernel_sizes' must be a list of odd kernel sizes, got {kernel_sizes!r}"
        )
    if len(kernel_sizes) < 2:
        raise ValueError(f"option 'kernel_sizes' needs at least two paths, got {kernel_sizes!r}")
    for k in kernel_sizes:
        check_positive_int("kernel_sizes", k, odd=True)
    return tuple(kernel_sizes)


def _check_groups(groups: int | Sequence[int], paths: int) -> tuple[int, ...]:
    """One group count per path: an int for every path, or a list of ``paths`` of them."""
    if isinstance(groups, (tuple, list)):
        if len(groups) != paths:
            raise ValueError(
                f"option 'groups' must be one int or one per path ({paths}), got {groups!r}"
            )
        for g in groups:
            check_positive_int("groups", g)
        return tuple(groups)
    check_positive_int("groups", groups)
    return (groups,) * paths


@register_block(
    "sk",
    family="channel",
    paper="Li et al., CVPR 2019",
    replaces_conv=True,
    reduced=Reduced(width="rd_channels", base=lambda c, options: options["out_channels"] or c),
)
class SelectiveKernel(nn.Module):
    r"""Selective Kernel convolution: ``M`` conv paths mixed by a channel-wise softmax.

    $$
    U = \sum_m U_m, \quad s = \mathrm{GAP}(U), \quad z = \delta\big(\mathrm{BN}(W s)\big), \quad
    a_m = \frac{e^{A_m z}}{\sum_{m'} e^{A_{m'} z}}, \quad
    V = \sum_m a_m \odot U_m
    $$

    Follows Sec. 3.1 of the paper (Split, Fuse, Select):

    * split: path ``m`` is ``U_m = ReLU(BN(conv_{k_m}(X)))``, a (grouped) conv with kernel
      ``k_m``; a kernel larger than 3 is the paper's 3x3 conv with dilation ``(k_m - 1) / 2``
      (``dilate=True``, e.g. 5x5 -> 3x3 dilation 2), so every path costs a 3x3 conv;
    * fuse: ``U = sum_m U_m``, ``s = GAP(U)`` (Eq. 1), ``z = ReLU(BN(W s))`` with
      ``W: C' -> d``, ``d = max(C' / r, L)`` (Eq. 2), no bias;
    * select: ``a_m = softmax_m(A_m z)`` per channel (Eq. 3; ``A_m: d -> C'``, no bias; the ``M``
      matrices are one 1x1 conv to ``M C'`` channels, path-major) and
      ``V = sum_m a_m * U_m`` (Eq. 4).

    The paths include BN and ReLU, so the output is already normalised and activated: placed at
    ``conv`` the norm and activation that followed the replaced conv are redundant
    (``includes_norm_act``; timm's SK ResNets drop them).

    ``split_input=True`` is timm's variant: the input channels are split evenly over the paths
    (path ``m`` sees ``C / M`` of them), which divides the paths' parameters by ``M``.

    Shapes: ``(N, C, H, W) -> (N, C', H / s, W / s)`` (``C' = out_channels``, ``s = stride``,
    sizes rounded up as for a padded strided conv). Attention map ``(N, C', 1, 1)``: the weight
    ``a_1`` of the first path (with two paths the second is ``1 - a_1``).

    Parameters (``M`` paths of kernel 3 (``dilate``), ``G`` groups, ``C_p = C / M`` with
    ``split_input`` else ``C``): ``M * (9 * C_p * C' / G + 2 * C') + C' * d + 2 * d + d * M * C'``
    (with one ``G_m`` per path, ``sum_m (9 * C_p * C' / G_m + 2 * C')`` for the first term).

    Args:
        channels: input channels ``C``.
        out_channels: output channels ``C'`` (default ``C``).
        stride: stride of every path's conv.
        kernel_sizes: one kernel size per path (paper: 3 and 5).
        dilate: a kernel ``k > 3`` becomes a 3x3 conv with dilation ``(k - 1) / 2`` (paper).
        groups: groups of the path convs (SKNet-50 uses 32 on its ResNeXt backbone; 1 replaces
            a plain ResNet conv), or one per path (the SK-ResNet-50 of Li's PytorchInsight:
            ``(1, 32)``, a dense and a grouped 3x3).
        reduction: ``r`` in ``d = max(C' / r, L)`` (paper 16).
        min_rd_channels: ``L`` (paper 32).
        rd_channels: explicit ``d`` (overrides ``reduction`` and ``min_rd_channels``).
        split_input: split the input channels over the paths (timm), not in the paper.
    """

    includes_norm_act = True

    def __init__(
        self,
        channels: int,
        out_channels: int | None = None,
        stride: int = 1,
        kernel_sizes: Sequence[int] = (3, 5),
        dilate: bool = True,
        groups: int | Sequence[int] = 1,
        reduction: float = 16,
        min_rd_channels: int = 32,
        rd_channels: int | None = None,
        split_input: bool = False,
    ) -> None:
        super().__init__()
        out = init_conv_io(self, channels, out_channels, stride)
        check_positive_int("min_rd_channels", min_rd_channels)
        kernels = _check_kernels(kernel_sizes)
        paths = len(kernels)
        path_groups = _check_groups(groups, paths)
        path_in = channels
        if split_input:
            if channels % paths:
                raise ValueError(
                    f"option 'split_input' needs channels={channels} divisible by the {paths} paths"
                )
            path_in = channels // paths
        for g in path_groups:
            if path_in % g or out % g:
                raise ValueError(
                    f"option 'groups'={g} must divide the path's input ({path_in}) and output "
                    f"({out}) channels"
                )
        if rd_channels is not None:
            check_positive_int("rd_channels", rd_channels)
            d = rd_channels
        else:
            d = reduced_channels(out, reduction, min_channels=min_rd_channels)
        self.split_input, self.rd_channels = split_input, d

        self.paths = nn.ModuleList()
        for k, g in zip(kernels, path_groups):
            dil = (k - 1) // 2 if dilate and k > 3 else 1
            size = 3 if dilate and k > 3 else k
            self.paths.append(
                nn.Sequential(
                    nn.Conv2d(
                        path_in,
                        out,
                        size,
                        stride,
                        padding=dil * (size - 1) // 2,
                        dilation=dil,
                        groups=g,
                        bias=False,
                    ),
                    nn.BatchNorm2d(out),
                    nn.ReLU(inplace=True),
                )
            )
        self.fc_reduce = nn.Conv2d(out, d, 1, bias=False)
        self.bn = nn.BatchNorm2d(d)
        self.act = nn.ReLU(inplace=True)
        self.fc_select = nn.Conv2d(d, out * paths, 1, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        m = len(self.paths)
        us: list[torch.Tensor] = []  # loops, not comprehensions: TorchScript
        if self.split_input:
            xs = x.chunk(m, dim=1)
            for i, path in enumerate(self.paths):
                us.append(path(xs[i]))
        else:
            for path in self.paths:
                us.append(path(x))
        u = torch.stack(us, dim=1)  # (N, M, C', H, W)
        # the branches' sum in float32 (it may pass float16's range where no branch does)
        wide = torch.promote_types(u.dtype, torch.float32)
        s = spatial_mean(u.sum(1, dtype=wide)).to(u.dtype)
        z = self.act(self.bn(self.fc_reduce(s)))
        n = x.shape[0]
        a = self.fc_select(z).view(n, m, self.out_channels, 1, 1).softmax(dim=1)
        if not torch.jit.is_scripting():
            record_attention(self, a[:, 0])
        return same_memory_format((u * a).sum(1), x)

    def extra_repr(self) -> str:
        return (
            f"{self.in_channels}, {self.out_channels}, stride={self.stride}, "
            f"rd_channels={self.rd_channels}, split_input={self.split_input}"
        )
