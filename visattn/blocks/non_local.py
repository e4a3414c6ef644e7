"""Non-local block (Wang, Girshick, Gupta, He; CVPR 2018, "Non-local Neural Networks") with the
score functions, hard/soft selection and local windows of the attention taxonomy (scaled
dot-product attention: Vaswani et al., NeurIPS 2017; additive attention: Bahdanau, Cho, Bengio,
ICLR 2015; cosine attention: e.g. Liu et al., CVPR 2022).
"""

from __future__ import annotations

import torch
import torch.nn as nn
import torch.nn.functional as F

from ._attention import softmax_attention
from ._utils import check_choice, check_positive_int, reduced_channels
from .capture import is_capturing, record_attention
from .conventions import Reduced
from .registry import register_block

torch.fx.wrap("softmax_attention")

__all__ = ["NonLocal"]

SCORES = ("dot", "scaled_dot", "cosine", "additive", "gaussian")
SELECTIONS = ("soft", "topk")
RECORDS = ("received", "full")
SUBSAMPLE_ORDERS = ("after", "before")
SCALES = ("head", "channels")
COSINE_TEMPERATURE = 0.1


def _split_heads(t: torch.Tensor, heads: int) -> torch.Tensor:
    """``(N, h*d, H, W) -> (N, h, H*W, d)``."""
    # no -1 (N may be 0); shape entries one by one (TorchScript cannot unpack a list)
    return t.reshape(t.shape[0], heads, t.shape[1] // heads, t.shape[2] * t.shape[3]).transpose(
        -1, -2
    )


def window_mask(
    size: tuple[int, int],
    key_size: tuple[int, int],
    window: int,
    stride: int,
    device: torch.device | None = None,
) -> torch.Tensor:
    """Boolean ``(H*W, Hk*Wk)`` mask, True where query ``(i, j)`` may attend key ``(a, b)``.

    The query's position on the key grid is ``(i // stride, j // stride)``; it sees the keys
    with ``|a - i // stride| <= window // 2`` and ``|b - j // stride| <= window // 2``. Keys
    outside the map do not exist, so border queries simply see fewer keys.
    """
    (h, w), (hk, wk), half = size, key_size, window // 2
    rows = (torch.arange(h, device=device) // stride)[:, None] - torch.arange(hk, device=device)
    cols = (torch.arange(w, device=device) // stride)[:, None] - torch.arange(wk, device=device)
    rows, cols = rows.abs() <= half, cols.abs() <= half  # (H, Hk), (W, Wk)
    return (rows[:, None, :, None] & cols[None, :, None, :]).reshape(h * w, hk * wk)


def _keys_kept(k: int, keys: int) -> int:
    """``min(k, keys)``: top-k never asks for more keys than exist. A leaf for ``torch.fx``
    (``torch.fx.wrap`` below), where the number of keys is only known when the graph runs."""
    return min(k, keys)


torch.fx.wrap("_keys_kept")


def _inner_width(
    channels: int, reduction: float, inner_channels: int | None, heads: int, score: str
) -> int:
    """The inner channels (``inner_channels``, else ``C // reduction``), checked against the
    heads they are split into (and ``C`` too for ``gaussian``, which splits the raw input)."""
    if inner_channels is not None:
        if reduction != 2:
            raise ValueError("give either option 'inner_channels' or 'reduction', not both")
        check_positive_int("inner_channels", inner_channels)
        inner = inner_channels
    else:
        inner = reduced_channels(channels, reduction)
    if inner % heads:
        raise ValueError(
            f"option 'heads'={heads} must divide the inner channels ({inner}); "
            "change 'heads', 'reduction' or 'inner_channels'"
        )
    if score == "gaussian" and channels % heads:
        raise ValueError(
            f"option 'heads'={heads} must divide channels={channels} for score='gaussian' "
            "(the raw input is split into heads)"
        )
    return inner


def _check_selection(selection: str, k: int | None) -> None:
    """``k`` is given exactly for ``topk`` selection, and positive."""
    if selection == "topk":
        if k is None:
            raise ValueError("option 'k' is required for selection='topk'")
        check_positive_int("k", k)
    elif k is not None:
        raise ValueError("option 'k' only applies to selection='topk'")


def _temperature(score: str, temperature: float | None) -> float:
    """The divisor of the scores: ``temperature`` (positive), else 0.1 for ``cosine``, 1
    otherwise."""
    if temperature is None:
        return COSINE_TEMPERATURE if score == "cosine" else 1.0
    if isinstance(temperature, bool) or not isinstance(temperature, int | float):
        raise ValueError(f"option 'temperature' must be a positive number, got {temperature!r}")
    if not temperature > 0:  # NaN too
        raise ValueError(f"option 'temperature' must be a positive number, got {temperature!r}")
    return float(temperature)


@register_block(
    "nonlocal",
    family="spatial",
    paper="Wang et al., CVPR 2018",
    reduced=Reduced(width="inner_channels"),
)
class NonLocal(nn.Module):
    r"""Non-local block with configurable attention.

    $$
    y_i = \sum_j a(q_i, k_j) \, v_j, \qquad
    a(q_i, k_j) = \operatorname{softmax}_j \frac{q_i^{\top} k_j}{\sqrt{d}}, \qquad
    z_i = x_i + W_z \, y_i
    $$

    Follows Eqs. (1) and (6) of Wang et al. (2018)::

        y_i = sum_j a(q_i, k_j) v_j,     z_i = x_i + W_z y_i

    with ``q = theta(x)``, ``k = phi(x)``, ``v = g(x)`` 1x1 convolutions to ``inner_channels``
    (``C // 2`` by default, as in the paper), split into ``heads`` heads of ``d`` channels each.
    ``W_z`` is a 1x1 convolution followed by BatchNorm whose scale starts at zero (the paper's
    initialisation; with ``norm=False`` the convolution's weight and bias start at zero), so the
    block starts as the identity.

    Scores ``s_ij`` (option ``score``):

    * ``dot``: ``q_i . k_j``; with softmax this is the paper's *embedded Gaussian* (Eq. 3),
    * ``scaled_dot`` (default): ``q_i . k_j / sqrt(d)`` (Vaswani et al., 2017, Eq. 1); with
      ``scale_by="channels"``, ``q_i . k_j / sqrt(C)`` by the input width ``C`` instead (timm's
      ``NonLocalAttn``, after the BAT authors' non-local code),
    * ``cosine``: ``cos(q_i, k_j) / temperature`` (``temperature`` defaults to 0.1, fixed),
    * ``additive``: ``w^T tanh(q_i + k_j)`` (Bahdanau et al., 2015, App. A.1.2; ``theta`` and
      ``phi`` play the roles of ``W_q`` and ``W_k``; ``w`` is a learned vector of ``d`` per head).
      Memory is ``O(N * HW * HWk * d)``: use it on small maps or with ``subsample``,
    * ``gaussian``: the paper's plain *Gaussian* (Eq. 2), ``x_i . x_j`` on the raw input, no
      ``theta``/``phi`` (not created) and no scaling; with heads, ``x``'s channels are split.
      Unscaled raw scores grow with ``C`` and the softmax saturates towards hard attention; the
      paper uses this variant as an ablation only (Table 2a).

    ``temperature`` (if given) divides any score; ``None`` means 1, or 0.1 for ``cosine``.
    The paper's normalisation by ``1/N`` (its "dot product" and "concatenation" variants) is not
    offered: weights are always a softmax.

    Selection (option ``selection``):

    * ``soft`` (default): ``a_ij = softmax_j(s_ij)`` over all keys the query may see,
    * ``topk``: hard attention; only the ``k`` highest-scoring keys of each query are kept and
      ``a_ij = softmax`` over those (zero elsewhere), so ``k=1`` attends to the arg-max key only.
      Gradients flow through the kept scores. A ``k`` larger than the number of keys is clamped to
      it (``topk`` then equals ``soft``); keys masked out by ``window`` always get weight 0.

    ``window`` (odd int) gives local attention: a query sees only the keys within a
    ``window x window`` neighbourhood (counted on the key grid, see ``subsample``), implemented by
    masking the full score matrix, so memory stays ``O(HW * HWk)`` as for global attention.
    ``subsample`` ``s > 1`` max-pools keys and values with kernel and stride ``s`` (the paper's
    "sub-sampling" trick, Sec. 3.3, ``s=2``; ``ceil_mode`` so odd sizes keep their border).
    ``subsample_order`` says where the pooling sits:

    * ``after`` (default, the paper's text, Sec. 3.3 / Fig. 2: "a max pooling layer after phi
      and g"): ``phi`` and ``g`` run at full resolution and their outputs are pooled;
    * ``before`` (the official code, facebookresearch/video-nonlocal-net, whose ResNet configs
      subsample by default): the *input* is max-pooled once and ``phi`` and ``g`` run on the
      pooled map, which costs ``s**2`` times fewer multiply-adds in those two convolutions. Max
      pooling does not commute with a 1x1 convolution, so the two orders give different
      functions of the same weights.

    ``subsample_order`` has no effect with ``subsample=1``. No named visattn model places
    ``nonlocal``; a placement that wants the official behaviour passes
    ``{"subsample": 2, "subsample_order": "before"}``.

    Recorded attention (option ``record``):

    * ``received`` (default): ``(N, 1, H, W)``, the attention each position *receives*: the
      weights averaged over queries and heads (so the key grid sums to 1), repeated over the
      ``s x s`` block each subsampled key covers. Shaped like a spatial gate, so pictures and
      localisation metrics work on it.
    * ``full``: the weights ``(N, heads, H*W, Hk*Wk)`` themselves (rows index queries, columns
      keys, both row-major).

    With soft selection and a dot-product-type score (``dot``, ``scaled_dot``, ``cosine``,
    ``gaussian``) the attention runs through visattn's softmax-attention primitive: by default
    ``F.scaled_dot_product_attention`` (same function, no ``HW x HWk`` weights kept for
    backward), and while ``capture_attention`` is active or with ``record="full"`` the weights
    written out in float32 so they can be recorded. ``topk`` and ``additive`` always compute the
    weights explicitly.

    Shapes: ``(N, C, H, W) -> (N, C, H, W)``.

    Parameters (default options, ``d = C // 2``): ``4 * C * d + 3 * d + 2 * C``
    (``theta``, ``phi``, ``g`` with bias; ``W_z`` without bias; BatchNorm). Without BatchNorm
    ``W_z`` has a bias: ``4 * C * d + 3 * d + C``. ``gaussian`` drops ``2 * (C * d + d)``,
    ``additive`` adds ``d``.

    Args:
        channels: input channels ``C``.
        reduction: ``inner_channels = C // reduction`` (2 in the paper).
        inner_channels: explicit inner channels (do not combine with a non-default ``reduction``).
        score: ``dot`` | ``scaled_dot`` | ``cosine`` | ``additive`` | ``gaussian``.
        heads: number of heads; must divide the inner channels (and ``C`` for ``gaussian``).
        selection: ``soft`` | ``topk``.
        k: keys kept per query for ``selection="topk"`` (required there, refused otherwise).
        window: ``None`` for global attention, or an odd neighbourhood size.
        subsample: key/value max-pool stride (1 = none).
        subsample_order: ``after`` (pool phi(x), g(x); the paper) | ``before`` (pool x, then
            phi, g; the official code).
        temperature: divides the scores (see above).
        scale_by: the width ``scaled_dot`` divides by the root of: ``head`` (``d``) or
            ``channels`` (the input's ``C``).
        norm: BatchNorm after ``W_z`` (paper) with zero-initialised scale.
        record: what :func:`visattn.capture_attention` receives, ``received`` | ``full``.
        z_bias: a bias in ``W_z`` (default: only without ``norm``, where the BN's shift is the
            bias; timm's ``NonLocalAttn`` has both, its alias ``nl`` sets it).
    """

    def __init__(
        self,
        channels: int,
        reduction: float = 2,
        inner_channels: int | None = None,
        score: str = "scaled_dot",
        heads: int = 1,
        selection: str = "soft",
        k: int | None = None,
        window: int | None = None,
        subsample: int = 1,
        subsample_order: str = "after",
        temperature: float | None = None,
        norm: bool = True,
        record: str = "received",
        scale_by: str = "head",
        z_bias: bool | None = None,
    ) -> None:
        super().__init__()
        check_choice("score", score, SCORES)
        check_choice("scale_by", scale_by, SCALES)
        check_choice("selection", selection, SELECTIONS)
        check_choice("record", record, RECORDS)
        check_choice("subsample_order", subsample_order, SUBSAMPLE_ORDERS)
        check_positive_int("heads", heads)
        check_positive_int("subsample", subsample)
        inner = _inner_width(channels, reduction, inner_channels, heads, score)
        _check_selection(selection, k)
        if window is not None:
            check_positive_int("window", window, odd=True)

        self.inner_channels, self.heads = inner, heads
        self.score, self.selection, self.k = score, selection, k
        self.window, self.subsample = window, subsample
        self.temperature = _temperature(score, temperature)
        self.record = record
        self.subsample_order = subsample_order
        # the root scaled_dot divides by: the head depth, or the input width (scale_by)
        self.scale_width = inner // heads if scale_by == "head" else channels
        self._make_layers(channels, norm, (not norm) if z_bias is None else bool(z_bias))
        self.reset_identity()

    def _make_layers(self, channels: int, norm: bool, z_bias: bool) -> None:
        """``theta``, ``phi`` (none for ``gaussian``), ``g``, the additive score vector (only
        for ``additive``), ``W_z`` and its norm."""
        inner, heads = self.inner_channels, self.heads
        if self.score == "gaussian":
            self.theta = self.phi = None
        else:
            self.theta = nn.Conv2d(channels, inner, 1)
            self.phi = nn.Conv2d(channels, inner, 1)
        self.g = nn.Conv2d(channels, inner, 1)
        if self.score == "additive":
            d = inner // heads
            self.score_vector = nn.Parameter(torch.empty(heads, d).uniform_(-(d**-0.5), d**-0.5))
        else:
            self.score_vector = None
        self.w_z = nn.Conv2d(inner, channels, 1, bias=z_bias)
        self.norm = nn.BatchNorm2d(channels) if norm else nn.Identity()

    def init_identity(self) -> None:
        """native: W_z's BN scale (W_z itself with norm=False) starts at zero, as in the paper."""
        self.reset_identity()

    def reset_identity(self) -> None:
        """Zero the output transform so the block computes the identity (the paper's init)."""
        if isinstance(self.norm, nn.BatchNorm2d):
            nn.init.zeros_(self.norm.weight)
            nn.init.zeros_(self.norm.bias)
        else:
            nn.init.zeros_(self.w_z.weight)
            nn.init.zeros_(self.w_z.bias)

    def zero_init_last(self) -> None:
        """timm's hook: timm ResNets call it after their own weight init; keeps the identity."""
        self.reset_identity()

    def _pool(self, t: torch.Tensor) -> torch.Tensor:
        s = self.subsample
        return t if s == 1 else F.max_pool2d(t, s, s, ceil_mode=True)

    def _scores(self, q: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
        """``(N, h, HW, d), (N, h, HWk, d) -> (N, h, HW, HWk)``."""
        w = self.score_vector  # set exactly for score="additive" (a None test TorchScript folds)
        if w is not None:
            e = torch.tanh(q.unsqueeze(-2) + k.unsqueeze(-3))  # (N, h, HW, HWk, d)
            s = torch.einsum("nhqkd,hd->nhqk", e, w.to(e.dtype))
        elif self.score == "cosine":
            s = F.normalize(q, dim=-1) @ F.normalize(k, dim=-1).transpose(-1, -2)
        else:  # dot, scaled_dot, gaussian
            s = q @ k.transpose(-1, -2)
            if self.score == "scaled_dot":
                s = s * self.scale_width**-0.5
        return s if self.temperature == 1.0 else s / self.temperature

    def _softmax_of_dot(self) -> bool:
        """Soft selection with a dot-product-type score: ``softmax(q k^T s) v`` with a mask, the
        softmax-attention primitive's form."""
        return self.selection == "soft" and self.score != "additive"

    def _select(self, s: torch.Tensor) -> torch.Tensor:
        k = self.k  # None exactly for selection="soft" (checked in __init__)
        if k is None:
            return torch.softmax(s, dim=-1)
        top, idx = s.topk(_keys_kept(k, s.shape[-1]), dim=-1)
        return torch.zeros_like(s).scatter(-1, idx, torch.softmax(top, dim=-1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        n, h, w = x.shape[0], x.shape[2], x.shape[3]
        if self.subsample_order == "before":  # official code: pool the input, then phi and g
            xp = self._pool(x)
            v = self.g(xp)
            if self.theta is None or self.phi is None:  # gaussian: raw input
                k = xp
            else:
                k = self.phi(xp)
        else:  # the paper: phi and g at full resolution, then pool
            v = self._pool(self.g(x))
            if self.theta is None or self.phi is None:
                k = self._pool(x)
            else:
                k = self._pool(self.phi(x))
        hk, wk = v.shape[2], v.shape[3]
        if self.theta is None or self.phi is None:
            q = x
        else:
            q = self.theta(x)
        heads = self.heads
        q, k, v = _split_heads(q, heads), _split_heads(k, heads), _split_heads(v, heads)
        allowed: torch.Tensor | None = None
        if self.window is not None:
            allowed = window_mask((h, w), (hk, wk), self.window, self.subsample, x.device)
        capturing = False
        if not torch.jit.is_scripting():
            capturing = is_capturing(self)
        if self._softmax_of_dot():
            if self.score == "cosine":
                q, k = F.normalize(q, dim=-1), F.normalize(k, dim=-1)
            scaled = self.score == "scaled_dot"
            scale = (self.scale_width**-0.5 if scaled else 1.0) / self.temperature
            y, a = softmax_attention(
                q, k, v, scale=scale, bias=allowed, need_weights=capturing or self.record == "full"
            )
            y = y.transpose(-1, -2).reshape(n, self.inner_channels, h, w)
            if not torch.jit.is_scripting():  # noqa: SIM102 (TorchScript needs it alone)
                if (capturing or self.record == "full") and a is not None:
                    self._record(a, n, h, w, hk, wk)
            return x + self.norm(self.w_z(y.to(x.dtype)))
        s = self._scores(q, k)
        if allowed is not None:
            s = s.masked_fill(~allowed, float("-inf"))
        a = self._select(s)  # (N, heads, HW, HWk)
        y = (a.to(v.dtype) @ v).transpose(-1, -2).reshape(n, self.inner_channels, h, w)
        if not torch.jit.is_scripting():  # noqa: SIM102 (TorchScript needs it alone)
            if capturing or self.record == "full":
                self._record(a, n, h, w, hk, wk)
        return x + self.norm(self.w_z(y))

    def _record(self, a: torch.Tensor, n: int, h: int, w: int, hk: int, wk: int) -> None:
        """Record the weights ``a`` ``(N, heads, HW, HWk)``, or the attention received."""
        if self.record == "full":
            record_attention(self, a)
            return
        received = a.mean(dim=(1, 2)).reshape(n, 1, hk, wk)  # a pass over all weights
        if self.subsample > 1:
            s_ = self.subsample
            received = received.repeat_interleave(s_, 2).repeat_interleave(s_, 3)[..., :h, :w]
        record_attention(self, received)

    def extra_repr(self) -> str:
        return (
            f"inner_channels={self.inner_channels}, heads={self.heads}, score={self.score!r}, "
            f"selection={self.selection!r}, k={self.k}, window={self.window}, "
            f"subsample={self.subsample}, subsample_order={self.subsample_order!r}, "
            f"temperature={self.temperature}"
        )
