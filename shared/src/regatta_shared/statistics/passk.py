"""pass@k estimators (statistics.md §2), in exact rational arithmetic."""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from fractions import Fraction
from functools import lru_cache
from math import comb

__all__ = [
    "pass_at_1",
    "pass_at_k",
    "pass_at_k_curve",
    "pass_at_k_task",
    "per_task_pass_at_k",
]


@lru_cache(maxsize=65536)
def pass_at_k_task(n: int, c: int, k: int) -> Fraction:
    """Unbiased pass@k of one task with ``n`` scored and ``c`` passed attempts (Chen et al., 2021).

    ``1 - C(n-c, k) / C(n, k)`` with integer binomials: float binomials overflow long before n = 2000,
    and the plug-in ``1 - (1 - c/n)^k`` is biased low.
    """
    if n < 0 or not 0 <= c <= n:
        raise ValueError(f"need 0 <= c <= n, got n={n}, c={c}")
    if not 1 <= k <= n:
        raise ValueError(f"need 1 <= k <= n, got n={n}, k={k}")
    if n - c < k:
        return Fraction(1)
    return 1 - Fraction(comb(n - c, k), comb(n, k))


def pass_at_k(tasks: Sequence[tuple[int, int]], k: int) -> Fraction | None:
    """Participant pass@k: the unweighted mean over tasks of the per-task estimator.

    ``tasks`` holds ``(n, c)`` per task. Each task weighs 1/N whatever its n: the task, not the attempt, is
    the unit of analysis, so pooling Σc/Σn would let tasks with more attempts count more. ``None`` means
    undefined: no tasks, or a task with n < k (such a task is neither dropped nor given a clamped k, as
    either would silently change what is measured).
    """
    if k < 1:
        raise ValueError(f"k must be >= 1, got {k}")
    if not tasks:
        return None
    # Grouping identical (n, c) keeps this fast for thousands of tasks: a handful of distinct pairs.
    groups = Counter(tasks)
    if any(n < k for n, _ in groups):
        return None
    total = sum((count * pass_at_k_task(n, c, k) for (n, c), count in groups.items()), Fraction(0))
    return total / len(tasks)


def pass_at_1(tasks: Sequence[tuple[int, int]]) -> Fraction | None:
    """pass@1 = mean over tasks of c_i / n_i."""
    return pass_at_k(tasks, 1)


def pass_at_k_curve(tasks: Sequence[tuple[int, int]]) -> list[tuple[int, Fraction]]:
    """pass@k for k = 1 … min n_i (empty when there are no tasks or a task has no scored attempt)."""
    if not tasks:
        return []
    top = min(n for n, _ in tasks)
    curve: list[tuple[int, Fraction]] = []
    for k in range(1, top + 1):
        value = pass_at_k(tasks, k)
        assert value is not None  # k <= min n, so defined
        curve.append((k, value))
    return curve


def per_task_pass_at_k(tasks: Mapping[str, tuple[int, int]], k: int) -> dict[str, Fraction] | None:
    """Per-task pass@k scores keyed by task name (the input of the paired test), or ``None`` if undefined."""
    distinct = set(tasks.values())
    if any(n < k for n, _ in distinct):
        return None
    value = {(n, c): pass_at_k_task(n, c, k) for n, c in distinct}
    return dict(zip(tasks, map(value.__getitem__, tasks.values()), strict=True))
