"""95% Wilson score interval on a task mean (statistics.md §3)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from fractions import Fraction
from math import sqrt

from .passk import pass_at_k

__all__ = ["Z_975", "Score", "pass_at_k_score", "score", "wilson"]

Z_975 = 1.959963984540054
"""Φ⁻¹(0.975), written out so that every deployment computes bit-identical intervals."""


@dataclass(frozen=True, slots=True)
class Score:
    """A metric value with its 95% interval; ``n`` is the number of tasks N, never attempts."""

    value: float
    ci_low: float
    ci_high: float
    n: int


def wilson(estimate: float | Fraction, n_tasks: int) -> tuple[float, float]:
    """Wilson score interval for a (possibly fractional) task mean with N = ``n_tasks``.

    Wilson rather than a CLT or bootstrap interval: it equals the textbook Wilson interval for one 0/1
    outcome per task, is conservative for fractional per-task scores, never has zero width at 0 or 1, and
    keeps ≥ 95% coverage at the small N of typical runs. The sample size is N tasks because attempts on
    one task share its difficulty and are not independent trials.
    """
    if n_tasks < 1:
        raise ValueError(f"n_tasks must be >= 1, got {n_tasks}")
    y = float(estimate)
    if not 0.0 <= y <= 1.0:
        raise ValueError(f"estimate must lie in [0, 1], got {estimate}")
    n = n_tasks
    z2 = Z_975 * Z_975
    d = 1 + z2 / n
    center = (y + z2 / (2 * n)) / d
    half = Z_975 * sqrt(y * (1 - y) / n + z2 / (4 * n * n)) / d
    low, high = max(0.0, center - half), min(1.0, center + half)
    # At ŷ = 0 (or 1) the lower (upper) bound is exactly 0 (1); rounding must not make it 5e-17 or 1 - 1e-16.
    if y == 0.0:
        low = 0.0
    if y == 1.0:
        high = 1.0
    return low, high


def score(estimate: float | Fraction, n_tasks: int) -> Score:
    """``Score`` of a task mean over ``n_tasks`` tasks."""
    low, high = wilson(estimate, n_tasks)
    return Score(value=float(estimate), ci_low=low, ci_high=high, n=n_tasks)


def pass_at_k_score(tasks: Sequence[tuple[int, int]], k: int) -> Score | None:
    """pass@k of per-task ``(n, c)`` counts with its Wilson interval; ``None`` when pass@k is undefined."""
    value = pass_at_k(tasks, k)
    if value is None:
        return None
    return score(value, len(tasks))
