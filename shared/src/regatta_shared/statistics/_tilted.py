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
from operator import mul
from typing import Any

import numpy as np

__all__ = ["tilted_lower_tails"]

Problem = tuple[Sequence[int], Sequence[int], int]
"""(distinct values a, their counts k_a, r) with 0 ≤ r < S/2."""

_WINDOW_WEIGHT = 40.0
"""Terms with e^{-θ(r-y)} < e^{-40} are below double precision relative to the sum and are not read."""

_ALIAS_LOG = 45.0
"""The period leaves a margin on both sides of the tilted mean beyond which the tilted mass, which would
alias onto the window, is < e^{-45}: the smaller of Hoeffding's margin sqrt(45/2 · Σ k a²) and
Bernstein's 15 a_max + sqrt(225 a_max² + 90 σ_θ²), which is much narrower far in the tail, where the
tilted variance σ_θ² is small."""

_NEGLIGIBLE = 45.0
"""Frequencies with |Q(j)| < e^{-45} are skipped; their total effect is < 1e-16 of the result."""

_MAX_PERIOD = 1 << 20
"""Beyond this period (support ≳ 10^6, which under m·S ≤ 10^8 means m < 100) a direct method is cheaper."""

_BLOCK = 256
"""Problems per dense block: keeps temporaries around a megabyte, so they are recycled, not re-mapped."""
_CHUNK = 1 << 20
_COST_PER_TERM = 8.0
"""Rough cost of one (frequency, value) term, in units of one element of a vectorised shift-DP step."""
_DP_OVERHEAD = 2000.0
"""Per-task overhead of the shift DP (one numpy call), in the same units."""
_TWO_PI = 2.0 * math.pi


def tilted_lower_tails(problems: Sequence[Problem]) -> list[float | None]:
    """P(Y ≤ r) for each problem; ``None`` where the period would exceed ``_MAX_PERIOD`` (or, defensively,
    where the evaluated sum is not positive) so that the caller uses a direct method instead."""
    valid = [i for i, (v, c, r) in enumerate(problems) if 0 <= 2 * r < sum(map(mul, v, c))]
    if len(valid) < len(problems):
        out: list[float | None] = [None] * len(problems)
        for i, tail in zip(valid, tilted_lower_tails([problems[i] for i in valid]), strict=True):
            out[i] = tail
        return out
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
    t, mean, variance = _moments(theta, owner, a, ak, aak, count)

    # Window [lowest, r] of y that matter, and the period N that keeps aliasing below e^{-45}.
    reach = np.minimum(np.ceil(_WINDOW_WEIGHT / theta), r + 1).astype(np.int64)
    lowest = np.maximum(0, r_int - reach)
    a_max = np.maximum.reduceat(a, first)
    margin = np.minimum(
        np.sqrt(_ALIAS_LOG / 2 * sum_sq),
        _ALIAS_LOG / 3 * a_max + np.sqrt((_ALIAS_LOG / 3 * a_max) ** 2 + 2 * _ALIAS_LOG * variance),
    )
    span = np.ceil(np.maximum(mean, r) + margin).astype(np.int64) - lowest + 1
    s_int = np.rint(s).astype(np.int64)
    whole = span >= s_int + 1  # the whole support fits: no aliasing at all
    lowest = np.where(whole, 0, lowest)
    span = np.where(whole, s_int + 1, span)
    period = np.array([_period(x) for x in span.tolist()], dtype=np.int64)
    n_terms = r_int - lowest + 1
    accepted = period <= _MAX_PERIOD
    m = np.bincount(owner, k, minlength=count)
    dp_cost = m * (r + _DP_OVERHEAD)
    log_norm = np.bincount(owner, k * np.log1p(t), minlength=count)

    # Evaluate in dense blocks of problems that share the period N and have a similar number of values.
    sums = np.zeros(count)
    position = np.arange(total) - first[owner]
    # A problem's arithmetic depends only on its block's key (period, number of values), never on which
    # other problems share the block, so a pair gets bit-identical p-values in any batch.
    keys = np.where(accepted, period * 4096 + np.minimum(sizes, 4095), -1)
    blocks = [
        (key, group[lo : lo + _BLOCK])
        for key in np.unique(keys[accepted]).tolist()
        for group in [np.flatnonzero(keys == key)]
        for lo in range(0, len(group), _BLOCK)
    ]
    for key, members in blocks:
        local = np.full(count, -1, dtype=np.int64)
        local[members] = np.arange(len(members))
        entries = np.flatnonzero(local[owner] >= 0)
        rows, cols = local[owner[entries]], position[entries]
        shape = (len(members), max(key % 4096, int(sizes[members].max())))
        block_a = np.zeros(shape, dtype=np.int64)
        block_k = np.zeros(shape)
        block_t = np.zeros(shape)  # padding (only past 4095 values): a = 0, k = 0, t = 0 adds nothing
        block_a[rows, cols] = a_int[entries]
        block_k[rows, cols] = k[entries]
        block_t[rows, cols] = t[entries]
        sums[members] = _block_sums(
            key // 4096,
            block_a,
            block_k,
            block_t,
            theta[members],
            r_int[members],
            n_terms[members],
            log_norm[members],
            dp_cost[members],
        )

    # log(M(θ) e^{θr}) value by value: log((1 + t)/2) = log1p(expm1(-θa)/2) stays accurate as θa → 0, and
    # per-value terms avoid cancelling m·log 2 against θr.
    log_mgf = np.bincount(owner, k * np.log1p(np.expm1(-theta[owner] * a) / 2.0), minlength=count)
    tails: list[float | None] = []
    for ok, total_sum, log_m, th_p, r_p in zip(
        accepted.tolist(), sums.tolist(), log_mgf.tolist(), theta.tolist(), r.tolist(), strict=True
    ):
        if ok and total_sum > 0.0:  # NaN (declined) compares False
            tails.append(math.exp(log_m + th_p * r_p + math.log(total_sum)))
        else:
            tails.append(None)
    return tails


def _period(span: int) -> int:
    """Smallest 2^e or 3·2^(e-1) ≥ span: few distinct periods (cached tables), little overshoot."""
    power = 1 << (span - 1).bit_length()
    three = 3 * power // 4
    return three if three >= span and three % 2 == 0 else power


def _moments(theta: Any, owner: Any, a: Any, ak: Any, aak: Any, count: int) -> tuple[Any, Any, Any]:
    """Per entry t = e^{-θa}; per problem the tilted mean and variance of Y."""
    t = np.exp(-theta[owner] * a)
    # A value whose tilted flip probability is below 1e-100 changes nothing at double precision; zeroing
    # it keeps subnormal numbers (100x slower arithmetic) out of everything downstream.
    t[t < 1e-100] = 0.0
    share = t / (1.0 + t)
    mean = np.bincount(owner, ak * share, minlength=count)
    variance = np.bincount(owner, aak * share / (1.0 + t), minlength=count)
    return t, mean, variance


def _one_minus(phi: Any, decay: Any) -> Any:
    """1 - e^{-decay} e^{-iφ}, computed without cancellation for small φ and decay."""
    return (2.0 * np.sin(0.5 * phi) ** 2 - np.cos(phi) * np.expm1(-decay)) + 1j * (
        np.exp(-decay) * np.sin(phi)
    )


def _block_sums(
    period: int, a: Any, k: Any, t: Any, theta: Any, r: Any, n_terms: Any, log_norm: Any, dp_cost: Any
) -> Any:
    """Σ_{u < n} e^{-θu} q(r - u) for a block of problems sharing the period N (rows: problems); NaN where
    the characteristic function does not decay (few tasks, large values: a spiky distribution whose
    spectrum is flat), so that the direct shift DP is cheaper."""
    row, j = _frequencies(period, a, k * t / (1.0 + t) ** 2)
    cost = np.bincount(row, minlength=a.shape[0]) * (a.shape[1] * _COST_PER_TERM)
    declined = cost > dp_cost
    if declined.any():
        keep = ~declined[row]
        row, j = row[keep], j[keep]
    contributions = np.empty(len(j))
    step = max(1, _CHUNK // a.shape[1])  # bounded temporaries; the per-frequency terms do not depend on it
    for lo in range(0, len(j), step):
        part = slice(lo, lo + step)
        contributions[part] = _terms(period, a, k, t, theta, r, n_terms, log_norm, row[part], j[part])
    sums = np.bincount(row, contributions, minlength=a.shape[0]) / period
    sums[declined] = np.nan
    return sums


def _terms(
    period: int, a: Any, k: Any, t: Any, theta: Any, r: Any, n_terms: Any, log_norm: Any, row: Any, j: Any
) -> Any:
    """Hermitian-weighted real part of Q(j) · Σ_{u=0}^{n-1} e^{-θu} ω^{j(r-u)} at kept frequencies."""
    # log Q(j) = Σ_a k_a [log|1 + t_a ω^{-aj}| + i arg(1 + t_a ω^{-aj})] - Σ_a k_a log(1 + t_a)
    cos, minus_sin = _trig(period)
    phase = a[row] * j[:, None] % period
    t_rows = t[row]
    x = 1.0 + t_rows * cos[phase]
    y = t_rows * minus_sin[phase]
    k_rows = k[row]
    log_abs_q = 0.5 * np.einsum("ij,ij->i", k_rows, np.log(x * x + y * y)) - log_norm[row]
    arg_q = np.einsum("ij,ij->i", k_rows, np.arctan2(y, x))

    # Σ_{u=0}^{n-1} e^{-θu} ω^{j(r-u)} = ω^{jr} (1 - ξ^n) / (1 - ξ) with ξ = e^{-θ} ω^{-j}; both factors are
    # formed as 2 sin²(φ/2) - cos φ · expm1(-θ·) + i e^{-θ·} sin φ, which has no cancellation near j = 0.
    th = theta[row]
    terms_n = n_terms[row]
    step = _TWO_PI / period
    denominator = _one_minus(j * step, th)
    numerator = _one_minus((j * terms_n % period) * step, th * terms_n)
    shift = (j * r[row] % period) * step
    terms = np.exp(log_abs_q + 1j * (arg_q + shift)) * (numerator / denominator)
    return terms.real * np.where((j == 0) | (2 * j == period), 1.0, 2.0)


def _trig(period: int) -> tuple[Any, Any]:
    """cos(2π x / N) and -sin(2π x / N) for x = 0 … N-1 (looked up instead of evaluated per term)."""
    return _cached_trig(period) if period <= 1 << 16 else _make_trig(period)


def _make_trig(period: int) -> tuple[Any, Any]:
    angle = np.arange(period) * (_TWO_PI / period)
    return np.cos(angle), -np.sin(angle)


_cached_trig = lru_cache(maxsize=32)(_make_trig)  # ≤ 32 MiB


def _frequencies(period: int, a: Any, weights: Any) -> tuple[Any, Any]:
    """(row, j) with j ∈ [0, N/2] where |Q(j)| may exceed e^{-45}.

    |Q(j)| ≤ exp(-B(j)) with B(j) = Σ_a w_a (1 - cos(2π a j / N)) and w_a = k_a t_a / (1 + t_a)², because
    |1 + t e^{-iφ}|² / (1 + t)² = 1 - 2t(1 - cos φ)/(1 + t)² ≤ exp(-2t(1 - cos φ)/(1 + t)²). Σ_a w_a cos(...)
    is the real part of the DFT of the weights placed at positions a mod N, so B is one real FFT per
    problem whatever the number and size of the values.
    """
    problems = a.shape[0]
    rows_list, js_list = [], []
    step = max(1, _CHUNK // period)
    for lo in range(0, problems, step):
        block_a, block_w = a[lo : lo + step], weights[lo : lo + step]
        placed = np.zeros((block_a.shape[0], period))
        # Padding entries carry weight 0 at position 0, which adds nothing.
        np.add.at(placed, (np.arange(block_a.shape[0])[:, None], block_a % period), block_w)
        bound = block_w.sum(axis=1)[:, None] - np.fft.rfft(placed, axis=1).real
        rows, js = np.nonzero(bound < _NEGLIGIBLE)
        rows_list.append(rows + lo)
        js_list.append(js)
    return np.concatenate(rows_list), np.concatenate(js_list)
