"""SimAM's two training kernels (visattn/blocks/simam.py): the hand-written backward
(``kernel="eager"``) and the Inductor-compiled forward and backward (``kernel="compiled"``, the
default) give autograd's gradients of the paper's equation; the eager forward is the plain
operations' bit for bit, the compiled one within float32 rounding of it; a second derivative
raises instead of coming out wrong; a compiler that fails falls back to the eager kernel."""

from __future__ import annotations

import warnings

import pytest
import torch
from helpers.reference import assert_within_rounding

import visattn
from visattn.blocks import _compiled
from visattn.blocks import simam as simam_mod

KERNELS = ("compiled", "eager")
U32 = 2.0**-24  # float32's unit roundoff


def _reference(x: torch.Tensor, e_lambda: float, unbiased: bool) -> torch.Tensor:
    """Eqs. (5)-(6) written out independently, differentiated by autograd."""
    n = x.shape[2] * x.shape[3] - (1 if unbiased else 0)
    mu = x.mean((2, 3), keepdim=True)
    var = ((x - mu) ** 2).sum((2, 3), keepdim=True) / n
    inv_e = (x - mu) ** 2 / (4 * (var + e_lambda)) + 0.5
    return x * torch.sigmoid(inv_e)


@pytest.mark.parametrize("kernel", KERNELS)
@pytest.mark.parametrize("variance", ["biased", "unbiased"])
@pytest.mark.parametrize("e_lambda", [1e-4, 0.1])
def test_each_kernels_backward_is_autograds(kernel: str, variance: str, e_lambda: float) -> None:
    torch.manual_seed(0)
    block = visattn.create_block(
        "simam", 6, e_lambda=e_lambda, variance=variance, kernel=kernel
    ).double()
    x = torch.randn(3, 6, 5, 7, dtype=torch.double, requires_grad=True)
    assert torch.autograd.gradcheck(block, (x,))
    g = torch.randn(3, 6, 5, 7, dtype=torch.double)
    (got,) = torch.autograd.grad(block(x), x, g)
    (want,) = torch.autograd.grad(_reference(x, e_lambda, variance == "unbiased"), x, g)
    # float64: both sides round at ~1e-16 relative over a few dozen operations
    torch.testing.assert_close(got, want, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("shape", [(4, 8, 9, 9), (2, 16, 32, 32)])
def test_the_compiled_kernel_is_the_eager_one_within_float32_rounding(shape) -> None:
    torch.manual_seed(1)
    x = (3 * torch.randn(*shape) + 1).requires_grad_()
    g = torch.randn(*shape)
    runs = {}
    for kernel in KERNELS:
        block = visattn.create_block("simam", shape[1], kernel=kernel)
        with visattn.capture_attention(block) as maps:
            y = block(x)
        (gx,) = torch.autograd.grad(y, x, g)
        runs[kernel] = (y.detach(), gx, next(iter(maps.values())))
    x64 = x.detach().double().requires_grad_()
    y64 = _reference(x64, 1e-4, False)
    (g64,) = torch.autograd.grad(y64, x64, g.double())
    a64 = y64.detach() / x64.detach()
    # the slack: the worst case of one sum over the M positions of a map, M u |x|max
    m = shape[2] * shape[3]
    slack = m * U32 * float(x.detach().abs().max())
    for i, (what, exact) in enumerate([("output", y64), ("gradient", g64), ("map", a64)]):
        got, eager = runs["compiled"][i], runs["eager"][i]
        assert_within_rounding(got, eager, exact.detach(), slack, f"compiled {what}")


def test_training_uses_a_kernel_and_the_eager_forward_is_the_plain_operations_bit_for_bit(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    calls = []
    for cls in (simam_mod._SimAMFunction, simam_mod._SimAMCompiled):
        real = cls.apply
        monkeypatch.setattr(
            cls, "apply", lambda *a, cls=cls, real=real: calls.append(cls) or real(*a)
        )
    x = torch.randn(4, 8, 9, 9, requires_grad=True)
    for kernel, cls in [
        ("eager", simam_mod._SimAMFunction),
        ("compiled", simam_mod._SimAMCompiled),
    ]:
        calls.clear()
        block = visattn.create_block("simam", 8, kernel=kernel)
        y = block(x)
        assert calls == [cls]
        with torch.no_grad():
            plain = block(x)
        assert calls == [cls]  # no gradient wanted: the plain operations
        if kernel == "eager":
            assert torch.equal(y, plain)
        with visattn.capture_attention(block) as maps:
            block(x).sum().backward()
        assert next(iter(maps.values())).shape == x.shape and x.grad is not None


@pytest.mark.parametrize("kernel", KERNELS)
def test_a_second_derivative_raises_instead_of_coming_out_wrong(kernel: str) -> None:
    block = visattn.create_block("simam", 4, kernel=kernel)
    x = torch.randn(2, 4, 5, 5, requires_grad=True)
    (gx,) = torch.autograd.grad(block(x).pow(2).sum(), x, create_graph=True)
    with pytest.raises(RuntimeError, match="once_differentiable"):
        gx.sum().backward()


def test_a_failing_compiler_falls_back_to_the_eager_kernel_once_with_a_warning(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def broken_compile(fn, **_):
        def run(*args):
            raise RuntimeError("InvalidCxxCompiler: no working C++ compiler found\nmore")

        return run

    monkeypatch.setattr(_compiled.torch, "compile", broken_compile)
    forward = _compiled.CompiledKernel(simam_mod._forward_parts, "block 'simam'", "k")
    backward = _compiled.CompiledKernel(
        simam_mod._grad_from_stats, "block 'simam'", "k", shares_with=forward
    )
    monkeypatch.setattr(simam_mod, "_COMPILED_FORWARD", forward)
    monkeypatch.setattr(simam_mod, "_COMPILED_BACKWARD", backward)
    block = visattn.create_block("simam", 8)
    x = torch.randn(2, 8, 6, 6, requires_grad=True)
    g = torch.randn(2, 8, 6, 6)
    with warnings.catch_warnings(record=True) as said:
        warnings.simplefilter("always")
        y = block(x)
        (gx,) = torch.autograd.grad(y, x, g)
    msgs = [str(w.message) for w in said if issubclass(w.category, RuntimeWarning)]
    assert len(msgs) == 1 and "block 'simam': torch.compile could not build" in msgs[0]
    eager = visattn.create_block("simam", 8, kernel="eager")
    want = eager(x)
    (want_gx,) = torch.autograd.grad(want, x, g)
    torch.testing.assert_close(y, want, rtol=0, atol=0)  # the eager forward, exactly
    # the backward ran uncompiled at once: the hand-written formula from the statistics
    torch.testing.assert_close(gx, want_gx)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # warned once: both stay eager, silently
        torch.autograd.grad(block(x), x, g)
    assert backward.failure == forward.failure
    assert "InvalidCxxCompiler" in simam_mod._COMPILED_FORWARD.failure
    assert "more" not in simam_mod._COMPILED_FORWARD.failure  # the first line only


def test_an_input_error_propagates_and_leaves_compiling_on(monkeypatch: pytest.MonkeyPatch) -> None:
    def bad_input(fn, **_):
        return fn  # "compiled" as itself: it raises just as the uncompiled run does

    monkeypatch.setattr(_compiled.torch, "compile", bad_input)

    def fn(t: torch.Tensor) -> torch.Tensor:
        if t.ndim != 4:
            raise ValueError("wants 4-D")
        return t

    kernel = _compiled.CompiledKernel(fn, "test", "k")
    with pytest.raises(ValueError, match="wants 4-D"):
        kernel(torch.zeros(3))
    assert kernel.failure is None
    assert kernel(torch.zeros(1, 1, 1, 1)).shape == (1, 1, 1, 1)


def test_the_kernel_option_is_checked() -> None:
    with pytest.raises(ValueError, match="block 'simam': option 'kernel'"):
        visattn.create_block("simam", 8, kernel="triton")
    assert "kernel='eager'" in repr(visattn.create_block("simam", 8, kernel="eager"))
