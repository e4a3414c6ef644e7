"""Global Context block (Cao, Xu, Lin, Wei, Hu; ICCV Workshops 2019, "GCNet: Non-local Networks Meet
Squeeze-Excitation Networks and Beyond")."""

from __future__ import annotations

import torch
import torch.nn as nn

from ._utils import check_choice, get_layer, reduced_channels, spatial_mean
from .capture import is_capturing, record_attention
from .identity import unit_gate, zero_layer
from .registry import register_block


@register_block("gc", family="channel", paper="Cao et al., ICCVW 2019")
class GlobalContext(nn.Module):
    r"""GC block: softmax attention pooling, bottleneck transform with LayerNorm, fusion by sum.

    $$
    z_i = x_i + W_{v2} \, \mathrm{ReLU}\Big(\mathrm{LN}\Big(W_{v1} \sum_{j=1}^{N_p}
    \frac{e^{W_k x_j}}{\sum_{m=1}^{N_p} e^{W_k x_m}} \, x_j\Big)\Big)
    $$

    Follows Eq. (4) of the paper (Fig. 4(d)),
    ``z_i = x_i + W_v2 ReLU(LN(W_v1 sum_j [exp(W_k x_j) / sum_m exp(W_k x_m)] x_j))``:

    * context modelling: a 1x1 conv ``W_k: C -> 1`` (with bias) and a softmax over the ``HW``
      positions give weights ``a`` ``(N, 1, H, W)``; the context is ``sum_j a_j x_j``
      ``(N, C, 1, 1)``;
    * transform: 1x1 conv ``C -> C/r``, ``LayerNorm([C/r, 1, 1])``, ReLU, 1x1 conv ``C/r -> C``
      (convs with bias, as in the official code);
    * fusion by broadcast addition ``x + transform(context)``, the same vector at every position.

    As in the official code (``xvjiarui/GCNet``, ``last_zero_init``) and timm, the last conv of
    the addition transform starts at zero, so a fresh block (``fusion="add"``) is the identity;
    ``zero_init_last=False`` keeps PyTorch's default init.

    The paper's ablations (Table 2(d)-(e)), both in the official code and timm:

    * ``pool="avg"``: global average pooling instead of the attention pooling (no ``W_k``);
    * ``fusion``: ``"add"`` (the paper's choice, above; timm's ``gca``), ``"scale"``
      (``z = x * sigmoid(T_s(context))`` with its own transform ``T_s``, the same layers; timm's
      default ``gc``) or ``"both"`` (scale, then add; ``z = x * sigmoid(T_s(c)) + T_a(c)``).

    Shapes: ``(N, C, H, W) -> (N, C, H, W)``. The attention map recorded is the pooling weights
    ``a`` ``(N, 1, H, W)`` (each image's map sums to 1; uniform ``1/HW`` for ``pool="avg"``),
    whatever the fusion.

    Parameters (default options, ``C_r = C // 16``): ``2 C C_r + 3 C_r + 2 C + 1``
    (``W_k``: ``C + 1``; ``W_v1``: ``C C_r + C_r``; LN: ``2 C_r``; ``W_v2``: ``C_r C + C``);
    ``fusion="both"`` adds a second transform, ``2 C C_r + 3 C_r + C``; ``pool="avg"`` drops
    ``C + 1``.

    Args:
        channels: input channels ``C``.
        reduction: bottleneck ratio ``r`` (``1/r`` = 1/16 in the paper's ImageNet models).
        pool: ``"attn"`` (softmax attention pooling, paper) or ``"avg"``.
        fusion: ``"add"`` (paper) | ``"scale"`` | ``"both"``.
        act_layer: bottleneck activation (name or class), ReLU in the paper.
        gate_layer: gate of the scale fusion (name or class), sigmoid.
        zero_init_last: start the addition transform's last conv at zero (identity at init).
        norm_eps: the LayerNorms' epsilon (1e-5 as GCNet's ``nn.LayerNorm``; timm uses 1e-6).
    """

    def __init__(
        self,
        channels: int,
        reduction: float = 16,
        pool: str = "attn",
        fusion: str = "add",
        act_layer: str | type[nn.Module] = "relu",
        gate_layer: str | type[nn.Module] = "sigmoid",
        zero_init_last: bool = True,
        norm_eps: float = 1e-5,
    ) -> None:
        super().__init__()
        check_choice("pool", pool, ("attn", "avg"))
        if isinstance(norm_eps, bool) or not isinstance(norm_eps, (int, float)) or norm_eps <= 0:
            raise ValueError(f"option 'norm_eps' must be a positive number, got {norm_eps!r}")
        check_choice("fusion", fusion, ("add", "scale", "both"))
        hidden = reduced_channels(channels, reduction)
        act = get_layer(act_layer, "act_layer")
        self.pool, self.fusion = pool, fusion
        self.conv_attn = nn.Conv2d(channels, 1, 1) if pool == "attn" else None
        self.fc1 = self.norm = self.act = self.fc2 = None  # the addition transform T_a
        if fusion != "scale":
            self.fc1 = nn.Conv2d(channels, hidden, 1)
            self.norm = nn.LayerNorm([hidden, 1, 1], eps=norm_eps)
            self.act = act()
            self.fc2 = nn.Conv2d(hidden, channels, 1)
        self.scale: nn.Module | None = None  # the scale transform T_s
        if fusion != "add":
            self.scale = nn.Sequential(
                nn.Conv2d(channels, hidden, 1),
                nn.LayerNorm([hidden, 1, 1], eps=norm_eps),
                act(),
                nn.Conv2d(hidden, channels, 1),
            )
        self.gate = get_layer(gate_layer, "gate_layer")()
        self._zero_init_last = bool(zero_init_last)  # not `zero_init_last`: timm calls that
        self.reset_parameters()

    def reset_parameters(self) -> None:
        if self.conv_attn is not None:
            nn.init.kaiming_normal_(self.conv_attn.weight, mode="fan_in", nonlinearity="relu")
            nn.init.zeros_(self.conv_attn.bias)
        if self._zero_init_last and self.fc2 is not None:
            zero_layer(self.fc2)

    def init_identity(self) -> None:
        """native: W_v2 zero (the official init), y = x + 0; scale fusion: zero + 2*sigmoid.

        With ``fusion="scale"``/``"both"`` the scale transform's last conv starts at zero and its
        gate becomes ScaledSigmoid(2).
        """
        if self.fc2 is not None:
            zero_layer(self.fc2)
        if self.scale is not None:
            self.gate = unit_gate(self.scale[-1])

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        n, c, h, w = x.shape
        if self.conv_attn is not None:
            a = self.conv_attn(x).view(n, 1, h * w).softmax(dim=-1)  # (N, 1, HW)
            context = torch.bmm(x.flatten(2), a.to(x.dtype).transpose(1, 2)).view(n, c, 1, 1)
            if not torch.jit.is_scripting():
                record_attention(self, a.view(n, 1, h, w))
        else:
            context = spatial_mean(x)
            if not torch.jit.is_scripting():  # noqa: SIM102 (scripting skips the inner test)
                if is_capturing(self):
                    record_attention(self, x.new_full((n, 1, h, w), 1.0 / (h * w)))
        out = x
        if self.scale is not None:
            out = out * self.gate(self.scale(context))
        if self.fc2 is not None:
            out = out + self.fc2(self.act(self.norm(self.fc1(context))))
        return out

    def extra_repr(self) -> str:
        return f"pool={self.pool!r}, fusion={self.fusion!r}"
