"""Dual attention: the position and channel attention modules of DANet (Fu, Liu, Tian, Li, Bao,
Fang, Lu; CVPR 2019, "Dual Attention Network for Scene Segmentation")."""

from __future__ import annotations

import torch
import torch.nn as nn

from ._attention import softmax_attention
from ._utils import check_choice, reduced_channels
from .capture import is_capturing, record_attention
from .mhsa import ATTN_IMPLS
from .registry import register_block

torch.fx.wrap("softmax_attention")

__all__ = ["DualAttention"]

FUSIONS = ("mean", "sum")
CAM_LOGITS = ("energy", "negated")
RECORDS = ("position", "channel")


@register_block("danet", family="hybrid", paper="Fu et al., CVPR 2019")
class DualAttention(nn.Module):
    """Position attention module (PAM) and channel attention module (CAM) side by side.

    PAM, Eqs. (1)-(2) of the paper, with ``q = W_q x``, ``k = W_k x`` (1x1 convs ``C -> C/r``,
    ``r = 8`` as in the official code) and ``v = W_v x`` (1x1 conv ``C -> C``), all with bias::

        s_ji = exp(q_j . k_i) / sum_i exp(q_j . k_i)          (HW x HW, no scaling)
        E_pos_j = alpha * sum_i s_ji v_i + x_j

    (the paper names the query/key convs ``B``/``C`` and writes ``B_i . C_j``; both are free 1x1
    convs, so which one is called "query" is a naming choice.)

    CAM, Eqs. (3)-(4), on the raw input ``A = x`` reshaped to ``(C, HW)``, no parameters but
    ``beta``::

        g_ji = exp(A_j . A_i) / sum_i exp(A_j . A_i)           (C x C)
        E_ch_j = beta * sum_i g_ji A_i + A_j

    ``alpha`` and ``beta`` are learnable scalars that start at 0, as the paper says. The paper
    sums the two module outputs (after its head's convolutions). Fusion (option ``fusion``):

    * ``mean`` (default): ``y = (E_pos + E_ch) / 2 = x + (alpha P + beta Q) / 2`` with ``P``,
      ``Q`` the two attention terms above. This is the paper's sum scaled by 1/2 (a constant that
      the next linear layer absorbs); it keeps the input's scale, so the fresh block is the
      identity.
    * ``sum``: ``y = E_pos + E_ch = 2 x + alpha P + beta Q``, the literal sum.

    ``cam_logits="negated"`` gives the official code's channel attention, which takes the
    softmax of ``max_i(A_j . A_i) - A_j . A_i`` (that is, of ``-A_j . A_i``) instead of the
    paper's ``A_j . A_i``. The official head's extra 3x3 convolutions around each module and its
    classifier are not part of the block.

    Recorded attention (option ``record``): ``position`` (default) gives ``(N, 1, H, W)``, the
    attention each position *receives* in PAM (``s`` averaged over the queries ``j``, so each
    map sums to 1); ``channel`` gives ``(N, C, 1, 1)``, the same for CAM's ``g``.

    PAM runs through ``F.scaled_dot_product_attention`` (``attn_impl="fused"``, its queries and
    keys zero-padded to the values' width), so its ``HW x HW`` weights are never built;
    ``attn_impl="math"`` writes them out. CAM's ``C x C`` softmax is small and always written
    out. Both modules keep their logits and softmax in float32 under autocast (CAM's energies
    ``A_j . A_i`` sum ``HW`` squares and overflow float16 at moderate activations).

    Shapes: ``(N, C, H, W) -> (N, C, H, W)``. Memory ``O(N HW C + N C^2)`` fused,
    ``O(N (HW)^2 + N C^2)`` with ``attn_impl="math"``.

    Parameters (default options, ``d = C // 8``): ``2 (C d + d) + C^2 + C + 2``
    (``W_q``, ``W_k``; ``W_v``; ``alpha``, ``beta``).

    Args:
        channels: input channels ``C``.
        reduction: query/key channels ``d = C // reduction`` (8 in the official code).
        fusion: ``mean`` | ``sum`` (see above).
        cam_logits: ``energy`` (paper) | ``negated`` (official code).
        record: what :func:`visattn.capture_attention` receives, ``position`` | ``channel``.
        attn_impl: PAM's path, ``fused`` | ``math`` (same function).
    """

    def __init__(
        self,
        channels: int,
        reduction: float = 8,
        fusion: str = "mean",
        cam_logits: str = "energy",
        record: str = "position",
        attn_impl: str = "fused",
    ) -> None:
        super().__init__()
        check_choice("attn_impl", attn_impl, ATTN_IMPLS)
        check_choice("fusion", fusion, FUSIONS)
        check_choice("cam_logits", cam_logits, CAM_LOGITS)
        check_choice("record", record, RECORDS)
        inner = reduced_channels(channels, reduction)
        self.inner_channels = inner
        self.fusion, self.cam_logits, self.record = fusion, cam_logits, record
        self.attn_impl = attn_impl
        self.query = nn.Conv2d(channels, inner, 1)
        self.key = nn.Conv2d(channels, inner, 1)
        self.value = nn.Conv2d(channels, channels, 1)
        self.alpha = nn.Parameter(torch.zeros(1))
        self.beta = nn.Parameter(torch.zeros(1))

    def init_identity(self) -> None:
        """native: alpha and beta start at 0 (the paper's init); with fusion='mean' y = x."""
        if self.fusion != "mean":
            raise ValueError(
                "block 'danet': init='identity' needs option 'fusion'='mean' "
                f"(fusion={self.fusion!r} computes 2x at alpha = beta = 0)"
            )
        nn.init.zeros_(self.alpha)
        nn.init.zeros_(self.beta)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        n, c, h, w = x.shape
        capturing = False
        if not torch.jit.is_scripting():
            capturing = is_capturing(self)
        q = self.query(x).flatten(2).transpose(1, 2)  # (N, HW, d)
        k = self.key(x).flatten(2).transpose(1, 2)
        v = self.value(x).flatten(2).transpose(1, 2)  # (N, HW, C)
        # p[:, j] = sum_i s_ji v_i with s_ji = softmax_i(q_j . k_i), rows sum to 1
        p, s = softmax_attention(
            q,
            k,
            v,
            scale=1.0,
            need_weights=capturing and self.record == "position",
            fused=self.attn_impl == "fused",
        )

        a = x.flatten(2)  # (N, C, HW)
        # q_ch[:, j] = sum_i g_ji A_i with g_ji = softmax_i(A_j . A_i); the official code's
        # softmax_i(max_i'(A_j . A_i') - A_j . A_i) is the same softmax of -A_j . A_i
        q_ch, g = softmax_attention(
            -a if self.cam_logits == "negated" else a,
            a,
            a,
            scale=1.0,
            need_weights=capturing and self.record == "channel",
            fused=False,
        )

        if not torch.jit.is_scripting():  # noqa: SIM102 (TorchScript needs it alone)
            if capturing:  # a static test (fx, torch.compile): the weights exist exactly then
                if s is not None:
                    record_attention(self, s.mean(dim=1).reshape(n, 1, h, w))
                if g is not None:
                    record_attention(self, g.mean(dim=1).reshape(n, c, 1, 1))
        p = p.transpose(1, 2)  # (N, C, HW)
        t = (self.alpha * p + self.beta * q_ch).reshape(n, c, h, w)
        if self.fusion == "mean":
            return x + 0.5 * t
        return 2.0 * x + t

    def extra_repr(self) -> str:
        return (
            f"inner_channels={self.inner_channels}, fusion={self.fusion!r}, "
            f"cam_logits={self.cam_logits!r}, record={self.record!r}, attn_impl={self.attn_impl!r}"
        )
