"""The pooling helpers the gates share: the same values and gradients as the plain expressions,
in both memory formats."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from visattn.blocks._utils import adaptive_avg_pool, channel_mean_max, spatial_mean


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
