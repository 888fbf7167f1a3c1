"""Null distribution of the paired sign-flip statistic (statistics.md §4, steps 2-3).

Under the null each nonzero scaled difference keeps or flips its sign with probability ½, so the
statistic is Σ ε_i A_i. Writing Y for the sum of the A_i whose sign is flipped, Σ ε_i A_i = S - 2Y, and
for T ≠ 0 the two-sided p-value is exactly ``2 · P(Y ≤ r)`` with ``r = (S - |T|) / 2`` (an integer: T and
S have the same parity). Everything therefore reduces to the lower tail of Y = Σ_a a · Binomial(k_a, ½),
where k_a is how many tasks have |D_i| = a. The cheapest adequate method is chosen per comparison:

* **exact count** (small problems): the shift-algorithm DP run as polynomial products on Python integers.
  The generating polynomial Π_a (1 + y^a)^{k_a}, truncated at degree r, is packed one coefficient per
  fixed-width bit slot of a single integer (Kronecker substitution), so each DP stage is one big-integer
  multiplication done in C. The p-value is the exact rational 2·count / 2^m, rounded once to float.
* **binomial** (all A_i equal, e.g. 0/1 scores): the distribution is Binomial(m, ½) and
  count = Σ_{j ≤ r} C(m, j) in exact integers, shared by all comparisons with the same m. This is the
  exact McNemar test, and the fast path for 0/1 data, where thousands of pairs differ on hundreds of
  tasks and a DP would be needlessly slow.
* **meet in the middle** (m ≤ 32, any support; ``_direct``): exact count from the 2^(m/2) subset sums of
  each half.
* **tilted characteristic function** (large problems, numpy, many pairs per call; see ``_tilted``): the
  exact count would need ~m·S-bit integers and the DP O(m·S) steps per pair, far too slow for thousands
  of pairs on 2,000 tasks. The lower tail is read off the closed-form characteristic function of the
  exponentially tilted distribution, which keeps ~1e-13 *relative* accuracy even at p = 1e-200 (tests
  compare it with the exact count). Where its spectrum does not decay (few tasks with large values) it
  defers to the shift DP in float probabilities (``_direct``), whose relative error is below m·2^-53.
* **normal approximation** when m·S > 10^8, as the spec prescribes: p = erfc(|T| / sqrt(2 Σ A_i²)).

Exact ties (T = 0, p = 1) are decided on integers before any of these; floating point only ever enters
the probabilities, never the comparison |Σ| ≥ |T|.
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from operator import mul

try:  # numpy makes large problems fast; without it they take the exact (slower) path.
    from . import _direct, _tilted
except ImportError:  # pragma: no cover - numpy is present wherever the tests run
    _direct = _tilted = None  # type: ignore[assignment]

__all__ = ["NORMAL_APPROXIMATION_THRESHOLD", "NullSummary", "lower_tail_count", "p_value", "p_values"]

NORMAL_APPROXIMATION_THRESHOLD = 10**8
"""Spec §4: above this m·S the exact DP is replaced by the normal approximation."""

_EXACT_BITS = 1 << 13
"""Largest packed polynomial, (r + 1) · slot width in bits, that is counted exactly (~0.1 ms); above it the
tilted path is much faster."""

_MEET_IN_THE_MIDDLE = 32
"""Up to this many differing tasks, counting all 2^(m/2) subset sums of each half is exact and cheap."""

_SMALLEST_P = math.ulp(0.0)
"""The exact p-value is never 0 (it is at least 2^(1-m)); when it underflows the float range it is
reported as the smallest positive float rather than as an impossible 0."""


@dataclass(frozen=True, slots=True)
class NullSummary:
    """Integer summary of one paired comparison: all the test needs.

    ``t`` is T = Σ D_i; ``values`` are the distinct A_i = |D_i| (ascending, gcd 1) and ``counts`` how many
    tasks have each. The empty summary (m = 0) means the two participants agree on every task.
    """

    t: int
    values: tuple[int, ...]
    counts: tuple[int, ...]

    def __post_init__(self) -> None:
        if len(self.values) != len(self.counts):
            raise ValueError("values and counts must have the same length")

    @property
    def m(self) -> int:
        return sum(self.counts)

    @property
    def s(self) -> int:
        return sum(map(mul, self.values, self.counts))

    @property
    def sum_squares(self) -> int:
        return sum(a * a * k for a, k in zip(self.values, self.counts, strict=True))


def p_value(summary: NullSummary) -> float:
    """Two-sided p-value P(|Σ ε_i A_i| ≥ |T|) of one comparison."""
    return p_values([summary])[0]


def p_values(summaries: Sequence[NullSummary]) -> list[float]:
    """Two-sided p-values of many comparisons (binomial tails of equal m share one pass)."""
    out = [1.0] * len(summaries)
    binomial_jobs: defaultdict[int, list[tuple[int, int]]] = defaultdict(list)
    tilted_jobs: list[tuple[int, NullSummary, int]] = []
    for index, summary in enumerate(summaries):
        m = summary.m
        if m == 0 or summary.t == 0:
            continue  # P(|Σ| ≥ 0) = 1: exact ties are recognised in integers
        s = summary.s
        if m * s > NORMAL_APPROXIMATION_THRESHOLD:
            out[index] = _clamp(math.erfc(abs(summary.t) / math.sqrt(2.0 * summary.sum_squares)))
            continue
        r = (s - abs(summary.t)) // 2
        if len(summary.values) == 1:
            binomial_jobs[m].append((index, r // summary.values[0]))  # Y = a · Binomial(m, ½)
        elif r < summary.values[0]:
            out[index] = _exact_p(1, m)  # only the assignment that flips nothing reaches |T|
        elif _tilted is None or (r + 1) * _slot_bits(m) <= _EXACT_BITS:
            out[index] = _exact_p(lower_tail_count(summary.values, summary.counts, r), m)
        elif m <= _MEET_IN_THE_MIDDLE:
            out[index] = _exact_p(_direct.meet_in_the_middle_count(summary.values, summary.counts, r), m)
        else:
            tilted_jobs.append((index, summary, r))
    for m, jobs in binomial_jobs.items():
        cumulative = _binomial_lower_counts(m, max(r for _, r in jobs))
        for index, r in jobs:
            out[index] = _exact_p(cumulative[r], m)
    if tilted_jobs:
        assert _tilted is not None
        tails = _tilted.tilted_lower_tails([(s.values, s.counts, r) for _, s, r in tilted_jobs])
        for (index, summary, r), tail in zip(tilted_jobs, tails, strict=True):
            out[index] = _clamp(2.0 * tail) if tail is not None else _direct_p(summary, r)
    return out


def _direct_p(summary: NullSummary, r: int) -> float:
    """Problems the tilted path declines: a huge support or a spiky, non-decaying spectrum, which only
    occur with few differing tasks (m·S ≤ 10^8), where the shift DP in float probabilities is cheap.
    Only sums of nonnegative terms occur, so its relative error stays below ~m·2^-53."""
    assert _direct is not None
    return _clamp(2.0 * _direct.float_dp_lower_tail(summary.values, summary.counts, r))


def lower_tail_count(values: Sequence[int], counts: Sequence[int], r: int) -> int:
    """Number of the 2^m sign assignments whose flipped values sum to at most ``r`` (exact DP)."""
    if r < 0:
        return 0
    m = sum(counts)
    slot_bytes = _slot_bits(m) // 8
    width = 8 * slot_bytes
    mask = (1 << ((r + 1) * width)) - 1
    poly = 1
    for a, k in zip(values, counts, strict=True):
        top = min(k, r // a)
        if top == 0:
            continue  # every subset containing a value a > r overshoots r: the truncated factor is 1
        gap = bytes(slot_bytes * (a - 1))
        parts: list[bytes] = []
        coefficient = 1
        for j in range(top + 1):
            parts.append(coefficient.to_bytes(slot_bytes, "little"))
            if j < top:
                parts.append(gap)
                coefficient = coefficient * (k - j) // (j + 1)
        poly = (poly * int.from_bytes(b"".join(parts), "little")) & mask
    # Summing the slots is a reduction modulo 2^width - 1 ("casting out"), valid because the total
    # count is at most 2^m < 2^width - 1.
    return poly % ((1 << width) - 1)


def _slot_bits(m: int) -> int:
    """Bit width of one coefficient slot: counts are ≤ 2^m, and the slot sum must stay < 2^width - 1."""
    return 8 * ((m + 2 + 7) // 8)


def _exact_p(count: int, m: int) -> float:
    # int / int is correctly rounded in Python, however large the operands.
    return _clamp((2 * count) / (1 << m))


def _clamp(p: float) -> float:
    return min(1.0, max(p, _SMALLEST_P))


def _binomial_lower_counts(m: int, r_max: int) -> list[int]:
    """Cumulative Σ_{j ≤ r} C(m, j) for r = 0 … r_max, exactly."""
    cumulative = [1]
    term = 1
    total = 1
    for j in range(r_max):
        term = term * (m - j) // (j + 1)
        total += term
        cumulative.append(total)
    return cumulative
