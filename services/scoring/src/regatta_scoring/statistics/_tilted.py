"""Large sign-flip null distributions in numpy: P(Y ≤ r) for Y = Σ_a a · Binomial(k_a, ½).

Exact big-integer counting costs ~m·S bits per pair and the float shift DP O(m·S) operations per pair;
with 2,000 tasks and thousands of pairs both are far too slow. Instead the tail is read off the closed
form characteristic function of the *exponentially tilted* distribution, for many pairs at once.

Tilting by θ > 0 gives q(y) = P(Y = y) e^{-θy} / M(θ), M(θ) = Π_a ((1 + e^{-θa}) / 2)^{k_a}, so

    P(Y ≤ r) = M(θ) e^{θr} · Σ_{y ≤ r} q(y) e^{-θ(r - y)}.

The weights e^{-θ(r-y)} are ≤ 1, so floating-point error in q is never amplified, and with θ at the
saddlepoint (tilted mean = r) the sum is of order 1: the result keeps ~1e-13 *relative* accuracy even at
p = 1e-200, where an untilted FFT is only accurate to ~1e-16 absolute. q comes from its characteristic
function Q(j) = Π_a ((1 + t_a ω^{-aj}) / (1 + t_a))^{k_a}, t_a = e^{-θa}, ω = e^{2πi/N}, by the inverse
DFT over a period N long enough that aliased mass is negligible; the weighted sum over y is a geometric
series in closed form, so only the few frequencies where |Q(j)| is not negligible are evaluated. The
support stays the integers (exact ties are decided before this point); only probabilities are floats.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from functools import lru_cache
from itertools import chain
from typing import Any

import numpy as np

__all__ = ["float_dp_lower_tail", "meet_in_the_middle_count", "tilted_lower_tails"]

Problem = tuple[Sequence[int], Sequence[int], int]
"""(distinct values a, their counts k_a, r) with 0 ≤ r < S/2."""

_WINDOW_WEIGHT = 40.0
"""Terms with e^{-θ(r-y)} < e^{-40} are below double precision relative to the sum and are not read."""

_ALIAS_SIGMAS = 4.75
"""Period margin above the tilted mean, in units of sqrt(Σ k a²) (9.5 untilted standard deviations): by
Hoeffding's inequality the mass beyond it, which would alias onto the window, is < e^{-45}."""

_NEGLIGIBLE = 52.0
"""Frequencies with |Q(j)| < e^{-52} are skipped; their total effect is < 1e-20 of the result."""

_MAX_PERIOD = 1 << 20
"""Beyond this period (support ≳ 10^6, which under m·S ≤ 10^8 means m < 100) a direct method is cheaper."""

_TABLE_PERIOD = 1 << 16
_CHUNK = 1 << 22
_TWO_PI = 2.0 * math.pi


def tilted_lower_tails(problems: Sequence[Problem]) -> list[float | None]:
    """P(Y ≤ r) for each problem; ``None`` where the period would exceed ``_MAX_PERIOD`` (or, defensively,
    where the evaluated sum is not positive) so that the caller uses a direct method instead."""
    count = len(problems)
    if count == 0:
        return []
    sizes = np.fromiter((len(v) for v, _, _ in problems), dtype=np.int64, count=count)
    total = int(sizes.sum())
    owner = np.repeat(np.arange(count), sizes)  # problem of each (problem, value) entry
    first = np.cumsum(sizes) - sizes
    a_int = np.fromiter(chain.from_iterable(v for v, _, _ in problems), dtype=np.int64, count=total)
    k = np.fromiter(chain.from_iterable(c for _, c, _ in problems), dtype=np.float64, count=total)
    r_int = np.fromiter((r for _, _, r in problems), dtype=np.int64, count=count)
    a = a_int.astype(np.float64)
    r = r_int.astype(np.float64)
    ak = a * k
    aak = a * ak
    s = np.bincount(owner, ak, minlength=count)
    sum_sq = np.bincount(owner, aak, minlength=count)

    # Saddlepoint θ: E_θ[Y] = Σ k a t/(1+t) = r. E_θ[Y] is convex and decreasing in θ ≥ 0, so Newton from
    # θ = 0 (whose first step is the normal approximation) approaches the root monotonically from the
    # left. Any θ > 0 yields the same exact value; the root only keeps the sum well conditioned, so a
    # tilted mean within a quarter standard deviation of r is enough.
    theta = (s / 2 - r) / (sum_sq / 4)
    for _ in range(200):
        t, mean, variance = _moments(theta, owner, a, ak, aak, count)
        gap = mean - r
        active = (gap > 0.25 * np.sqrt(variance)) & (variance > 0)
        if not active.any():
            break
        theta = np.where(active, theta + gap / np.where(variance > 0, variance, 1.0), theta)
    t, mean, _ = _moments(theta, owner, a, ak, aak, count)

    # Window [lowest, r] of y that matter, and the period N that keeps aliasing below e^{-45}.
    reach = np.minimum(np.ceil(_WINDOW_WEIGHT / theta), r + 1).astype(np.int64)
    lowest = np.maximum(0, r_int - reach)
    span = np.ceil(np.maximum(mean, r) + _ALIAS_SIGMAS * np.sqrt(sum_sq)).astype(np.int64) - lowest + 1
    s_int = np.rint(s).astype(np.int64)
    whole = span >= s_int + 1  # the whole support fits: no aliasing at all
    lowest = np.where(whole, 0, lowest)
    span = np.where(whole, s_int + 1, span)
    period = np.array([1 << (int(x) - 1).bit_length() for x in span.tolist()], dtype=np.int64)
    n_terms = r_int - lowest + 1
    accepted = period <= _MAX_PERIOD

    kept_owner, kept_j = _frequencies(
        np.flatnonzero(accepted), a_int, k * t / (1.0 + t) ** 2, first, sizes, period
    )

    # log Q(j) at the kept frequencies, summed over each problem's values (ragged expansion).
    kept = len(kept_j)
    repeat = sizes[kept_owner]
    element = np.repeat(np.arange(kept), repeat)
    offset = np.arange(int(repeat.sum())) - np.repeat(np.cumsum(repeat) - repeat, repeat)
    entry = np.repeat(first[kept_owner], repeat) + offset
    n_el = period[kept_owner][element]
    angle = ((a_int[entry] * kept_j[element]) % n_el) * (_TWO_PI / n_el)
    t_el = t[entry]
    x = 1.0 + t_el * np.cos(angle)
    y = -t_el * np.sin(angle)
    k_el = k[entry]
    log_norm = np.bincount(owner, k * np.log1p(t), minlength=count)
    log_abs_q = (
        0.5 * np.bincount(element, k_el * np.log(x * x + y * y), minlength=kept) - log_norm[kept_owner]
    )
    arg_q = np.bincount(element, k_el * np.arctan2(y, x), minlength=kept)

    # Σ_{u=0}^{n-1} e^{-θu} ω^{j(r-u)} = ω^{jr} (1 - ξ^n) / (1 - ξ) with ξ = e^{-θ} ω^{-j}; both factors are
    # formed as 2 sin²(φ/2) - cos φ · expm1(-θ·) + i e^{-θ·} sin φ, which has no cancellation near j = 0.
    th = theta[kept_owner]
    n_k = period[kept_owner]
    terms_n = n_terms[kept_owner]
    base = kept_j * (_TWO_PI / n_k)
    denominator = _one_minus(base, th)
    numerator = _one_minus(((kept_j * terms_n) % n_k) * (_TWO_PI / n_k), th * terms_n)
    shift = ((kept_j * r_int[kept_owner]) % n_k) * (_TWO_PI / n_k)
    terms = np.exp(log_abs_q + 1j * (arg_q + shift)) * (numerator / denominator)
    hermitian = np.where((kept_j == 0) | (2 * kept_j == n_k), 1.0, 2.0)
    sums = np.bincount(kept_owner, terms.real * hermitian, minlength=count) / period

    # log(M(θ) e^{θr}) value by value: log((1 + t)/2) = log1p(expm1(-θa)/2) stays accurate as θa → 0, and
    # per-value terms avoid cancelling m·log 2 against θr.
    log_mgf = np.bincount(owner, k * np.log1p(np.expm1(-theta[owner] * a) / 2.0), minlength=count)
    out: list[float | None] = []
    for ok, total_sum, log_m, th_p, r_p in zip(
        accepted.tolist(), sums.tolist(), log_mgf.tolist(), theta.tolist(), r.tolist(), strict=True
    ):
        if ok and total_sum > 0.0:
            out.append(math.exp(log_m + th_p * r_p + math.log(total_sum)))
        else:
            out.append(None)
    return out


def _moments(theta: Any, owner: Any, a: Any, ak: Any, aak: Any, count: int) -> tuple[Any, Any, Any]:
    """Per entry t = e^{-θa}; per problem the tilted mean and variance of Y."""
    t = np.exp(-theta[owner] * a)
    share = t / (1.0 + t)
    mean = np.bincount(owner, ak * share, minlength=count)
    variance = np.bincount(owner, aak * share / (1.0 + t), minlength=count)
    return t, mean, variance


def _one_minus(phi: Any, decay: Any) -> Any:
    """1 - e^{-decay} e^{-iφ}, computed without cancellation for small φ and decay."""
    return (2.0 * np.sin(0.5 * phi) ** 2 - np.cos(phi) * np.expm1(-decay)) + 1j * (
        np.exp(-decay) * np.sin(phi)
    )


def _frequencies(
    problems: Any, a_int: Any, weights: Any, first: Any, sizes: Any, period: Any
) -> tuple[Any, Any]:
    """(problem, j) pairs with j ∈ [0, N/2] where |Q(j)| may exceed e^{-52}.

    |Q(j)| ≤ exp(-Σ_a w_a (1 - cos(2π a j / N))) with w_a = k_a t_a / (1 + t_a)², since
    |1 + t e^{-iφ}|² / (1 + t)² = 1 - 2t(1 - cos φ)/(1 + t)² ≤ exp(-2t(1 - cos φ)/(1 + t)²).
    """
    owners: list[Any] = []
    js: list[Any] = []
    a_list = a_int.tolist()
    first_list = first.tolist()
    size_list = sizes.tolist()
    by_period: dict[int, list[int]] = {}
    for p in problems.tolist():
        by_period.setdefault(int(period[p]), []).append(p)
    for n, members in by_period.items():
        half = n // 2 + 1
        dense = [p for p in members if max(a_list[first_list[p] : first_list[p] + size_list[p]]) < 64]
        if n <= _TABLE_PERIOD and dense:
            table = _one_minus_cos(n)
            step = max(1, _CHUNK // half)
            for lo in range(0, len(dense), step):
                block = dense[lo : lo + step]
                w = np.zeros((len(block), 64))
                for row, p in enumerate(block):
                    sl = slice(first_list[p], first_list[p] + size_list[p])
                    w[row, a_int[sl]] = weights[sl]
                rows, js_block = np.nonzero(w @ table < _NEGLIGIBLE)
                owners.append(np.asarray(block, dtype=np.int64)[rows])
                js.append(js_block)
            dense_set = set(dense)
            members = [p for p in members if p not in dense_set]
        for p in members:
            sl = slice(first_list[p], first_list[p] + size_list[p])
            values = a_int[sl]
            w = weights[sl]
            step = max(1, _CHUNK // len(values))
            for lo in range(0, half, step):
                j = np.arange(lo, min(half, lo + step))
                bound = w @ (1.0 - np.cos((np.multiply.outer(values, j) % n) * (_TWO_PI / n)))
                picked = j[bound < _NEGLIGIBLE]
                owners.append(np.full(len(picked), p, dtype=np.int64))
                js.append(picked)
    if not owners:
        return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)
    return np.concatenate(owners), np.concatenate(js)


@lru_cache(maxsize=8)
def _one_minus_cos(period: int) -> Any:
    """1 - cos(2π a j / N) for a < 64 and j = 0 … N/2."""
    j = np.arange(period // 2 + 1)
    return 1.0 - np.cos((np.multiply.outer(np.arange(64), j) % period) * (_TWO_PI / period))


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
    """P(Y ≤ r) by the shift DP in float probabilities over [0, r].

    Only sums of positive terms occur, so the relative error stays below ~m·2^-53; used where the support
    is huge but m·r is bounded (m·S ≤ 10^8 with S > 10^6 means m < 100).
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
