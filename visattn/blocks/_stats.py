"""Per-map statistics shared by the blocks that normalise over space (SimAM, SRM, SGE), and the
group-count rule of the grouped blocks (SGE, shuffle attention).

The two size helpers are registered with ``torch.fx.wrap`` so ``torch.fx.symbolic_trace`` keeps them
as calls instead of tracing Python control flow on symbolic sizes. Call them through the module
(``_stats.variance_divisor(...)``): fx patches the name here, not copies imported elsewhere.
"""

from __future__ import annotations

import torch


@torch.fx.wrap
def variance_divisor(count: int, unbiased: bool) -> int:
    """``count`` (the biased 1/M estimate) or ``count - 1`` (Bessel's correction, as
    ``torch.std``), never below 1, so a single position (a 1x1 map) gives variance 0, not 0/0."""
    if unbiased:
        return max(count - 1, 1)
    return count


def safe_std(var: torch.Tensor) -> torch.Tensor:
    """``sqrt(var)`` with the variance floored at 1e-12: equal to the plain root except for (near)
    constant maps, where ``d sqrt / d var`` would be infinite and turn 0 * inf into NaN."""
    return var.clamp_min(1e-12).sqrt()  # a literal: TorchScript reads no module globals


def resolve_groups(
    channels: int, groups: int | None, default: int, *, split: int = 1, option: str = "groups"
) -> int:
    """The number of groups ``G`` of a grouped block: ``channels`` must be a multiple of
    ``split * G``.

    ``groups=None`` picks the paper's ``default`` when it fits, else the largest ``G < default``
    that fits (e.g. 36 for C=72 with 64 and ``split=2``); an explicit ``groups`` that does not fit
    is an error naming ``option``.
    """
    if groups is None:
        fits = [
            g for g in range(min(default, channels // split), 0, -1) if channels % (split * g) == 0
        ]
        if not fits:
            raise ValueError(
                f"option '{option}': {channels} channels cannot be split into {split} x G "
                f"equal parts for any G"
            )
        return fits[0]
    if isinstance(groups, bool) or not isinstance(groups, int) or groups < 1:
        raise ValueError(f"option '{option}' must be a positive int or None, got {groups!r}")
    if channels % (split * groups):
        raise ValueError(
            f"option '{option}'={groups}: {channels} channels are not a multiple of "
            f"{split * groups}" + (f" ({split} x {option})" if split > 1 else "")
        )
    return groups
