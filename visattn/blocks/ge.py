"""Gather-Excite (Hu, Shen, Albanie, Sun, Vedaldi; NeurIPS 2018, "Gather-Excite: Exploiting Feature
Context in Convolutional Neural Networks")."""

from __future__ import annotations

import math

import torch
import torch.nn as nn
import torch.nn.functional as F

from ._utils import check_choice, get_layer, reduced_channels, spatial_mean
from .capture import record_attention
from .identity import ScaledSigmoid
from .registry import register_block

VARIANTS = ("minus", "theta", "plus")


def _check_extent(extent: int | str, variant: str) -> int:
    """``extent`` as an int (0 for global); parametric gathers need a power of 2."""
    if extent == "global":
        return 0
    if isinstance(extent, bool) or not isinstance(extent, int) or extent < 2:
        raise ValueError(f"option 'extent' must be 'global' or an int >= 2, got {extent!r}")
    if variant != "minus" and extent & (extent - 1):
        raise ValueError(
            f"option 'extent'={extent}: variant {variant!r} gathers with log2(extent) stride-2 "
            "convolutions, so the extent must be a power of 2 (2, 4, 8 in the paper)"
        )
    return extent


def _check_feat_size(x: torch.Tensor, fs: tuple[int, int]) -> None:
    if x.shape[-2] != fs[0] or x.shape[-1] != fs[1]:
        raise ValueError(
            f"block 'ge': built for {fs[0]}x{fs[1]} inputs (feat_size), "
            f"got {x.shape[-2]}x{x.shape[-1]}"
        )


def _gate_to_size(g: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    """The gate ``g`` brought to ``x``'s ``H x W`` by nearest-neighbour interpolation (a
    ``1 x 1`` gate is left to broadcast)."""
    if g.shape[-2] != 1 or g.shape[-1] != 1:
        g = F.interpolate(g, size=(x.shape[-2], x.shape[-1]), mode="nearest")
    return g


# torch.fx calls these as one node each: their tests on sizes are only known when the graph runs
torch.fx.wrap("_check_feat_size")
torch.fx.wrap("_gate_to_size")


@register_block("ge", family="hybrid", paper="Hu et al., NeurIPS 2018")
class GatherExcite(nn.Module):
    """Gather-Excite block: ``y = x * sigmoid(interp(xi_G(x)))`` (Sec. 3 of the paper).

    * gather ``xi_G``, with extent ratio ``e`` (the gathered map is about ``H/e x W/e``; global:
      ``1 x 1``):

      - ``variant="minus"`` (GE-theta-minus, parameter-free): average pooling. Global: the mean
        over ``H x W``; extent ``e``: window ``2e - 1``, stride ``e``, padding ``e - 1``,
        padded cells not counted (the window timm uses; the paper fixes the extent, not the
        window);
      - ``"theta"`` and ``"plus"`` (GE-theta, GE-theta-plus): depthwise convolutions. Extent ``e``
        (a power of 2): ``log2(e)`` depthwise 3x3 convs with stride 2, each followed by BN, ReLU
        between them. Global: one depthwise conv whose kernel is the whole feature map
        (``feat_size``), then BN;

    * ``"plus"`` adds SE's excitation MLP on the gathered map (Sec. 3, GE-theta-plus): 1x1 convs
      ``C -> C/r -> C`` with bias and ReLU;
    * excite: nearest-neighbour interpolation back to ``H x W``, a sigmoid, and ``y = x * g``.

    ``variant="minus", extent="global"`` is ``x * sigmoid(GAP(x))``. ``mlp=True`` adds the MLP
    to the other variants: ``variant="minus", mlp=True`` is timm's default ``ge`` (a
    parameter-free gather and SE's MLP; with global extent it is SE).

    Default: GE-theta-plus with ``e = 8``, which works at any input size; the paper's global
    parametric gather needs the feature size (``feat_size=(H, W)``; another input size is an
    error).

    Shapes: ``(N, C, H, W) -> (N, C, H, W)``; attention map: the interpolated gate ``g``
    ``(N, C, H, W)`` (``(N, C, 1, 1)`` for global extent).

    Paper vs timm (``timm.layers.GatherExcite``): timm's parametric global gather pads its
    ``H x W`` depthwise conv to "same" size, so its output stays ``H x W`` (a local filter, not a
    global one); here it has no padding and gives ``1 x 1``. In timm 1.0.31 the constructor fails
    whenever it builds the MLP or a parametric gather (``device``/``dtype`` passed positionally).

    Parameters (``C_r = C // r``, ``n = log2(e)``): ``minus`` 0; ``theta`` ``11 n C``
    (global: ``(H W + 2) C``); ``plus`` (or ``mlp=True``) adds ``2 C C_r + C_r + C``.
    Default (``plus``, ``e = 8``): ``33 C + 2 C C_r + C_r + C``.

    Args:
        channels: input channels ``C``.
        variant: ``"minus"`` | ``"theta"`` | ``"plus"``.
        extent: ``"global"`` or the extent ratio ``e`` (2, 4, 8 in the paper).
        reduction: ratio ``r`` of the ``plus`` MLP (16, as SE).
        mlp: SE's MLP after the gather; ``None`` = only for ``variant="plus"``.
        feat_size: ``(H, W)`` of the input, needed by a parametric global gather only.
        act_layer: activation of the MLP and between gather convs (name or class), ReLU.
        gather_act: the activation after the gather's last BN too (the released
            ``RN50-GEPP.prototxt`` has a ReLU there); parametric gathers only.
        gate_layer: gate (name or class), sigmoid in the paper.
    """

    def __init__(
        self,
        channels: int,
        variant: str = "plus",
        extent: int | str = 8,
        reduction: float = 16,
        mlp: bool | None = None,
        feat_size: tuple[int, int] | None = None,
        act_layer: str | type[nn.Module] = "relu",
        gate_layer: str | type[nn.Module] = "sigmoid",
        gather_act: bool = False,
    ) -> None:
        super().__init__()
        check_choice("variant", variant, VARIANTS)
        if gather_act and variant == "minus":
            raise ValueError(
                "option 'gather_act' needs a parametric gather (variant 'theta' or 'plus')"
            )
        e = _check_extent(extent, variant)
        act = get_layer(act_layer, "act_layer")
        self.variant, self.extent = variant, e
        self.feat_size: tuple[int, int] | None = None
        self.gather: nn.Module | None = None
        if variant != "minus":
            layers: list[nn.Module] = []
            if e == 0:
                if (
                    not isinstance(feat_size, (tuple, list))
                    or len(feat_size) != 2
                    or any(
                        isinstance(s, bool) or not isinstance(s, int) or s < 1 for s in feat_size
                    )
                ):
                    raise ValueError(
                        f"option 'feat_size' must be (H, W) for variant {variant!r} with global "
                        f"extent (the depthwise kernel covers the whole map), got {feat_size!r}"
                    )
                self.feat_size = (int(feat_size[0]), int(feat_size[1]))
                layers += [
                    nn.Conv2d(channels, channels, self.feat_size, groups=channels, bias=False),
                    nn.BatchNorm2d(channels),
                ]
            else:
                n = int(math.log2(e))
                for i in range(n):
                    layers += [
                        nn.Conv2d(channels, channels, 3, 2, 1, groups=channels, bias=False),
                        nn.BatchNorm2d(channels),
                    ]
                    if i < n - 1:
                        layers.append(act())
            self._gather_norm = len(layers) - 1  # the last BN (init_identity zeroes it)
            if gather_act:
                layers.append(act())
            self.gather = nn.Sequential(*layers)
        elif feat_size is not None:
            raise ValueError("option 'feat_size' only applies to the parametric variants")
        if mlp is None:
            mlp = variant == "plus"
        elif variant == "plus" and not mlp:
            raise ValueError("option 'mlp'=False contradicts variant='plus' (theta + MLP)")
        self.mlp: nn.Module | None = None
        if mlp:
            hidden = reduced_channels(channels, reduction)
            self.mlp = nn.Sequential(
                nn.Conv2d(channels, hidden, 1), act(), nn.Conv2d(hidden, channels, 1)
            )
        self.context_scale: nn.Parameter | None = None  # identity form of "minus" only
        self.gate = get_layer(gate_layer, "gate_layer")()

    def init_identity(self) -> None:
        """native: last layer before the gate zero (minus: a map scale = 0), gate 2*sigmoid.

        With an MLP (plus): its last conv; theta: the gather's last BN; the parameter-free minus
        gets a learnable scale of its gathered map, starting at 0. The gate is ScaledSigmoid(2).
        """
        if self.mlp is not None:
            nn.init.zeros_(self.mlp[-1].weight)
            nn.init.zeros_(self.mlp[-1].bias)
        elif self.gather is not None:
            nn.init.zeros_(self.gather[self._gather_norm].weight)
            nn.init.zeros_(self.gather[self._gather_norm].bias)
        else:
            self.context_scale = nn.Parameter(torch.zeros(1))
        self.gate = ScaledSigmoid(2.0)

    def _gather(self, x: torch.Tensor) -> torch.Tensor:
        if self.gather is not None:
            return self.gather(x)
        if self.extent == 0:
            return spatial_mean(x)
        e = self.extent
        return F.avg_pool2d(x, 2 * e - 1, e, e - 1, count_include_pad=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        fs = self.feat_size
        if not torch.jit.is_scripting():  # noqa: SIM102 (scripting skips the inner test)
            if fs is not None:
                _check_feat_size(x, fs)
        g = self._gather(x)
        if self.mlp is not None:
            g = self.mlp(g)
        if self.context_scale is not None:
            g = g * self.context_scale
        g = self.gate(g)
        g = _gate_to_size(g, x)
        if not torch.jit.is_scripting():
            record_attention(self, g)
        return x * g

    def extra_repr(self) -> str:
        extent = "global" if self.extent == 0 else self.extent
        return f"variant={self.variant!r}, extent={extent!r}"
