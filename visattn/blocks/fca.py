"""Multi-spectral channel attention of FcaNet (Qin, Zhang, Wu, Li; ICCV 2021, "FcaNet: Frequency
Channel Attention Networks")."""

from __future__ import annotations

import math
import re

import torch
import torch.nn as nn
import torch.nn.functional as F

from ._utils import check_choice, get_layer, reduced_channels
from .capture import record_attention
from .registry import register_block

# The paper's frequency rankings on a 7x7 grid, as (u, v) digit pairs (u: along H, v: along W),
# best first. "top": ranked by the ImageNet accuracy of a single-frequency model (the paper's
# Fig. 4); "bot": worst first; "low": lowest frequencies first. Same order as the official code.
_RANKINGS = {
    "top": "00 01 60 05 02 10 12 40 50 16 30 04 06 03 35 22 "
    "46 63 33 53 55 21 61 52 54 32 31 41 23 20 65 13",
    "low": "00 01 10 11 02 20 21 12 22 03 30 40 04 13 31 05 "
    "14 23 32 41 50 06 15 24 33 42 51 60 16 25 34 43",
    "bot": "66 14 34 36 26 43 11 24 44 45 56 15 42 62 25 51 "
    "64 13 65 20 23 41 31 32 54 52 61 21 55 53 33 63",
}
_FREQ_SEL = re.compile(r"(top|low|bot)(1|2|4|8|16|32)")


def frequency_indices(freq_sel: str) -> list[tuple[int, int]]:
    """The ``(u, v)`` indices on the 7x7 grid that ``freq_sel`` (e.g. ``"top16"``) selects."""
    m = _FREQ_SEL.fullmatch(freq_sel) if isinstance(freq_sel, str) else None
    if m is None:
        raise ValueError(
            "option 'freq_sel' must be 'top', 'low' or 'bot' followed by 1, 2, 4, 8, 16 or 32 "
            f"(e.g. 'top16'), got {freq_sel!r}"
        )
    pairs = _RANKINGS[m.group(1)].split()[: int(m.group(2))]
    return [(int(p[0]), int(p[1])) for p in pairs]


@torch.fx.wrap
def _dct_basis(freq: torch.Tensor, length: int, ortho: bool) -> torch.Tensor:
    """1-D DCT-II basis rows ``cos(pi f (i + 1/2) / L)``, ``(C,) -> (C, L)``, for frequencies
    ``freq`` given on the 7-point grid and mapped to ``L`` points as ``floor(f L / 7)``.
    ``ortho`` scales each row by ``sqrt(1/L)`` (f = 0) or ``sqrt(2/L)`` (orthonormal DCT)."""
    f = torch.div(freq * length, 7, rounding_mode="floor")  # 7: the rankings' grid
    pos = torch.arange(length, dtype=freq.dtype, device=freq.device) + 0.5
    basis = torch.cos(f[:, None] * pos[None, :] * (math.pi / length))
    if ortho:
        scale = ((f != 0).to(freq.dtype) + 1.0).div(length).sqrt()  # sqrt(1/L) or sqrt(2/L)
        basis = basis * scale[:, None]
    return basis


@torch.fx.wrap
def _pool_to(x: torch.Tensor, size: list[int]) -> torch.Tensor:
    """Adaptive average pooling to ``size`` (the official code's fixed DCT size), skipped when the
    input already has it."""
    if x.shape[2] == size[0] and x.shape[3] == size[1]:
        return x
    return F.adaptive_avg_pool2d(x, size)


@register_block("fca", family="channel", paper="Qin et al., ICCV 2021")
class FcaAttention(nn.Module):
    """FcaNet's multi-spectral channel attention: SE with 2-D DCT frequency pooling.

    Follows Eqs. (6)-(8) of the paper. The ``C`` channels are split into ``n`` parts along the
    channel axis, one per selected frequency ``(u_k, v_k)``; channel ``c`` of part ``k`` is
    compressed to ``Freq_c = sum_{i,j} x_c(i, j) B^{u_k, v_k}_{i, j}`` with the 2-D DCT basis
    ``B^{u,v}_{i,j} = cos(pi u (i + 1/2) / H) cos(pi v (j + 1/2) / W)`` (Eq. (1); ``(0, 0)`` gives
    ``HW`` times global average pooling, so SE is the one-frequency case). Then
    ``att = sigmoid(W2 ReLU(W1 Freq))`` (``W1: C -> C/r``, ``W2: C/r -> C``, no bias, as in the
    official code) and ``y = att * x``.

    Frequencies: ``freq_sel`` is the paper's selection (``top``/``low``/``bot`` with 1, 2, 4, 8, 16
    or 32 components; ``top16`` is the paper's choice), ranked on a 7x7 grid. On an ``S``-point
    axis the index ``u`` becomes ``floor(u S / 7)``: the same physical frequency at ``S`` = 7, 14,
    28, 56 (where it equals the official ``u * (S // 7)``), and always inside ``[0, S)``; on a
    1-point axis every component is the mean.

    Sizes: by default the DCT filters are built for the input's own ``H x W`` on every call
    (separable: ``C (H + W)`` cosines, then their ``(C, H, W)`` products), so the block runs
    at any size, 1x1 and 8x13 included.
    ``dct_size=(h, w)`` (or an int) reproduces the official layer, which holds filters for one
    fixed size (56, 28, 14, 7 in the ResNet stages) and adaptively average-pools inputs of any
    other size to it first.

    Channel split: when ``n`` does not divide ``C`` channel ``c`` takes frequency
    ``floor(c n / C)`` (parts differ by at most one channel; equal to the official equal split
    when ``n`` divides ``C``, which the official code requires). ``C < n`` is an error.

    ``dct_norm="ortho"`` (default) is the official filters' orthonormal DCT (rows scaled by
    ``sqrt(1/S)`` for frequency 0, ``sqrt(2/S)`` otherwise), which keeps ``Freq`` on the scale of
    the input; ``"none"`` is the basis as written in Eq. (1), whose unscaled sums grow with
    ``H W``: on a 56x56 post-ReLU map at C=256 nearly every gate of a fresh block starts
    saturated (below 0.01 or above 0.99), none with the orthonormal DCT.

    Identity at init: the generic wrapper. The SE-style form (``W2 = 0``, gate ``2 sigmoid``) is
    exact, but with no biases nothing learns whenever every hidden ReLU is off for the batch,
    which is likely for small ``C / r`` (2 hidden units at C=32).

    Shapes: ``(N, C, H, W) -> (N, C, H, W)``; attention map ``(N, C, 1, 1)``.

    Parameters (default options, ``C_r = C // 16``): ``2 C C_r`` (two bias-free FC layers; the DCT
    filters are computed, not stored).

    Args:
        channels: input channels ``C`` (at least the number of selected frequencies).
        reduction: FC ratio ``r``.
        freq_sel: ``"top16"`` etc., see above.
        dct_size: ``None`` (filters for the input size) or a fixed ``(h, w)``/int with adaptive
            pooling (official).
        dct_norm: ``"ortho"`` (official, default) or ``"none"`` (Eq. (1) as written).
        act_layer: hidden activation (name or class), ReLU in the paper.
        gate_layer: gate (name or class), sigmoid in the paper.
    """

    def __init__(
        self,
        channels: int,
        reduction: float = 16,
        freq_sel: str = "top16",
        dct_size: int | tuple[int, int] | None = None,
        dct_norm: str = "ortho",
        act_layer: str | type[nn.Module] = "relu",
        gate_layer: str | type[nn.Module] = "sigmoid",
    ) -> None:
        super().__init__()
        freqs = frequency_indices(freq_sel)
        if channels < len(freqs):
            raise ValueError(
                f"option 'freq_sel'={freq_sel!r} selects {len(freqs)} frequencies, more than the "
                f"{channels} channels"
            )
        check_choice("dct_norm", dct_norm, ("none", "ortho"))
        self.freq_sel = freq_sel
        self.dct_size = _check_size(dct_size)
        self.ortho = dct_norm == "ortho"
        part = [c * len(freqs) // channels for c in range(channels)]
        self.register_buffer("freq_h", torch.tensor([float(freqs[k][0]) for k in part]), False)
        self.register_buffer("freq_w", torch.tensor([float(freqs[k][1]) for k in part]), False)
        hidden = reduced_channels(channels, reduction)
        self.fc1 = nn.Linear(channels, hidden, bias=False)
        self.act = get_layer(act_layer, "act_layer")()
        self.fc2 = nn.Linear(hidden, channels, bias=False)
        self.gate = get_layer(gate_layer, "gate_layer")()

    def spectral_pool(self, x: torch.Tensor) -> torch.Tensor:
        """``Freq``: the selected 2-D DCT component of each channel, ``(N, C, H, W) -> (N, C)``."""
        if self.dct_size is not None:
            x = _pool_to(x, self.dct_size)
        # the (C, H, W) filters cost 1/N of the product; a 3-operand einsum ran 1.7x slower
        return (x * self.dct_filters(x.shape[2], x.shape[3], x.dtype)).sum((2, 3))

    def dct_filters(self, h: int, w: int, dtype: torch.dtype = torch.float32) -> torch.Tensor:
        """The 2-D DCT filter of each channel on an ``h x w`` map, ``(C, h, w)``: what the
        official code stores as its ``dct_layer.weight`` buffer."""
        fh, fw = self.freq_h.to(dtype), self.freq_w.to(dtype)
        bh = _dct_basis(fh, h, self.ortho)  # (C, H)
        bw = _dct_basis(fw, w, self.ortho)  # (C, W)
        return bh[:, :, None] * bw[:, None, :]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        n, c = x.shape[0], x.shape[1]
        att = self.gate(self.fc2(self.act(self.fc1(self.spectral_pool(x))))).view(n, c, 1, 1)
        if not torch.jit.is_scripting():
            record_attention(self, att)
        return x * att

    def extra_repr(self) -> str:
        return (
            f"freq_sel={self.freq_sel!r}, dct_size={self.dct_size}, "
            f"dct_norm={'ortho' if self.ortho else 'none'!r}"
        )


def _check_size(size: int | tuple[int, int] | list[int] | None) -> list[int] | None:
    if size is None:
        return None
    pair = [size, size] if isinstance(size, int) and not isinstance(size, bool) else size
    if (
        not isinstance(pair, (tuple, list))
        or len(pair) != 2
        or not all(isinstance(s, int) and not isinstance(s, bool) and s > 0 for s in pair)
    ):
        raise ValueError(
            f"option 'dct_size' must be None, a positive int or a pair of them, got {size!r}"
        )
    return [int(pair[0]), int(pair[1])]
