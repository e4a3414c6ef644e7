"""External attention (Guo, Liu, Mu, Hu; arXiv 2105.02358, 2021, later IEEE TPAMI, "Beyond
Self-attention: External Attention using Two Linear Layers for Visual Tasks")."""

from __future__ import annotations

import torch
import torch.nn as nn
from timm.layers import register_notrace_function

from ._attention import float32_region, widen
from ._utils import check_choice, check_positive_int
from .capture import is_capturing, record_attention
from .registry import register_block

__all__ = ["ExternalAttention", "double_normalisation"]

FORMS = ("paper", "official")
EPS = 1e-9  # guards the l1 normalisation (the official code's constant)


@register_notrace_function  # timm's FX feature path: one leaf call
def double_normalisation(logits: torch.Tensor, eps: float) -> tuple[torch.Tensor, torch.Tensor]:
    """``(a, a^)`` from ``a~`` ``(N, S, HW)``: ``a^`` the softmax over the positions, ``a`` its l1
    normalisation over the ``S`` memory units (``/ (eps + sum)``).

    Float32 (float64 stays float64) with autocast off: in float16 the softmax underflows to 0 at
    moderate activations and the l1 step divides 0 by ``eps`` = 0.
    """
    if torch.jit.is_scripting():
        return _double_normalisation(logits, eps)
    with float32_region(logits):
        return _double_normalisation(widen(logits), eps)


torch.fx.wrap("double_normalisation")


def _double_normalisation(logits: torch.Tensor, eps: float) -> tuple[torch.Tensor, torch.Tensor]:
    over_positions = torch.softmax(logits, dim=-1)
    return over_positions / (eps + over_positions.sum(dim=1, keepdim=True)), over_positions


@register_block("external", family="spatial", paper="Guo et al., arXiv 2021")
class ExternalAttention(nn.Module):
    """External attention with double normalisation.

    Sec. 3 of the paper (and its Algorithm 1), with ``F = W_q X`` (1x1 conv ``C -> C`` with bias,
    the algorithm's query linear layer) as ``(HW, C)`` and two learnable memories ``M_k``,
    ``M_v`` of ``S`` units (linear layers without bias)::

        a~_ij = F_i . M_k,j                                  (HW x S)
        a^_ij = exp(a~_ij) / sum_i' exp(a~_i'j)              softmax over the positions i
        a_ij  = a^_ij / sum_j' a^_ij'                        l1 norm over the memory units j
        Y = X + A M_v

    ``S = 64`` as in the paper. The paper replaces self-attention inside residual networks;
    visattn keeps that residual connection (``Y = X + ...``), like its non-local block. The l1
    normalisation divides by ``eps + sum`` with ``eps = 1e-9`` (the official code's guard). Both
    normalisations run in float32 under autocast (:func:`double_normalisation`).

    ``form="official"`` is the official segmentation block (``MenghaoGuo/EANet``): it adds a
    1x1 conv (no bias) and BatchNorm after ``M_v``, and a ReLU after the addition,
    ``Y = ReLU(X + BN(W_o A M_v))``; ``M_v`` starts as a copy of ``M_k`` transposed.
    Its trailing ReLU means it cannot start as the identity: ``init='identity'`` needs
    ``form='paper'``.

    Recorded attention: ``(N, 1, H, W)``, the attention each position *receives*: the first
    normalisation ``a^`` (a distribution over positions for each memory unit) averaged over the
    ``S`` units, so each map sums to 1.

    Shapes: ``(N, C, H, W) -> (N, C, H, W)``; memory ``O(N S HW)``.

    Parameters (default options): ``C^2 + C + 2 S C`` (``W_q``; ``M_k``, ``M_v``). Official form:
    ``2 C^2 + 3 C + 2 S C`` (adds ``W_o`` and BN).

    Args:
        channels: input channels ``C``.
        memory_units: ``S`` (64 in the paper).
        form: ``paper`` | ``official``.
    """

    def __init__(self, channels: int, memory_units: int = 64, form: str = "paper") -> None:
        super().__init__()
        check_positive_int("memory_units", memory_units)
        check_choice("form", form, FORMS)
        self.memory_units, self.form, self.eps = memory_units, form, EPS
        self.query = nn.Conv2d(channels, channels, 1)
        self.mk = nn.Conv2d(channels, memory_units, 1, bias=False)
        self.mv = nn.Conv2d(memory_units, channels, 1, bias=False)
        if form == "official":
            with torch.no_grad():
                self.mv.weight.copy_(self.mk.weight.transpose(0, 1))
            self.out = nn.Sequential(
                nn.Conv2d(channels, channels, 1, bias=False), nn.BatchNorm2d(channels)
            )
        else:
            self.out = nn.Identity()

    def init_identity(self) -> None:
        """native: the value memory M_v starts at zero, so Y = X + 0 (form='paper' only)."""
        if self.form != "paper":
            raise ValueError(
                "block 'external': init='identity' needs option 'form'='paper' "
                "(the official form ends in a ReLU)"
            )
        nn.init.zeros_(self.mv.weight)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        n, _, h, w = x.shape
        logits = self.mk(self.query(x)).flatten(2)  # (N, S, HW)
        attn, over_positions = double_normalisation(logits, self.eps)
        if not torch.jit.is_scripting():  # noqa: SIM102 (TorchScript needs it alone)
            if is_capturing(self):
                record_attention(self, over_positions.mean(dim=1).reshape(n, 1, h, w))
        y = self.out(self.mv(attn.reshape(n, self.memory_units, h, w).to(x.dtype)))
        if self.form == "official":
            return torch.relu(x + y)
        return x + y

    def extra_repr(self) -> str:
        return f"memory_units={self.memory_units}, form={self.form!r}"
