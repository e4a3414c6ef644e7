"""The written-out operations that the blocks-against-their-papers tests (``tests/blocks/``)
compute their references with: a 1x1 conv as a matrix product, eval-mode batch norm, the logistic
sigmoid; the randomised float64 block they compare against, and the capture of its one recorded
map. The references avoid the blocks' own helpers and ``nn`` modules.
"""

from __future__ import annotations

import torch

import visattn

from .weights import randomize


def randomized(name: str, channels: int, **options) -> torch.nn.Module:
    """Block ``name`` in eval mode, float64, with every parameter drawn from N(0, 0.5^2) and its
    batch norms' statistics at random (:func:`~helpers.weights.randomize` with ``std=0.5``)."""
    return randomize(visattn.create_block(name, channels, **options).double(), std=0.5).eval()


def randn64(n: int, c: int, h: int, w: int, seed: int | None = None) -> torch.Tensor:
    """A standard normal float64 input (N, C, H, W); from its own generator when ``seed`` is
    given, else from torch's global one (which the autouse fixture seeds per test)."""
    gen = None if seed is None else torch.Generator().manual_seed(seed)
    return torch.randn(n, c, h, w, generator=gen, dtype=torch.float64)


def close(a: torch.Tensor, b: torch.Tensor) -> None:
    """Equal to float64 round-off."""
    torch.testing.assert_close(a, b, rtol=1e-9, atol=1e-10)


def assert_within_rounding(
    got: torch.Tensor, eager: torch.Tensor, exact: torch.Tensor, slack: float, what: str
) -> None:
    """The rounding bound, for a result that other float32 kernels computed (TorchScript's,
    onnxruntime's): ``got`` no farther from a float64 run ``exact`` than twice the eager float32
    result ``eager`` is, plus ``slack``."""
    near = float((got.double() - exact).abs().max())
    own = float((eager.double() - exact).abs().max())
    assert near <= 2 * own + slack, f"{what}: {near:.3g} from float64, eager float32 {own:.3g}"


def n_params(m: torch.nn.Module) -> int:
    """The number of parameters of ``m``."""
    return sum(p.numel() for p in m.parameters())


def sigmoid(t: torch.Tensor) -> torch.Tensor:
    """The logistic function written out: 1 / (1 + exp(-t))."""
    return 1.0 / (1.0 + torch.exp(-t))


def mat(conv: torch.nn.Module) -> torch.Tensor:
    """A 1x1 conv's weight as a matrix (out, in)."""
    return conv.weight.detach().flatten(1)


def conv1x1(x: torch.Tensor, conv: torch.nn.Module) -> torch.Tensor:
    """A 1x1 conv on ``(N, Cin, H, W)`` as a matrix product, plus its bias if it has one."""
    out = torch.einsum("oc,nchw->nohw", mat(conv), x)
    if conv.bias is not None:
        out = out + conv.bias.detach().view(1, -1, 1, 1)
    return out


def bn_eval(t: torch.Tensor, bn: torch.nn.Module, dim: int = 1) -> torch.Tensor:
    """Eval-mode batch norm over axis ``dim`` written out: (t - mean) / sqrt(var + eps) * g + b."""
    shape = [1] * t.dim()
    shape[dim] = -1

    def v(a: torch.Tensor) -> torch.Tensor:
        return a.detach().view(shape)

    return (t - v(bn.running_mean)) / torch.sqrt(v(bn.running_var) + bn.eps) * v(bn.weight) + v(
        bn.bias
    )


def recorded(blk: torch.nn.Module, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """``blk(x)`` (without autograd) and the one map it recorded."""
    with visattn.capture_attention(blk) as maps, torch.no_grad():
        y = blk(x)
    assert list(maps) == [""]
    return y, maps[""]


#: timm's ``NonLocalAttn`` tensor names -> visattn ``nonlocal``'s (timm's ``z.bias``, a bias
#: before the BN, has no counterpart)
TIMM_NONLOCAL_NAMES = {
    "t.weight": "theta.weight",
    "t.bias": "theta.bias",
    "p.weight": "phi.weight",
    "p.bias": "phi.bias",
    "g.weight": "g.weight",
    "g.bias": "g.bias",
    "z.weight": "w_z.weight",
    **{f"norm.{k}": f"norm.{k}" for k in ("weight", "bias", "running_mean", "running_var")},
}
