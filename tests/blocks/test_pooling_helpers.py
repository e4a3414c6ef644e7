"""The pooling helpers the gates share: the same values and gradients as the plain expressions,
in both memory formats."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from visattn.blocks._utils import (
    adaptive_avg_pool,
    axis_mean,
    axis_sum,
    channel_mean_max,
    gate_hw,
    spatial_mean,
)


def _input(shape: tuple[int, ...], channels_last: bool) -> torch.Tensor:
    """A float64 input in the requested memory format, requiring grad."""
    x = torch.randn(*shape, dtype=torch.float64)
    if channels_last:
        x = x.to(memory_format=torch.channels_last)
    return x.requires_grad_()


@pytest.mark.parametrize("channels_last", [False, True])
def test_spatial_mean_equals_mean_with_its_gradient(channels_last: bool) -> None:
    x = _input((3, 5, 7, 9), channels_last)
    g = torch.randn(3, 5, 1, 1, dtype=torch.float64)
    (gx,) = torch.autograd.grad(spatial_mean(x), x, g)
    (ref,) = torch.autograd.grad(x.mean((2, 3), keepdim=True), x, g)
    torch.testing.assert_close(spatial_mean(x), x.mean((2, 3), keepdim=True))
    torch.testing.assert_close(spatial_mean(x, keepdim=False), x.mean((2, 3)))
    torch.testing.assert_close(gx, ref)


@pytest.mark.parametrize("channels_last", [False, True])
def test_channel_mean_max_forward_backward_and_format(channels_last: bool) -> None:
    x = _input((2, 6, 5, 4), channels_last)
    y = channel_mean_max(x)
    torch.testing.assert_close(
        y, torch.cat([x.mean(1, keepdim=True), x.amax(1, keepdim=True)], 1), rtol=0, atol=0
    )
    g = torch.randn(2, 2, 5, 4, dtype=torch.float64)
    (gx,) = torch.autograd.grad(y, x, g)
    # independent: the mean's gradient is g_mean / C everywhere; the max's goes to the arg-max
    idx = x.detach().argmax(1, keepdim=True)
    ref = (g[:, :1] / 6).expand(2, 6, 5, 4).clone()
    ref.scatter_add_(1, idx, g[:, 1:])
    torch.testing.assert_close(gx, ref)
    assert gx.is_contiguous(memory_format=torch.channels_last) == channels_last
    assert torch.autograd.gradcheck(channel_mean_max, (x.detach().requires_grad_(),))


def test_channel_mean_max_without_gradient_and_empty_batch() -> None:
    x = torch.randn(0, 3, 4, 4, requires_grad=True)
    y = channel_mean_max(x)
    assert y.shape == (0, 2, 4, 4)
    y.sum().backward()
    assert x.grad.shape == x.shape
    with torch.no_grad():
        z = torch.randn(1, 3, 2, 2)
        torch.testing.assert_close(
            channel_mean_max(z), torch.cat([z.mean(1, keepdim=True), z.amax(1, keepdim=True)], 1)
        )


@pytest.mark.parametrize("channels_last", [False, True])
@pytest.mark.parametrize(
    "size, out", [((10, 15), (5, 5)), ((9, 13), (5, 5)), ((3, 4), (5, 5)), ((5, 5), (16, 7))]
)
def test_adaptive_avg_pool_equals_torch_shrinking_and_growing(size, out, channels_last) -> None:
    x = _input((2, 3, *size), channels_last)
    g = torch.randn(2, 3, *out, dtype=torch.float64)
    (gx,) = torch.autograd.grad(adaptive_avg_pool(x, *out), x, g)
    (ref,) = torch.autograd.grad(F.adaptive_avg_pool2d(x, out), x, g)
    torch.testing.assert_close(adaptive_avg_pool(x, *out), F.adaptive_avg_pool2d(x, out))
    torch.testing.assert_close(gx, ref)


def test_adaptive_avg_pool_keeps_a_constant_exactly() -> None:
    """Sums of ones divided by the bin sizes: no rounding (an identity-initialised gate stays 1)."""
    ones = torch.ones(1, 2, 5, 5)
    for out in [(7, 9), (3, 2), (16, 13)]:
        assert torch.equal(adaptive_avg_pool(ones, *out), torch.ones(1, 2, *out))


@pytest.mark.parametrize("channels_last", [False, True])
@pytest.mark.parametrize("dim", [2, 3])
def test_axis_sum_and_mean_equal_torch_with_their_gradients(channels_last: bool, dim: int) -> None:
    x = _input((3, 5, 7, 9), channels_last)
    torch.testing.assert_close(axis_sum(x, dim), x.sum(dim, keepdim=True))
    torch.testing.assert_close(axis_mean(x, dim), x.mean(dim, keepdim=True))
    g = torch.randn_like(x.mean(dim, keepdim=True))
    (gx,) = torch.autograd.grad(axis_mean(x, dim), x, g)
    (ref,) = torch.autograd.grad(x.mean(dim, keepdim=True), x, g)
    torch.testing.assert_close(gx, ref)
    assert torch.autograd.gradcheck(lambda t: axis_mean(t, dim), (x[:1, :2, :3, :4],))


def test_axis_mean_accumulates_half_precision_in_float32() -> None:
    # 4096 values of 32: a float16 running sum (131072) would pass float16's largest, 65504
    x = torch.full((1, 2, 64, 4096), 32.0, dtype=torch.float16)
    m = axis_mean(x, 3)
    assert m.dtype == torch.float16 and torch.equal(m, torch.full_like(m, 32.0))


def _gates(n: int, c: int, h: int, w: int) -> tuple[torch.Tensor, torch.Tensor]:
    g_h = torch.rand(n, c, h, 1, dtype=torch.float64).requires_grad_()
    g_w = torch.rand(n, c, 1, w, dtype=torch.float64).requires_grad_()
    return g_h, g_w


@pytest.mark.parametrize("channels_last", [False, True])
def test_gate_hw_equals_the_product_with_its_gradients(channels_last: bool) -> None:
    x = _input((2, 6, 5, 4), channels_last)
    g_h, g_w = _gates(2, 6, 5, 4)
    y = gate_hw(x, g_h, g_w)
    ref = x * g_w * g_h
    torch.testing.assert_close(y, ref)
    assert y.is_contiguous(
        memory_format=torch.channels_last if channels_last else torch.contiguous_format
    )
    g = torch.randn_like(ref)
    got = torch.autograd.grad(y, (x, g_h, g_w), g)
    want = torch.autograd.grad(ref, (x, g_h, g_w), g)
    for a, b in zip(got, want, strict=True):
        assert a.shape == b.shape
        torch.testing.assert_close(a, b)
    assert torch.autograd.gradcheck(
        gate_hw,
        (x[:, :3], g_h[:, :3].detach().requires_grad_(), g_w[:, :3].detach().requires_grad_()),
    )


def test_gate_hw_gives_only_the_gradients_asked_for_and_mixed_dtypes() -> None:
    x = torch.randn(2, 3, 4, 5)
    g_h, g_w = (t.float() for t in _gates(2, 3, 4, 5))
    (gh,) = torch.autograd.grad(gate_hw(x, g_h.requires_grad_(), g_w.detach()).sum(), g_h)
    torch.testing.assert_close(gh, (x * g_w.detach()).sum(3, keepdim=True))
    # a bfloat16 map with float32 gates (CPU autocast leaves the gates in float32)
    xb = torch.randn(2, 3, 4, 5, dtype=torch.bfloat16, requires_grad=True)
    y = gate_hw(xb, g_h, g_w)
    assert y.dtype == torch.float32
    gx, gh = torch.autograd.grad(y.sum(), (xb, g_h))
    assert gx.dtype == torch.bfloat16 and gh.dtype == torch.float32
    torch.testing.assert_close(gh, (xb.float() * g_w).sum(3, keepdim=True), rtol=1e-5, atol=1e-5)
