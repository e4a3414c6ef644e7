"""GSoP's covariance with its symmetric hand-written backward, and its row-wise convolution as an
einsum: gradients (gradcheck in float64, against autograd's own backward), memory format, and the
transforms (TorchScript, torch.fx, torch.export, torch.compile)."""

from __future__ import annotations

import warnings

import pytest
import torch
import torch.fx

import visattn
from visattn.blocks.gsop import _covariance, _covariance_fp32


def _z(n: int = 2, c: int = 5, h: int = 3, w: int = 4, **kw) -> torch.Tensor:
    return torch.randn(n, c, h, w, generator=torch.Generator().manual_seed(0), **kw)


@pytest.mark.parametrize("channels_last", [False, True])
def test_gradcheck_float64(channels_last: bool) -> None:
    z = _z(dtype=torch.float64)
    if channels_last:
        z = z.contiguous(memory_format=torch.channels_last)
    z.requires_grad_()
    assert torch.autograd.gradcheck(_covariance_fp32, (z,), eps=1e-6, atol=1e-8)


def test_gradcheck_with_a_large_mean() -> None:
    """The centring has no gradient term of its own (the rows of 1/M (G + G^T) Zc have zero mean):
    checked where the mean dominates the spread."""
    z = (_z(dtype=torch.float64) * 0.1 + 50.0).requires_grad_()
    assert torch.autograd.gradcheck(_covariance_fp32, (z,), eps=1e-6, atol=1e-7)


def test_backward_equals_autograd_of_the_plain_computation() -> None:
    z1 = _z(4, 8, 7, 9).requires_grad_()
    z2 = z1.detach().clone().requires_grad_()
    g = torch.randn(4, 8, 8)  # not symmetric: the backward must symmetrise it
    _covariance_fp32(z1).backward(g)
    _covariance(z2).backward(g)
    torch.testing.assert_close(z1.grad, z2.grad, rtol=1e-5, atol=1e-6)


def test_channels_last_is_read_in_place_and_gets_a_channels_last_gradient() -> None:
    z = _z(2, 6, 5, 7).contiguous(memory_format=torch.channels_last).requires_grad_()
    cov = _covariance_fp32(z)
    torch.testing.assert_close(cov, _covariance_fp32(z.detach().contiguous()))
    cov.sum().backward()
    assert z.grad.is_contiguous(memory_format=torch.channels_last)


def test_float32_under_bf16_autocast_and_its_gradient() -> None:
    z = _z(2, 6, 5, 7).bfloat16().requires_grad_()
    with torch.autocast("cpu", dtype=torch.bfloat16):
        cov = _covariance_fp32(z)
    assert cov.dtype == torch.float32
    cov.sum().backward()
    assert z.grad.dtype == torch.bfloat16 and torch.isfinite(z.grad).all()


def test_double_backward_fails_loudly() -> None:
    z = _z(dtype=torch.float64).requires_grad_()
    (gz,) = torch.autograd.grad(_covariance_fp32(z).sum(), z, create_graph=True)
    with pytest.raises(RuntimeError, match=r"once_differentiable|does not require grad"):
        gz.sum().backward()


def test_torchscript_takes_the_plain_path() -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)  # torch.jit.script is deprecated
        scripted = torch.jit.script(_covariance_fp32)
    z = _z(2, 6, 5, 7)
    for zz in (z, z.contiguous(memory_format=torch.channels_last)):
        torch.testing.assert_close(scripted(zz), _covariance_fp32(zz))


def _randomized_block(c: int = 16, rd: int = 8) -> torch.nn.Module:
    blk = visattn.create_block("gsop", c, rd_channels=rd).train()
    gen = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for p in blk.parameters():
            p.copy_(torch.randn(p.shape, generator=gen) * 0.3)
    return blk


def _grads(blk: torch.nn.Module, fn, x: torch.Tensor) -> list[torch.Tensor]:
    blk.zero_grad(set_to_none=True)
    x = x.detach().clone().requires_grad_()
    fn(x).square().sum().backward()
    return [x.grad] + [p.grad for p in blk.parameters()]


def test_row_conv_einsum_is_the_grouped_convolution() -> None:
    blk = _randomized_block()
    cov = torch.randn(3, 8, 8)
    torch.testing.assert_close(blk._row_conv(cov), blk.row_conv(cov.unsqueeze(-1)))


def test_fx_trace_keeps_the_covariance_as_one_call_and_the_same_gradients() -> None:
    blk = _randomized_block()
    gm = torch.fx.symbolic_trace(blk)
    assert any(n.op == "call_function" and n.target is _covariance_fp32 for n in gm.graph.nodes)
    x = torch.randn(3, 16, 6, 5)
    for a, b in zip(_grads(blk, gm, x), _grads(blk, blk, x)):
        torch.testing.assert_close(a, b)


def test_torch_compile_gradients_equal_eager() -> None:
    torch._dynamo.reset()
    blk = _randomized_block()
    compiled = torch.compile(blk, fullgraph=True, backend="aot_eager")
    x = torch.randn(3, 16, 6, 5)
    for a, b in zip(_grads(blk, compiled, x), _grads(blk, blk, x)):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-5)


def test_torch_export_training_graph_has_the_same_values() -> None:
    blk = _randomized_block().eval()
    x = torch.randn(3, 16, 6, 5)
    ep = torch.export.export(blk, (x,))
    with torch.no_grad():
        torch.testing.assert_close(ep.module()(x), blk(x))
