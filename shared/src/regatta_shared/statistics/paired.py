"""Exact paired sign-flip permutation test (Fisher-Pitman) on per-task scores (statistics.md §4).

Differences are taken as exact rationals and scaled to coprime integers before anything else, so an
exact tie (T = 0) is always recognised as one (a float permutation test can misread it, vector 12).
The null distribution itself lives in :mod:`.signflip`.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence
from fractions import Fraction
from itertools import chain
from typing import Any

from .signflip import NullSummary, p_value, p_values

try:
    import numpy as _np
except ImportError:  # pragma: no cover - numpy is present wherever the tests run
    _np = None

__all__ = ["paired_permutation_test", "pairwise_p_values", "summarize_differences", "summarize_pair"]

_INT64_SAFE = 1 << 62
"""Scaled scores are kept in int64 only while differences and row sums cannot overflow."""

_BINCOUNT_MAX = 1 << 10
"""Histogram |D_i| with one bincount per row up to this scale, else by sorting each pair."""


def summarize_differences(differences: Sequence[int]) -> NullSummary:
    """Summary of integer paired differences: zeros dropped, divided by their gcd (spec step 2)."""
    nonzero = [d for d in differences if d]
    if not nonzero:
        return NullSummary(t=0, values=(), counts=())
    g = math.gcd(*nonzero)
    histogram = Counter(abs(d) // g for d in nonzero)
    values = tuple(sorted(histogram))
    return NullSummary(t=sum(nonzero) // g, values=values, counts=tuple(histogram[a] for a in values))


def summarize_pair(scores_a: Sequence[Fraction], scores_b: Sequence[Fraction]) -> NullSummary:
    """Summary of d_i = s_b,i - s_a,i for two aligned per-task score vectors (exact rationals)."""
    if len(scores_a) != len(scores_b):
        raise ValueError(f"paired scores must have equal length, got {len(scores_a)} and {len(scores_b)}")
    diffs = [Fraction(b) - Fraction(a) for a, b in zip(scores_a, scores_b, strict=True)]
    scale = math.lcm(*(d.denominator for d in diffs)) if diffs else 1
    return summarize_differences([d.numerator * (scale // d.denominator) for d in diffs])


def paired_permutation_test(scores_a: Sequence[Fraction], scores_b: Sequence[Fraction]) -> float:
    """Exact two-sided paired sign-flip p-value of two aligned per-task score vectors.

    On 0/1 scores this is the exact McNemar test. With m ≤ 5 discordant tasks no pair can reach
    p < 0.05: that is the honest answer for so little evidence, not a defect.
    """
    return p_value(summarize_pair(scores_a, scores_b))


def pairwise_p_values(vectors: Sequence[Sequence[Fraction]]) -> dict[tuple[int, int], float]:
    """p-values of every pair (i, j), i < j, of aligned per-task score vectors (one comparison group).

    Scores (``Fraction`` or ``int``) are scaled once by the lcm of all denominators in the group, so every
    pair's differences are integers; each pair is then reduced by its own gcd, which yields exactly the
    coprime D_i of the spec. The result does not depend on the other vectors in the call.
    """
    count = len(vectors)
    if count < 2:
        return {}
    length = len(vectors[0])
    if any(len(v) != length for v in vectors):
        raise ValueError("all score vectors of a group must have the same length")
    pairs = [(i, j) for i in range(count) for j in range(i + 1, count)]
    if length == 0:
        return dict.fromkeys(pairs, 1.0)
    matrix = _scaled_matrix(vectors) if _np is not None else None
    if matrix is not None:
        summaries = _summaries_numpy(*matrix)
    else:
        scaled = _scale(vectors)
        summaries = [
            summarize_differences([b - a for a, b in zip(scaled[i], scaled[j], strict=True)])
            for i, j in pairs
        ]
    return dict(zip(pairs, p_values(summaries), strict=True))


def _scale(vectors: Sequence[Sequence[Fraction]]) -> list[list[int]]:
    """Scores times the lcm of all their denominators, as Python integers (any size)."""
    scale = math.lcm(*{v.denominator for vector in vectors for v in vector})
    return [[v.numerator * (scale // v.denominator) for v in vector] for vector in vectors]


def _scaled_matrix(vectors: Sequence[Sequence[Fraction]]) -> tuple[Any, int] | None:
    """Scores times the lcm of their denominators as an int64 matrix, or None if that could overflow.

    Per-task scores are mostly shared objects (the pass@k of each distinct (n, c) is built once), so
    they are converted per distinct object identity, never per task: 200,000 scores in milliseconds.
    Identities are stable here because ``vectors`` keeps every object alive.
    """
    assert _np is not None
    np = _np
    flat = list(chain.from_iterable(vectors))
    ids = np.fromiter(map(id, flat), dtype=np.uint64, count=len(flat))
    _, first, inverse = np.unique(ids, return_index=True, return_inverse=True)
    objects = [flat[i] for i in first.tolist()]
    scale = math.lcm(*{v.denominator for v in objects}) if objects else 1
    if scale > _INT64_SAFE // max(1, 2 * len(vectors[0])):
        return None
    scaled = np.array([v.numerator * (scale // v.denominator) for v in objects], dtype=np.int64)
    return scaled[inverse].reshape(len(vectors), -1), scale


def _summaries_numpy(matrix: Any, scale: int) -> list[NullSummary]:
    assert _np is not None
    np = _np
    count = matrix.shape[0]
    summaries: list[NullSummary] = []
    for i in range(count - 1):
        diffs = matrix[i + 1 :] - matrix[i]
        partners = diffs.shape[0]
        if scale < _BINCOUNT_MAX:
            # One bincount for all partners of i: partner b's signed histogram of D occupies the bins
            # [b(2L+1), (b+1)(2L+1)), D = 0 in the middle; T and the |D| histogram both follow from it.
            width = 2 * scale + 1
            offsets = (np.arange(partners, dtype=np.int64) * width + scale)[:, None]
            signed = np.bincount((diffs + offsets).ravel(), minlength=partners * width).reshape(
                partners, width
            )
            positive = signed[:, scale + 1 :]
            negative = signed[:, scale - 1 :: -1]
            totals = ((positive - negative) @ np.arange(1, scale + 1)).tolist()
            magnitudes = positive + negative
            rows, columns = np.nonzero(magnitudes)  # row-major: each partner's values come out sorted
            counts = magnitudes[rows, columns].tolist()
            bounds = np.searchsorted(rows, np.arange(partners + 1)).tolist()
            values = (columns + 1).tolist()
            summaries.extend(
                _normalise(total, values[lo:hi], counts[lo:hi])
                for total, lo, hi in zip(totals, bounds, bounds[1:], strict=False)
            )
        else:
            for total, row in zip(diffs.sum(axis=1).tolist(), np.abs(diffs), strict=True):
                values_, counts_ = np.unique(row[row != 0], return_counts=True)
                summaries.append(_normalise(total, values_.tolist(), counts_.tolist()))
    return summaries


def _normalise(total: int, values: list[int], counts: list[int]) -> NullSummary:
    """Summary from a histogram of |D| (ascending values, zeros excluded) and T, divided by the gcd."""
    if not values:
        return NullSummary(t=0, values=(), counts=())
    g = 1 if values[0] == 1 else math.gcd(*values)
    if g != 1:
        values = [a // g for a in values]
    return NullSummary(t=total // g, values=tuple(values), counts=tuple(counts))
