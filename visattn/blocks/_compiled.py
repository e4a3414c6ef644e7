"""A block's elementwise training computation compiled by ``torch.compile`` (TorchInductor) into
fused kernels, once per process, with the block's eager code as the fallback.

Blocks whose cost is a chain of elementwise passes over the feature map (SimAM: sixteen of them,
forward and backward) are bound by memory traffic in eager mode; Inductor fuses the chain into a
few loops. :class:`CompiledKernel` compiles the function on its first call with dynamic shapes
(one graph serves every feature-map size), and where compiling fails (no C++ compiler for
Inductor's CPU code, an unsupported platform) it warns once and runs the eager code for the rest
of the process.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from typing import Any

import torch


class CompiledKernel:
    """``fn`` compiled on first use (``torch.compile(fn, dynamic=True, fullgraph=True)``).

    Calling it with ``*args`` returns ``fn(*args)`` from the compiled graph, or from ``fn``
    itself, uncompiled, once compiling has failed in this process. A call whose compiled attempt
    raises is run again uncompiled: if that raises too, the input was at fault and its error
    propagates (compiling stays on); if it succeeds, the compiler was at fault, and the kernel
    warns once naming the error and runs ``fn`` uncompiled from then on.

    Args:
        fn: the computation; it must be traceable as one graph.
        owner: who uses it, for the warning (``"block 'simam'"``).
        eager_option: the option that skips compiling, for the warning (``"kernel='eager'"``).
        shares_with: another kernel of the same owner (a backward's forward): a failure of
            either runs both uncompiled, with one warning.
    """

    def __init__(
        self,
        fn: Callable[..., Any],
        owner: str,
        eager_option: str,
        *,
        shares_with: CompiledKernel | None = None,
    ) -> None:
        self._fn = fn
        self._owner = owner
        self._eager_option = eager_option
        self._compiled: Callable[..., Any] | None = None
        self._state: dict[str, str | None] = (
            shares_with._state if shares_with is not None else {"failure": None}
        )

    @property
    def failure(self) -> str | None:
        """Why compiling failed in this process (this kernel or one it shares with), once it
        has; ``None`` before."""
        return self._state["failure"]

    def __call__(self, *args: Any) -> Any:
        if self.failure is not None:
            return self._fn(*args)
        if self._compiled is None:
            self._compiled = torch.compile(self._fn, dynamic=True, fullgraph=True)
        try:
            return self._compiled(*args)
        except Exception as err:  # the eager run below tells the input from the compiler
            out = self._fn(*args)
            first = (str(err).strip().splitlines() or [""])[0]
            self._state["failure"] = f"{type(err).__name__}: {first[:300]}"
            warnings.warn(
                f"{self._owner}: torch.compile could not build its kernel ({self.failure}); "
                f"running the eager kernel for the rest of this process (pass "
                f"{self._eager_option} to skip compiling)",
                RuntimeWarning,
                stacklevel=3,
            )
            return out
