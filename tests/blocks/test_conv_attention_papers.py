"""gam, lsk, lska, mlca, scsa and caa against their papers and the authors' released code.

For each block with released code (LSKNet, LSKA, MLCA, SCSA, PKINet's CAA) a small reference is
written here in the layout of the authors' module, from reading their code; a visattn block
receives its weights and must give the same output in float64. GAM has no authors' code: its
reference recomputes the paper's equations (the MLP as a ``Linear`` on the permuted tensor).
Further checks: the receptive fields the papers state, the closed-form parameter counts of the
docstrings, the map each block records, ``init="identity"`` exactly, and errors that name the
block and the option.
"""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F
from helpers.reference import bn_eval, close, n_params, randn64, randomized, sigmoid
from helpers.weights import randomize

import visattn

NAMES = ("gam", "lsk", "lska", "mlca", "scsa", "caa")


def _load(blk: nn.Module, ref: nn.Module, rename: dict[str, str] | None = None) -> None:
    """Copy every parameter and buffer of ``ref`` into ``blk`` (names mapped by ``rename``
    prefixes); every tensor of ``blk`` must be covered."""
    state = {}
    for k, v in ref.state_dict().items():
        for old, new in (rename or {}).items():
            if k.startswith(old):
                k = new + k[len(old) :]
        state[k] = v
    blk.load_state_dict(state, strict=True)


def _receptive_field(blk: nn.Module, size: int = 41) -> tuple[int, int]:
    """Height and width of the input region that the output at the centre depends on."""
    x = torch.randn(1, blk_channels(blk), size, size, dtype=torch.float64, requires_grad=True)
    blk(x)[0, :, size // 2, size // 2].sum().backward()
    rows = (x.grad.abs().sum((0, 1, 3)) > 0).nonzero()
    cols = (x.grad.abs().sum((0, 1, 2)) > 0).nonzero()
    return int(rows.max() - rows.min() + 1), int(cols.max() - cols.min() + 1)


def blk_channels(blk: nn.Module) -> int:
    return next(m for m in blk.modules() if isinstance(m, nn.Conv2d)).in_channels


# ---------------------------------------------------------------------------------------- gam


def _gam_paper(blk, x: torch.Tensor, groups: int = 1) -> tuple[torch.Tensor, torch.Tensor]:
    """GAM's F2 = M_c(F1) F1, F3 = M_s(F2) F2 with the channel MLP on the permuted (N, H, W, C)
    tensor, as the paper draws it; returns the output and the applied weights M_c * M_s."""
    z = x.permute(0, 2, 3, 1)  # (N, H, W, C)
    w1, b1 = blk.fc1.weight.detach().flatten(1), blk.fc1.bias.detach()
    w2, b2 = blk.fc2.weight.detach().flatten(1), blk.fc2.bias.detach()
    mc = sigmoid(torch.relu(z @ w1.T + b1) @ w2.T + b2).permute(0, 3, 1, 2)
    f2 = mc * x
    t = F.conv2d(f2, blk.conv1.weight, blk.conv1.bias, padding=3, groups=groups)
    t = torch.relu(bn_eval(t, blk.bn1))
    if groups > 1:  # channel shuffle: new channel j is old channel (j % g) * (c / g) + j // g
        c = t.shape[1]
        t = t[:, [(j % groups) * (c // groups) + j // groups for j in range(c)]]
    ms = sigmoid(
        bn_eval(F.conv2d(t, blk.conv2.weight, blk.conv2.bias, padding=3, groups=groups), blk.bn2)
    )
    return ms * f2, mc * ms


@pytest.mark.parametrize("groups", [1, 2])
def test_gam_matches_its_equations_with_permuted_mlp_and_two_7x7_convs(groups: int) -> None:
    blk = randomized("gam", 16, groups=groups)
    x = randn64(2, 16, 6, 9)
    ref, weights = _gam_paper(blk, x, groups)
    with visattn.capture_attention(blk) as maps:
        y = blk(x)
    close(y, ref)
    close(maps[""], weights)
    assert maps[""].shape == (2, 16, 6, 9)


# ---------------------------------------------------------------------------------------- lsk


class _AuthorsLSKblock(nn.Module):
    """The spatial gating unit of zcablii/LSKNet (``LSKblock``), rewritten from its code: names,
    shapes and order of operations as there."""

    def __init__(self, dim: int) -> None:
        super().__init__()
        self.conv0 = nn.Conv2d(dim, dim, 5, padding=2, groups=dim)
        self.conv_spatial = nn.Conv2d(dim, dim, 7, padding=9, groups=dim, dilation=3)
        self.conv1 = nn.Conv2d(dim, dim // 2, 1)
        self.conv2 = nn.Conv2d(dim, dim // 2, 1)
        self.conv_squeeze = nn.Conv2d(2, 2, 7, padding=3)
        self.conv = nn.Conv2d(dim // 2, dim, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        a = self.conv0(x)
        b = self.conv_spatial(a)
        a, b = self.conv1(a), self.conv2(b)
        both = torch.cat([a, b], 1)
        agg = torch.cat([both.mean(1, keepdim=True), both.max(1, keepdim=True)[0]], 1)
        sig = torch.sigmoid(self.conv_squeeze(agg))
        return x * self.conv(a * sig[:, :1] + b * sig[:, 1:])


@pytest.mark.parametrize("size", [(9, 11), (30, 30), (3, 2)])
def test_lsk_equals_the_authors_lskblock_with_copied_weights(size) -> None:
    ref = randomize(_AuthorsLSKblock(16).double(), std=0.5).eval()
    blk = visattn.create_block("lsk", 16).double().eval()
    _load(blk, ref)
    x = randn64(2, 16, *size)
    with torch.no_grad():
        close(blk(x), ref(x))


def test_lsk_selection_weights_each_depth_per_position() -> None:
    """The selection: S = F(sum_i sigmoid(SA^_i) U~_i) and Y = X * S, recomputed from the parts."""
    blk = randomized("lsk", 8)
    x = randn64(2, 8, 7, 6)
    with torch.no_grad():
        u1 = F.conv2d(x, blk.conv0.weight, blk.conv0.bias, padding=2, groups=8)
        u2 = F.conv2d(
            u1, blk.conv_spatial.weight, blk.conv_spatial.bias, padding=9, dilation=3, groups=8
        )
        t1 = torch.einsum("oc,nchw->nohw", blk.conv1.weight.flatten(1), u1) + blk.conv1.bias.view(
            1, -1, 1, 1
        )
        t2 = torch.einsum("oc,nchw->nohw", blk.conv2.weight.flatten(1), u2) + blk.conv2.bias.view(
            1, -1, 1, 1
        )
        u = torch.cat([t1, t2], 1)
        sa = torch.stack([u.mean(1), u.amax(1)], 1)
        sel = sigmoid(F.conv2d(sa, blk.conv_squeeze.weight, blk.conv_squeeze.bias, padding=3))
        mix = sel[:, 0:1] * t1 + sel[:, 1:2] * t2
        s = torch.einsum("oc,nchw->nohw", blk.conv.weight.flatten(1), mix) + blk.conv.bias.view(
            1, -1, 1, 1
        )
        with visattn.capture_attention(blk) as maps:
            close(blk(x), x * s)
    close(maps[""], s)


def test_lsk_receptive_field_is_23_plus_the_squeeze_conv() -> None:
    """5x5 then 7x7 dilated 3 reach 23 (LSKNet's decomposition); the 7x7 selection conv reads
    the neighbours' selection inputs, adding 6: 29."""
    assert _receptive_field(randomized("lsk", 4)) == (29, 29)
    blk = randomized("lsk", 4)
    with torch.no_grad():
        blk.conv_squeeze.weight.zero_()  # selection constant: the kernels alone
    assert _receptive_field(blk) == (23, 23)


# --------------------------------------------------------------------------------------- lska

# the authors' table (k_size -> first kernel, dilated kernel, dilation), from their LSKA class
AUTHORS_LSKA = {
    7: (3, 3, 2),
    11: (3, 5, 2),
    23: (5, 7, 3),
    35: (5, 11, 3),
    41: (5, 13, 3),
    53: (5, 17, 3),
}


class _AuthorsLSKA(nn.Module):
    """``LSKA`` of StevenLauHKHK/Large-Separable-Kernel-Attention, rewritten from its code."""

    def __init__(self, dim: int, k_size: int) -> None:
        super().__init__()
        a, m, d = AUTHORS_LSKA[k_size]

        def dw(kh: int, kw: int, pad: tuple[int, int], dil: int = 1) -> nn.Conv2d:
            return nn.Conv2d(dim, dim, (kh, kw), padding=pad, groups=dim, dilation=dil)

        self.conv0h = dw(1, a, (0, (a - 1) // 2))
        self.conv0v = dw(a, 1, ((a - 1) // 2, 0))
        self.conv_spatial_h = dw(1, m, (0, d * (m - 1) // 2), d)
        self.conv_spatial_v = dw(m, 1, (d * (m - 1) // 2, 0), d)
        self.conv1 = nn.Conv2d(dim, dim, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        attn = self.conv_spatial_v(self.conv_spatial_h(self.conv0v(self.conv0h(x))))
        return x * self.conv1(attn)


@pytest.mark.parametrize("k", sorted(AUTHORS_LSKA))
def test_lska_equals_the_authors_lska_at_each_kernel_size(k: int) -> None:
    ref = randomize(_AuthorsLSKA(8, k).double(), std=0.5).eval()
    blk = visattn.create_block("lska", 8, kernel_size=k).double().eval()
    _load(blk, ref)
    x = randn64(2, 8, 12, 9)
    with torch.no_grad():
        close(blk(x), ref(x))
    assert _receptive_field(blk, size=61) == (k, k)  # d - 1 + d floor(k/d) = k


def test_lska_separable_pairs_equal_rank_one_2d_kernels() -> None:
    """LSKA's premise: each 1 x m / m x 1 pair is one m x m depthwise conv with the outer product
    of the two kernels (biases zero, where zero padding would otherwise differ at the border)."""
    blk = randomized("lska", 8, kernel_size=11)
    with torch.no_grad():
        for conv in (blk.conv0h, blk.conv_spatial_h):
            conv.bias.zero_()
        x = randn64(2, 8, 10, 13)
        k0 = blk.conv0v.weight[:, :, :, 0:1] * blk.conv0h.weight[:, :, 0:1, :]  # (C, 1, 3, 3)
        k1 = blk.conv_spatial_v.weight[:, :, :, 0:1] * blk.conv_spatial_h.weight[:, :, 0:1, :]
        z = F.conv2d(x, k0, blk.conv0v.bias, padding=1, groups=8)
        z = F.conv2d(z, k1, blk.conv_spatial_v.bias, padding=4, dilation=2, groups=8)
        a = torch.einsum("oc,nchw->nohw", blk.conv1.weight.flatten(1), z) + blk.conv1.bias.view(
            1, -1, 1, 1
        )
        with visattn.capture_attention(blk) as maps:
            close(blk(x), a * x)
    close(maps[""], a)


# --------------------------------------------------------------------------------------- mlca


class _AuthorsMLCA(nn.Module):
    """``MLCA`` of wandahangFY/MLCA, rewritten from its code (adaptive pools and the
    position-major flattening of the local grid as there, without the prints)."""

    def __init__(
        self,
        in_size: int,
        local_size: int = 5,
        gamma: int = 2,
        b: int = 1,
        local_weight: float = 0.5,
    ):
        super().__init__()
        t = int(abs(math.log(in_size, 2) + b) / gamma)
        k = t if t % 2 else t + 1
        self.local_size, self.local_weight = local_size, local_weight
        self.conv = nn.Conv1d(1, 1, k, padding=(k - 1) // 2, bias=False)
        self.conv_local = nn.Conv1d(1, 1, k, padding=(k - 1) // 2, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        s = self.local_size
        b, c, m, n = x.shape
        local = F.adaptive_avg_pool2d(x, s)
        glob = F.adaptive_avg_pool2d(local, 1)
        y_local = self.conv_local(local.view(b, c, -1).transpose(-1, -2).reshape(b, 1, -1))
        y_global = self.conv(glob.view(b, c, -1).transpose(-1, -2))
        att_local = y_local.reshape(b, s * s, c).transpose(-1, -2).reshape(b, c, s, s).sigmoid()
        att_global = F.adaptive_avg_pool2d(y_global.view(b, -1)[:, :, None, None].sigmoid(), [s, s])
        mixed = att_global * (1 - self.local_weight) + att_local * self.local_weight
        return x * F.adaptive_avg_pool2d(mixed, [m, n])


@pytest.mark.parametrize("size", [(16, 16), (9, 13), (5, 5), (3, 4), (1, 1), (40, 7)])
@pytest.mark.parametrize("channels", [16, 64])
def test_mlca_equals_the_authors_mlca_with_copied_weights(channels: int, size) -> None:
    ref = randomize(_AuthorsMLCA(channels).double(), std=0.5).eval()
    blk = visattn.create_block("mlca", channels).double().eval()
    _load(blk, ref)
    assert blk.kernel_size == ref.conv.kernel_size[0]
    x = randn64(2, channels, *size)
    with torch.no_grad():
        close(blk(x), ref(x))


def test_mlca_matches_its_equations_written_with_loops() -> None:
    """Local averages over PyTorch's adaptive bins, the 1-D conv along the position-major
    sequence, the mix and the un-pooling, each written out with Python loops."""
    blk = randomized("mlca", 4, local_size=2, local_weight=0.3, kernel_size=3)
    x = randn64(1, 4, 3, 5)
    s, c, h, w = 2, 4, 3, 5

    def bins(n_in: int, n_out: int) -> list[range]:
        return [range(i * n_in // n_out, -(-(i + 1) * n_in // n_out)) for i in range(n_out)]

    def conv1d(seq: list[torch.Tensor], k: torch.Tensor) -> list[torch.Tensor]:
        return [
            sum(k[t] * seq[i + t - 1] for t in range(3) if 0 <= i + t - 1 < len(seq))
            for i in range(len(seq))
        ]

    local = torch.zeros(c, s, s, dtype=x.dtype)
    for i, rows in enumerate(bins(h, s)):
        for j, cols in enumerate(bins(w, s)):
            local[:, i, j] = x[0][:, rows][:, :, cols].mean((1, 2))
    k_g, k_l = blk.conv.weight.detach().flatten(), blk.conv_local.weight.detach().flatten()
    a_g = torch.stack([sigmoid(v) for v in conv1d(list(local.mean((1, 2))), k_g)])
    seq = [local[ch, i, j] for i in range(s) for j in range(s) for ch in range(c)]
    a_l_seq = [sigmoid(v) for v in conv1d(seq, k_l)]
    a_l = torch.stack(a_l_seq).view(s, s, c).permute(2, 0, 1)
    mixed = 0.7 * a_g[:, None, None] + 0.3 * a_l
    a = torch.zeros(c, h, w, dtype=x.dtype)
    for i, rows in enumerate(bins(s, h)):
        for j, cols in enumerate(bins(s, w)):
            a[:, i, j] = mixed[:, rows][:, :, cols].mean((1, 2))
    with visattn.capture_attention(blk) as maps, torch.no_grad():
        close(blk(x)[0], x[0] * a)
    close(maps[""][0], a)


# --------------------------------------------------------------------------------------- scsa


class _AuthorsSCSA(nn.Module):
    """``SCSA`` of HZAI-ZJNU/SCSA with its defaults (average-pool down-sampling, sigmoid gates,
    no q/k/v bias, no dropout), rewritten from its code without mmcv and einops."""

    def __init__(self, dim: int, head_num: int, window_size: int = 7, kernels=(3, 5, 7, 9)) -> None:
        super().__init__()
        self.head_num, self.head_dim, self.group_chans = head_num, dim // head_num, dim // 4
        g = self.group_chans
        self.local_dwc = nn.Conv1d(g, g, kernels[0], padding=kernels[0] // 2, groups=g)
        self.global_dwc_s = nn.Conv1d(g, g, kernels[1], padding=kernels[1] // 2, groups=g)
        self.global_dwc_m = nn.Conv1d(g, g, kernels[2], padding=kernels[2] // 2, groups=g)
        self.global_dwc_l = nn.Conv1d(g, g, kernels[3], padding=kernels[3] // 2, groups=g)
        self.norm_h, self.norm_w = nn.GroupNorm(4, dim), nn.GroupNorm(4, dim)
        self.norm = nn.GroupNorm(1, dim)
        self.q = nn.Conv2d(dim, dim, 1, bias=False, groups=dim)
        self.k = nn.Conv2d(dim, dim, 1, bias=False, groups=dim)
        self.v = nn.Conv2d(dim, dim, 1, bias=False, groups=dim)
        self.down_func = (
            nn.AdaptiveAvgPool2d(1) if window_size == -1 else nn.AvgPool2d(window_size, window_size)
        )

    def _convs(self, t: torch.Tensor) -> torch.Tensor:
        a, b, c, d = torch.split(t, self.group_chans, dim=1)
        return torch.cat(
            (self.local_dwc(a), self.global_dwc_s(b), self.global_dwc_m(c), self.global_dwc_l(d)),
            dim=1,
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, c, h, w = x.shape
        x_h = torch.sigmoid(self.norm_h(self._convs(x.mean(dim=3)))).view(b, c, h, 1)
        x_w = torch.sigmoid(self.norm_w(self._convs(x.mean(dim=2)))).view(b, c, 1, w)
        x = x * x_h * x_w
        y = self.norm(self.down_func(x))
        hn, hd = self.head_num, self.head_dim
        q, k, v = (f(y).reshape(b, hn, hd, -1) for f in (self.q, self.k, self.v))
        attn = (q @ k.transpose(-2, -1) * hd**-0.5).softmax(dim=-1) @ v
        return torch.sigmoid(attn.reshape(b, c, -1).mean(-1)[:, :, None, None]) * x


SCSA_RENAME = {
    "local_dwc.": "dwc.0.",
    "global_dwc_s.": "dwc.1.",
    "global_dwc_m.": "dwc.2.",
    "global_dwc_l.": "dwc.3.",
}


@pytest.mark.parametrize(
    "heads, window, size",
    [(1, 7, (14, 21)), (1, 7, (16, 9)), (4, 7, (7, 7)), (2, 0, (5, 6)), (1, 3, (10, 8))],
)
def test_scsa_equals_the_authors_scsa_with_copied_weights(heads: int, window: int, size) -> None:
    ref = randomize(_AuthorsSCSA(16, heads, -1 if window == 0 else window).double(), std=0.5).eval()
    blk = visattn.create_block("scsa", 16, heads=heads, window=window).double().eval()
    _load(blk, ref, SCSA_RENAME)
    x = randn64(2, 16, *size)
    with torch.no_grad():
        close(blk(x), ref(x))


def test_scsa_pools_a_map_smaller_than_its_window_whole() -> None:
    """Below 7x7 the authors' AvgPool2d(7, 7) has no output; visattn pools the short side whole,
    which equals their global pooling (window_size=-1) when both sides are short."""
    ref = randomize(_AuthorsSCSA(16, 1, -1).double(), std=0.5).eval()
    blk = visattn.create_block("scsa", 16).double().eval()
    _load(blk, ref, SCSA_RENAME)
    x = randn64(2, 16, 5, 6)
    with torch.no_grad():
        close(blk(x), ref(x))
    with pytest.raises(RuntimeError):
        _AuthorsSCSA(16, 1, 7).double()(x)


def test_scsa_records_the_product_of_its_three_gates() -> None:
    blk = randomized("scsa", 16, heads=2)
    x = randn64(2, 16, 9, 10)
    with visattn.capture_attention(blk) as maps, torch.no_grad():
        y = blk(x)
    assert maps[""].shape == (2, 16, 9, 10)
    close(y, x * maps[""])


# ---------------------------------------------------------------------------------------- caa


class _AuthorsCAA(nn.Module):
    """``CAA`` of PKINet/PKINet, rewritten from its code with mmcv's ConvModule spelled out (a
    conv without bias then BN and SiLU when a norm is given, a conv with bias otherwise)."""

    def __init__(self, channels: int, k: int = 11, norm: bool = True) -> None:
        super().__init__()

        def conv_module(kernel, pad, groups, with_norm) -> nn.Sequential:
            layers = [
                nn.Conv2d(channels, channels, kernel, 1, pad, groups=groups, bias=not with_norm)
            ]
            if with_norm:
                layers += [nn.BatchNorm2d(channels, momentum=0.03, eps=0.001), nn.SiLU()]
            return nn.Sequential(*layers)

        self.avg_pool = nn.AvgPool2d(7, 1, 3)
        self.conv1 = conv_module(1, 0, 1, norm)
        self.h_conv = conv_module((1, k), (0, k // 2), channels, False)
        self.v_conv = conv_module((k, 1), (k // 2, 0), channels, False)
        self.conv2 = conv_module(1, 0, 1, norm)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.sigmoid(self.conv2(self.v_conv(self.h_conv(self.conv1(self.avg_pool(x))))))


@pytest.mark.parametrize("norm_act", [True, False])
@pytest.mark.parametrize("k", [11, 13, 5])
def test_caa_equals_the_authors_attention_factor_times_its_input(norm_act: bool, k: int) -> None:
    ref = randomize(_AuthorsCAA(16, k, norm_act).double(), std=0.5).eval()
    blk = visattn.create_block("caa", 16, kernel_size=k, norm_act=norm_act).double().eval()
    _load(blk, ref, {"h_conv.0.": "h_conv.", "v_conv.0.": "v_conv."})
    x = randn64(2, 16, 12, 9)
    with visattn.capture_attention(blk) as maps, torch.no_grad():
        y = blk(x)
        factor = ref(x)
    close(maps[""], factor)
    close(y, x * factor)


def test_caa_border_windows_divide_by_49() -> None:
    """P_avg is AvgPool2d(7, 1, 3) with the zero padding counted, as in the authors' code."""
    blk = randomized("caa", 4, norm_act=False)
    x = torch.ones(1, 4, 9, 9, dtype=torch.float64)
    with torch.no_grad():
        blk.conv1[0].weight.copy_(torch.eye(4).view(4, 4, 1, 1))
        blk.conv1[0].bias.zero_()
        pooled = blk.conv1(F.avg_pool2d(x, 7, 1, 3))
    assert pooled[0, 0, 0, 0].item() == pytest.approx(16 / 49)  # a corner window sees 4x4 ones
    assert pooled[0, 0, 4, 4].item() == pytest.approx(1.0)


# ------------------------------------------------------------------------- shared checks


def _closed_form(name: str, c: int, **o) -> int:
    if name == "gam":
        r, k, g = o.get("reduction", 4), o.get("kernel_size", 7), o.get("groups", 1)
        cr = int(c // r)
        return 2 * c * cr + 2 * k * k * c * cr // g + 4 * cr + 4 * c
    if name == "lsk":
        ch = c // 2
        return 3 * c * ch + 2 * ch + 77 * c + 198
    if name == "lska":
        k = o.get("kernel_size", 23)
        d = o.get("dilation", 2 if k < 23 else 3)
        return c * c + (4 * d + 2 * (k // d) + 3) * c
    if name == "mlca":
        t = int(abs(math.log2(c) / 2 + 1 / 2))
        return 2 * (t if t % 2 else t + 1)
    if name == "scsa":
        return 16 * c
    k = o.get("kernel_size", 11)
    return 2 * c * c + 2 * k * c + (6 if o.get("norm_act", True) else 4) * c


@pytest.mark.parametrize(
    "name, options",
    [
        ("gam", {}),
        ("gam", {"reduction": 4, "groups": 2}),
        ("lsk", {}),
        ("lska", {}),
        ("lska", {"kernel_size": 7}),
        ("lska", {"kernel_size": 53}),
        ("mlca", {}),
        ("scsa", {}),
        ("caa", {}),
        ("caa", {"norm_act": False, "kernel_size": 13}),
    ],
)
@pytest.mark.parametrize("channels", [32, 72, 256])
def test_parameter_count_matches_the_docstring_closed_form(
    name: str, options: dict, channels: int
) -> None:
    assert n_params(visattn.create_block(name, channels, **options)) == _closed_form(
        name, channels, **options
    )


def test_parameter_counts_at_256_channels() -> None:
    counts = {n: n_params(visattn.create_block(n, 256)) for n in NAMES}
    assert counts == {
        "gam": 1639680,
        "lsk": 118470,
        "lska": 72960,
        "mlca": 10,
        "scsa": 4096,
        "caa": 138240,
    }


@pytest.mark.parametrize("name", NAMES)
def test_recorded_map_is_the_weights_applied(name: str) -> None:
    blk = randomized(name, 16)
    x = randn64(2, 16, 9, 7)
    with visattn.capture_attention(blk) as maps, torch.no_grad():
        y = blk(x)
    assert maps[""].shape == (2, 16, 9, 7)
    close(y, x * maps[""])


@pytest.mark.parametrize("channels_last", [False, True])
@pytest.mark.parametrize("name", NAMES)
def test_identity_init_is_exact_and_learns(name: str, channels_last: bool) -> None:
    blk = visattn.create_block(name, 32, init="identity")
    assert type(blk).block_name == name  # the native form, not the generic wrapper
    x = torch.randn(2, 32, 11, 9)
    if channels_last:
        x = x.to(memory_format=torch.channels_last)
    for train in (True, False):
        assert torch.equal(blk.train(train)(x), x)
    (blk.train()(x) * torch.randn_like(x)).sum().backward()
    assert any(p.grad is not None and p.grad.abs().sum() > 0 for p in blk.parameters())


@pytest.mark.parametrize(
    "name, channels, options, message",
    [
        ("gam", 32, {"reduction": 64}, "block 'gam': option 'reduction'=64 leaves 0 channels"),
        ("gam", 32, {"groups": 3}, "block 'gam': option 'groups'=3 must divide"),
        ("gam", 32, {"kernel_size": 4}, "block 'gam': option 'kernel_size' must be odd"),
        ("lsk", 32, {"kernel_sizes": (5,)}, "block 'lsk': option 'kernel_sizes' must be a pair"),
        (
            "lsk",
            32,
            {"dilations": (1, 0)},
            "block 'lsk': option 'dilations' must be a positive int",
        ),
        ("lsk", 1, {}, "block 'lsk': option 'channels'=2 leaves 0 channels"),
        ("lska", 32, {"kernel_size": 22}, "block 'lska': option 'kernel_size' must be odd"),
        ("lska", 32, {"kernel_size": 23, "dilation": 5}, "block 'lska': option 'dilation'=5 gives"),
        ("mlca", 32, {"local_weight": 1.5}, "block 'mlca': option 'local_weight' must be a number"),
        ("mlca", 32, {"local_size": 0}, "block 'mlca': option 'local_size' must be a positive int"),
        ("scsa", 30, {}, "block 'scsa': channels=30 must be divisible by 4"),
        ("scsa", 32, {"heads": 3}, "block 'scsa': option 'heads'=3 must divide"),
        ("scsa", 32, {"window": -1}, "block 'scsa': option 'window' must be a non-negative int"),
        ("caa", 32, {"kernel_size": 0}, "block 'caa': option 'kernel_size' must be a positive int"),
    ],
)
def test_bad_options_name_the_block_and_the_option(
    name: str, channels: int, options: dict, message: str
) -> None:
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)")):
        visattn.create_block(name, channels, **options)


def test_block_info_names_each_paper() -> None:
    papers = {n: visattn.block_info(n).paper for n in NAMES}
    assert "Global Attention Mechanism" in papers["gam"]
    assert "LSKNet" in papers["lsk"] and "LSKA" in papers["lska"]
    assert "MLCA" in papers["mlca"] and "SCSA" in papers["scsa"] and "PKINet" in papers["caa"]
    assert {visattn.block_info(n).family for n in NAMES} == {"hybrid", "spatial"}
