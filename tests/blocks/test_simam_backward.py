"""SimAM's hand-written backward (visattn/blocks/simam.py) gives autograd's gradients of the
paper's equation, and its forward is the plain operations' bit for bit."""

from __future__ import annotations

import pytest
import torch

import visattn
from visattn.blocks import simam as simam_mod


def _reference(x: torch.Tensor, e_lambda: float, unbiased: bool) -> torch.Tensor:
    """Eqs. (5)-(6) written out independently, differentiated by autograd."""
    n = x.shape[2] * x.shape[3] - (1 if unbiased else 0)
    mu = x.mean((2, 3), keepdim=True)
    var = ((x - mu) ** 2).sum((2, 3), keepdim=True) / n
    inv_e = (x - mu) ** 2 / (4 * (var + e_lambda)) + 0.5
    return x * torch.sigmoid(inv_e)


@pytest.mark.parametrize("variance", ["biased", "unbiased"])
@pytest.mark.parametrize("e_lambda", [1e-4, 0.1])
def test_the_hand_written_backward_is_autograds(variance: str, e_lambda: float) -> None:
    torch.manual_seed(0)
    block = visattn.create_block("simam", 6, e_lambda=e_lambda, variance=variance).double()
    x = torch.randn(3, 6, 5, 7, dtype=torch.double, requires_grad=True)
    assert torch.autograd.gradcheck(block, (x,))
    g = torch.randn(3, 6, 5, 7, dtype=torch.double)
    (got,) = torch.autograd.grad(block(x), x, g)
    (want,) = torch.autograd.grad(_reference(x, e_lambda, variance == "unbiased"), x, g)
    # float64: both sides round at ~1e-16 relative over a few dozen operations
    torch.testing.assert_close(got, want, rtol=1e-10, atol=1e-12)


def test_training_uses_it_and_the_forward_is_the_plain_operations_bit_for_bit(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    calls = []
    real = simam_mod._SimAMFunction.apply
    monkeypatch.setattr(simam_mod._SimAMFunction, "apply", lambda *a: calls.append(1) or real(*a))
    block = visattn.create_block("simam", 8)
    x = torch.randn(4, 8, 9, 9, requires_grad=True)
    y = block(x)
    assert calls == [1]
    with torch.no_grad():
        plain = block(x)
    assert calls == [1]  # no gradient wanted: the plain operations
    assert torch.equal(y, plain)
    with visattn.capture_attention(block) as maps:
        block(x).sum().backward()
    assert next(iter(maps.values())).shape == x.shape and x.grad is not None
