"""Direct methods for the sign-flip tail P(Y ≤ r), numpy-vectorised: where the tilted characteristic
function (_tilted.py) declines a problem or costs more, few differing tasks with a large support.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

__all__ = ["float_dp_lower_tail", "meet_in_the_middle_count"]


def meet_in_the_middle_count(values: Sequence[int], counts: Sequence[int], r: int) -> int:
    """Exact number of sign assignments whose flipped values sum to ≤ r, by enumerating the 2^(m/2)
    subset sums of each half (for few tasks with a huge support, where the other methods are slow)."""
    items = [a for a, k in zip(values, counts, strict=True) for _ in range(k)]
    half = len(items) // 2

    def subset_sums(part: list[int]) -> Any:
        sums = np.zeros(1, dtype=np.int64)
        for value in part:
            sums = np.concatenate((sums, sums + value))
        return sums

    left = subset_sums(items[:half])
    right = np.sort(subset_sums(items[half:]))
    return int(np.searchsorted(right, r - left, side="right").sum())


def float_dp_lower_tail(values: Sequence[int], counts: Sequence[int], r: int) -> float:
    """P(Y ≤ r) by the shift DP in float probabilities over [0, r], one vectorised step per task.

    Only sums of nonnegative terms occur, so the relative error stays below ~m·2^-53. Cheap exactly where
    the tilted path is not: few differing tasks, whatever the size of the support.
    """
    dist = np.zeros(r + 1)
    dist[0] = 1.0
    for a, k in zip(values, counts, strict=True):
        if a > r:
            dist *= 0.5**k  # flipping such a value overshoots r
            continue
        for _ in range(k):
            dist[a:] = 0.5 * (dist[a:] + dist[:-a])
            dist[:a] *= 0.5
    return float(dist.sum())
