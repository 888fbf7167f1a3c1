"""Holm step-down control of the family-wise error rate (statistics.md §5)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

__all__ = ["ALPHA", "HolmResult", "holm"]

ALPHA = 0.05


@dataclass(frozen=True, slots=True)
class HolmResult:
    """Per hypothesis, in input order: whether Holm rejects it, and its Holm-adjusted p-value."""

    rejected: list[bool]
    adjusted: list[float]


def holm(p_values: Sequence[float], alpha: float = ALPHA) -> HolmResult:
    """Holm's step-down procedure over one family of p-values.

    Holm rather than Bonferroni: the same family-wise guarantee with no independence assumption (the
    pairwise tests of a leaderboard share participants), but uniformly more rejections. Sort p ascending
    and reject while p_(j) ≤ alpha / (P - j + 1), stopping at the first failure. Adjusted p-values are
    max_{i ≤ j} min(1, (P - i + 1) p_(i)): monotone in the sort order and capped at 1.
    """
    if not 0.0 < alpha < 1.0:
        raise ValueError(f"alpha must be in (0, 1), got {alpha}")
    family = len(p_values)
    for p in p_values:
        if not 0.0 <= p <= 1.0:
            raise ValueError(f"p-values must lie in [0, 1], got {p}")
    order = sorted(range(family), key=lambda i: p_values[i])
    rejected = [False] * family
    adjusted = [1.0] * family
    still_rejecting = True
    running_max = 0.0
    for position, index in enumerate(order):
        p = p_values[index]
        remaining = family - position
        still_rejecting = still_rejecting and p <= alpha / remaining
        rejected[index] = still_rejecting
        running_max = max(running_max, min(1.0, remaining * p))
        adjusted[index] = running_max
    return HolmResult(rejected=rejected, adjusted=adjusted)
