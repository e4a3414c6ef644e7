"""GSoP's covariance with its symmetric hand-written backward, its 1x1 reduction as batched
products, and its row-wise convolution as an einsum: gradients (gradcheck in float64, against
autograd's own backward), memory format, and the transforms (TorchScript, torch.fx, torch.export,
torch.compile)."""

from __future__ import annotations

import warnings

import pytest
import torch
import torch.fx
import torch.nn.functional as F
from helpers.weights import randomize

import visattn
from visattn.blocks.gsop import _covariance, _covariance_fp32, _pointwise_conv, _row_conv


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


def test_contiguous_input_gets_a_contiguous_gradient() -> None:
    z = _z(2, 6, 5, 7).requires_grad_()
    _covariance_fp32(z).sum().backward()
    assert z.grad.is_contiguous()


@pytest.mark.parametrize("channels_last", [False, True])
def test_pointwise_conv_gradcheck_float64(channels_last: bool) -> None:
    x = _z(2, 6, 3, 4, dtype=torch.float64)
    if channels_last:
        x = x.contiguous(memory_format=torch.channels_last)
    w = torch.randn(5, 6, 1, 1, dtype=torch.float64, generator=torch.Generator().manual_seed(1))
    assert torch.autograd.gradcheck(_pointwise_conv, (x.requires_grad_(), w.requires_grad_()))


@pytest.mark.parametrize("channels_last", [False, True])
def test_pointwise_conv_is_conv2d_and_keeps_the_layout(channels_last: bool) -> None:
    fmt = torch.channels_last if channels_last else torch.contiguous_format
    x1 = _z(3, 8, 5, 7).contiguous(memory_format=fmt).requires_grad_()
    w1 = torch.randn(4, 8, 1, 1, generator=torch.Generator().manual_seed(1)).requires_grad_()
    x2, w2 = (t.detach().clone().requires_grad_() for t in (x1, w1))
    g = torch.randn(3, 4, 5, 7).contiguous(memory_format=fmt)
    y1, y2 = _pointwise_conv(x1, w1), F.conv2d(x2, w2)
    torch.testing.assert_close(y1, y2)
    y1.backward(g)
    y2.backward(g)
    torch.testing.assert_close(x1.grad, x2.grad)
    torch.testing.assert_close(w1.grad, w2.grad)
    assert y1.is_contiguous(memory_format=fmt) and x1.grad.is_contiguous(memory_format=fmt)


def test_pointwise_conv_under_autocast_is_the_autocast_conv2d() -> None:
    x, w = _z(2, 8, 5, 7), torch.randn(4, 8, 1, 1)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        y, ref = _pointwise_conv(x, w), F.conv2d(x, w)
    assert y.dtype == ref.dtype == torch.bfloat16
    torch.testing.assert_close(y, ref)


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
    return randomize(visattn.create_block("gsop", c, rd_channels=rd).train(), 1, std=0.3)


def _grads(blk: torch.nn.Module, fn, x: torch.Tensor) -> list[torch.Tensor]:
    blk.zero_grad(set_to_none=True)
    x = x.detach().clone().requires_grad_()
    fn(x).square().sum().backward()
    return [x.grad] + [p.grad for p in blk.parameters()]


def test_row_conv_einsum_is_the_grouped_convolution() -> None:
    blk = _randomized_block()
    cov = torch.randn(3, 8, 8)
    got = _row_conv(cov, blk.row_conv.weight, blk.row_conv.bias)
    torch.testing.assert_close(got, blk.row_conv(cov.unsqueeze(-1)))


def test_fx_trace_keeps_the_covariance_as_one_call_and_the_same_gradients() -> None:
    blk = _randomized_block()
    gm = torch.fx.symbolic_trace(blk)
    targets = {n.target for n in gm.graph.nodes if n.op == "call_function"}
    assert _covariance_fp32 in targets and _pointwise_conv in targets
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


def _module_by_module(blk: torch.nn.Module, x: torch.Tensor) -> torch.Tensor:
    """The block as its submodules compute it, with autograd's own backward throughout."""
    z = blk.act(blk.bn(blk.reduce(x)))
    cov = _covariance(z).unsqueeze(-1)
    return x * blk.gate(blk.fc(blk.row_conv(blk.row_norm(cov))))


@pytest.mark.parametrize("channels_last", [False, True])
def test_block_is_its_submodules_composed_forward_and_backward(channels_last: bool) -> None:
    import copy

    blk = _randomized_block().double()
    ref = copy.deepcopy(blk)
    x = torch.randn(3, 16, 6, 5, dtype=torch.float64)
    if channels_last:
        x = x.contiguous(memory_format=torch.channels_last)
    for a, b in zip(_grads(blk, blk, x), _grads(ref, lambda t: _module_by_module(ref, t), x)):
        torch.testing.assert_close(a, b)
    torch.testing.assert_close(blk.bn.running_var, ref.bn.running_var)
