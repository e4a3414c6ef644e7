"""Convolutional Block Attention Module (Woo, Park, Lee, Kweon; ECCV 2018, "CBAM: Convolutional
Block Attention Module")."""

from __future__ import annotations

from collections.abc import Sequence

import torch
import torch.nn as nn
import torch.nn.functional as F

from ._utils import Excitation, check_choice, get_layer, reduced_channels, spatial_mean
from .capture import is_capturing, record_attention
from .registry import register_block
from .spatial import SpatialGate

_POOLS = ("avg", "max")
_ORDERS = ("channel_first", "spatial_first", "parallel")


class ChannelGate(Excitation):
    """CBAM's channel attention map ``M_c(F)`` (Eq. (2)), ``(N, C, H, W) -> (N, C, 1, 1)``.

    ``M_c(F) = sigmoid(sum_p MLP(Pool_p(F)))`` over the pooling types ``p`` (average and max in the
    paper) with ONE shared MLP ``W1 ReLU(W0 .)``, ``W0: C -> C/r``, ``W1: C/r -> C`` (1x1 convs
    with bias, like the official code's ``nn.Linear``; ``mlp_bias=False`` drops the biases, as
    timm's default does). The pooled vectors go through the MLP as
    one batch. ``light=True`` (timm's ``LightChannelAttn``) averages the two pooled vectors,
    ``0.5 (AvgPool + MaxPool)``, before ONE pass through the MLP.
    """

    def __init__(
        self,
        channels: int,
        reduction: float = 16,
        pool_types: tuple[str, ...] = _POOLS,
        act_layer: str | type[nn.Module] = "relu",
        gate_layer: str | type[nn.Module] = "sigmoid",
        light: bool = False,
        mlp_bias: bool = True,
    ) -> None:
        super().__init__()
        hidden = reduced_channels(channels, reduction)
        self.pool_types = tuple(pool_types)
        self.light = bool(light)
        self.add_excitation(channels, hidden, act_layer, bias=mlp_bias)
        self.gate = get_layer(gate_layer, "gate_layer")()

    def init_identity(self) -> None:
        """Zero the MLP's last layer; gate 2*sigmoid, so ``M_c = 1``."""
        self.gate = self.identity_gate()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.light:
            z = 0.5 * spatial_mean(x) + 0.5 * F.adaptive_max_pool2d(x, 1)
            return self.gate(self.excite(z))
        pools: list[torch.Tensor] = []  # a loop, not a comprehension: TorchScript compiles it
        for p in self.pool_types:
            # global max as adaptive_max_pool2d(x, 1), not amax: on CPU its backward is 2-3x
            # faster (5x in channels-last, where amax's forward is slow too); both exporters
            # write it as a global reduction (GlobalMaxPool / ReduceMax)
            pools.append(spatial_mean(x) if p == "avg" else F.adaptive_max_pool2d(x, 1))
        z = self.excite(torch.cat(pools, dim=0))  # (P*N, C, 1, 1)
        # explicit sizes (no unpacking of z.shape): torch.fx cannot iterate a traced shape
        return self.gate(z.view(len(pools), -1, z.shape[1], 1, 1).sum(dim=0))


def _check_pool_types(pool_types: Sequence[str]) -> tuple[str, ...]:
    if isinstance(pool_types, str) or not isinstance(pool_types, (tuple, list)):
        raise ValueError(
            f"option 'pool_types' must be a non-empty list drawn from {list(_POOLS)}, "
            f"got {pool_types!r}"
        )
    if not pool_types:
        raise ValueError(f"option 'pool_types' must not be empty; choose from {list(_POOLS)}")
    for p in pool_types:
        check_choice("pool_types", p, _POOLS)
    if len(set(pool_types)) != len(pool_types):
        raise ValueError(f"option 'pool_types' lists a pooling twice: {list(pool_types)}")
    return tuple(pool_types)


@register_block("cbam", family="hybrid", paper="Woo et al., ECCV 2018")
class CBAM(nn.Module):
    r"""CBAM: channel attention then spatial attention (Eq. (1)).

    $$
    F' = M_c(F) \otimes F, \qquad F'' = M_s(F') \otimes F'
    $$

    $$
    M_c(F) = \sigma\big(\mathrm{MLP}(\mathrm{AvgPool}(F)) + \mathrm{MLP}(\mathrm{MaxPool}(F))\big),
    \qquad
    M_s(F) = \sigma\big(f^{7 \times 7}([\mathrm{AvgPool}(F); \mathrm{MaxPool}(F)])\big)
    $$

    ``F' = M_c(F) * F``, ``F'' = M_s(F') * F'`` with

    * ``M_c(F) = sigmoid(MLP(AvgPool(F)) + MLP(MaxPool(F)))`` (Eq. (2)), one shared MLP
      ``C -> C/r -> C`` with ReLU, ``r = 16``;
    * ``M_s(F) = sigmoid(f^{7x7}([AvgPool_c(F); MaxPool_c(F)]))`` (Eq. (3)), see
      :class:`~visattn.blocks.spatial.SpatialAttention` (``use_bn`` selects the official code's BN).

    ``order`` (the paper's Sec. 4.1 arrangement study): ``"channel_first"`` (the paper's choice,
    above), ``"spatial_first"`` (``F' = M_s(F) * F``, ``F'' = M_c(F') * F'``) or ``"parallel"``
    (both maps from the same input, applied together: ``F'' = M_c(F) * M_s(F) * F``).

    Shapes: ``(N, C, H, W) -> (N, C, H, W)``. The attention map recorded is the effective weights
    ``M_c * M_s`` broadcast to ``(N, C, H, W)`` (so ``F'' = map * F`` exactly, whatever the order);
    it is only computed while ``capture_attention`` is active.

    ``light=True`` is timm's ``lcbam`` (``LightCbamModule``): the channel gate averages its two
    pooled vectors before one MLP pass, and the spatial gate convolves ONE map, the average of the
    channel mean and max (``k x k`` conv ``1 -> 1``). timm also fixes the light channel gate to a
    sigmoid whatever ``gate_layer``; here ``gate_layer`` applies to both.

    Parameters (default options, ``C_r = C // 16``, ``k = 7``): ``2 C C_r + C_r + C + 2 k^2 + 1``
    (MLP ``C C_r + C_r + C_r C + C``; spatial conv ``2 k^2 + 1``); ``light=True``:
    ``2 C C_r + C_r + C + k^2 + 1``; ``mlp_bias=False`` drops ``C_r + C``.

    Args:
        channels: input channels ``C``.
        reduction: MLP ratio ``r`` (16 in the paper).
        order: ``"channel_first"`` | ``"spatial_first"`` | ``"parallel"``.
        kernel_size: positive odd spatial kernel ``k`` (7 in the paper, 3 its ablation).
        pool_types: non-empty subset of ``("avg", "max")`` for the channel gate.
        use_bn: official-code BN in the spatial gate (see ``spatial``).
        act_layer: MLP activation (name or class), ReLU in the paper.
        gate_layer: gate of both maps (name or class), sigmoid in the paper.
        light: timm's light CBAM (``lcbam``), see above.
        mlp_bias: biases in the channel MLP (official code: yes; timm's default: no).
    """

    def __init__(
        self,
        channels: int,
        reduction: float = 16,
        order: str = "channel_first",
        kernel_size: int = 7,
        pool_types: Sequence[str] = _POOLS,
        use_bn: bool = False,
        act_layer: str | type[nn.Module] = "relu",
        gate_layer: str | type[nn.Module] = "sigmoid",
        light: bool = False,
        mlp_bias: bool = True,
    ) -> None:
        super().__init__()
        check_choice("order", order, _ORDERS)
        pool_types = _check_pool_types(pool_types)
        if light and pool_types != _POOLS:
            raise ValueError("option 'pool_types' does not apply with light=True (avg and max)")
        self.order = order
        self.channel = ChannelGate(
            channels, reduction, pool_types, act_layer, gate_layer, light, mlp_bias
        )
        self.spatial = SpatialGate(kernel_size, use_bn=use_bn, gate_layer=gate_layer, light=light)

    def init_identity(self) -> None:
        """native: channel MLP last conv and spatial conv (or BN) zero, both gates 2*sigmoid."""
        self.channel.init_identity()
        self.spatial.init_identity()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.order == "parallel":
            mc, ms = self.channel(x), self.spatial(x)
            x = x * mc
        elif self.order == "channel_first":
            mc = self.channel(x)
            x = x * mc
            ms = self.spatial(x)
        else:
            ms = self.spatial(x)
            x = x * ms
            mc = self.channel(x)
        # not one `and` test: TorchScript only skips the body of a bare is_scripting() test
        if not torch.jit.is_scripting():  # noqa: SIM102  (scripted blocks record nothing)
            # the (N, C, H, W) map costs a full pass: only build it when asked
            if is_capturing(self):
                record_attention(self, mc * ms)
        return x * (mc if self.order == "spatial_first" else ms)

    def extra_repr(self) -> str:
        return f"order={self.order!r}"
