"""Properties of the statistics package (hypothesis), checked against independent computations written from
docs/reference/statistics.md in the plainest way (brute-force enumeration, exact fractions, the textbook
closed forms), and agreement of its fast paths with exact counts."""

from __future__ import annotations

import itertools
import math
import random
from fractions import Fraction
from math import comb
from statistics import NormalDist

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from regatta_shared.statistics import (
    NullSummary,
    Participant,
    _direct,
    _tilted,
    holm,
    lower_tail_count,
    p_value,
    p_values,
    paired_permutation_test,
    pairwise_p_values,
    pass_at_k,
    pass_at_k_task,
    rank_lower_is_better,
    rank_participants,
    signflip,
    summarize_differences,
    summarize_pair,
    tied_flags,
    wilson,
)

MODERATE = settings(max_examples=60, deadline=None)

# (n, c) with 0 ≤ c ≤ n, drawn without flatmap (much cheaper to generate).
counts_nc = st.tuples(st.integers(min_value=1, max_value=40), st.integers(min_value=0, max_value=40)).map(
    lambda nc: (nc[0], min(nc[1], nc[0]))
)
task_lists = st.lists(counts_nc, min_size=1, max_size=25)
scores = st.tuples(counts_nc, st.integers(min_value=1, max_value=8)).map(
    lambda t: pass_at_k_task(t[0][0], t[0][1], min(t[1], t[0][0]))
)


@st.composite
def score_pairs(draw: st.DrawFn) -> tuple[list[Fraction], list[Fraction]]:
    pairs = draw(st.lists(st.tuples(scores, scores), max_size=40))
    return [a for a, _ in pairs], [b for _, b in pairs]


# --- pass@k ------------------------------------------------------------------------------------------


@MODERATE
@given(task_lists)
def test_pass_at_k_is_non_decreasing_in_k(tasks: list[tuple[int, int]]) -> None:
    top = min(n for n, _ in tasks)
    values = [pass_at_k(tasks, k) for k in range(1, top + 1)]
    assert all(v is not None for v in values)
    assert values == sorted(values)  # type: ignore[type-var]
    assert pass_at_k(tasks, top + 1) is None


@MODERATE
@given(counts_nc, st.integers(min_value=1, max_value=40))
def test_pass_at_k_task_is_the_exact_rational_formula(nc: tuple[int, int], k: int) -> None:
    n, c = nc
    if k > n:
        with pytest.raises(ValueError):
            pass_at_k_task(n, c, k)
        return
    value = pass_at_k_task(n, c, k)
    assert value == 1 - Fraction(comb(n - c, k), comb(n, k))
    product = Fraction(1)
    for j in range(n - c + 1, n + 1):
        product *= 1 - Fraction(k, j)
    assert value == (1 if n - c < k else 1 - product)
    assert 0 <= value <= 1


@MODERATE
@given(task_lists, st.integers(min_value=1, max_value=5))
def test_pass_at_k_is_the_unweighted_mean_over_tasks(tasks: list[tuple[int, int]], k: int) -> None:
    value = pass_at_k(tasks, k)
    if any(n < k for n, _ in tasks):
        assert value is None
    else:
        assert value == sum((pass_at_k_task(n, c, k) for n, c in tasks), Fraction(0)) / len(tasks)


# --- Wilson ------------------------------------------------------------------------------------------


@MODERATE
@given(st.integers(min_value=1, max_value=5000), st.data())
def test_wilson_contains_the_estimate_and_lies_in_unit_interval(n_tasks: int, data: st.DataObject) -> None:
    estimate = Fraction(data.draw(st.integers(0, 10 * n_tasks)), 10 * n_tasks)
    low, high = wilson(estimate, n_tasks)
    assert 0.0 <= low <= float(estimate) <= high <= 1.0
    assert high > low
    # Independently: the Wilson bounds are the roots in p of (ŷ - p)² = z² p (1 - p) / N, i.e.
    # (2Nŷ + z² ∓ z sqrt(z² + 4Nŷ(1 - ŷ))) / (2(N + z²)), with z = Φ⁻¹(0.975) from the standard library.
    z = NormalDist().inv_cdf(0.975)
    y, n = float(estimate), n_tasks
    root = z * math.sqrt(z * z + 4 * n * y * (1 - y))
    expected = (
        (2 * n * y + z * z - root) / (2 * (n + z * z)),
        (2 * n * y + z * z + root) / (2 * (n + z * z)),
    )
    assert math.isfinite(low) and math.isfinite(high)
    assert low == pytest.approx(max(0.0, expected[0]), abs=1e-12)
    assert high == pytest.approx(min(1.0, expected[1]), abs=1e-12)


# --- the paired test ---------------------------------------------------------------------------------


@MODERATE
@given(score_pairs())
def test_paired_test_is_symmetric_and_a_probability(pair: tuple[list[Fraction], list[Fraction]]) -> None:
    a, b = pair
    p = paired_permutation_test(a, b)
    assert p == paired_permutation_test(b, a)
    assert 0.0 < p <= 1.0
    if sum(a) == sum(b):
        assert p == 1.0


def brute_force_p(a: list[Fraction], b: list[Fraction]) -> float:
    """statistics.md §4 by enumeration: flip the sign of every subset of the per-task differences and count
    the sums at least as far from zero as the observed one; above m·S = 10^8 (S = Σ|D_i| once scaled to
    coprime integers) the spec prescribes the normal approximation instead."""
    differences = [y - x for x, y in zip(a, b, strict=True) if y != x]
    if not differences:
        return 1.0
    scale = math.lcm(*(d.denominator for d in differences))
    integers = [int(d * scale) for d in differences]
    common = math.gcd(*integers)
    integers = [d // common for d in integers]
    observed = abs(sum(integers))
    if len(integers) * sum(map(abs, integers)) > 10**8:
        return math.erfc(observed / math.sqrt(2 * sum(d * d for d in integers)))
    hits = sum(
        1
        for signs in itertools.product((1, -1), repeat=len(integers))
        if abs(sum(s * d for s, d in zip(signs, integers, strict=True))) >= observed
    )
    return hits / 2 ** len(integers)


@st.composite
def small_score_pairs(draw: st.DrawFn) -> tuple[list[Fraction], list[Fraction]]:
    pairs = draw(st.lists(st.tuples(scores, scores), max_size=11))
    return [a for a, _ in pairs], [b for _, b in pairs]


@MODERATE
@given(small_score_pairs())
def test_paired_test_equals_the_enumerated_sign_flip_distribution(
    pair: tuple[list[Fraction], list[Fraction]],
) -> None:
    a, b = pair
    p = paired_permutation_test(a, b)
    assert math.isfinite(p)
    assert p == pytest.approx(brute_force_p(a, b), rel=1e-12)


@MODERATE
@given(st.lists(scores, max_size=40))
def test_paired_test_of_identical_scores_is_one(a: list[Fraction]) -> None:
    assert paired_permutation_test(a, list(a)) == 1.0


@MODERATE
@given(st.lists(st.integers(min_value=-12, max_value=12), max_size=12))
def test_exact_count_matches_brute_force_enumeration(differences: list[int]) -> None:
    summary = summarize_differences(differences)
    nonzero = [d for d in differences if d]
    if not nonzero:
        assert p_value(summary) == 1.0
        return
    g = math.gcd(*nonzero)
    scaled = [d // g for d in nonzero]
    t = abs(sum(scaled))
    hits = sum(
        1
        for mask in range(1 << len(scaled))
        if abs(sum(-d if mask >> i & 1 else d for i, d in enumerate(scaled))) >= t
    )
    assert p_value(summary) == hits / (1 << len(scaled))


@st.composite
def histograms(draw: st.DrawFn) -> tuple[list[int], list[int], int]:
    values = sorted(draw(st.sets(st.integers(min_value=1, max_value=12), min_size=1, max_size=8)))
    counts = [draw(st.integers(min_value=1, max_value=50)) for _ in values]
    s = sum(a * k for a, k in zip(values, counts, strict=True))
    spread = 9 * int(math.sqrt(sum(a * a * k for a, k in zip(values, counts, strict=True)))) + 1
    r = draw(st.integers(min_value=max(0, s // 2 - spread), max_value=max(0, (s - 1) // 2)))
    return values, counts, r


@settings(max_examples=30, deadline=None)
@given(st.lists(histograms(), min_size=1, max_size=4))
def test_tilted_tails_agree_with_exact_counts(problems: list[tuple[list[int], list[int], int]]) -> None:
    tails = _tilted.tilted_lower_tails(problems)
    for (values, counts, r), tail in zip(problems, tails, strict=True):
        exact = float(Fraction(lower_tail_count(values, counts, r), 1 << sum(counts)))
        # None: declined in favour of the direct DP (a spectrum too flat to be worth it).
        if tail is not None:
            assert tail == pytest.approx(exact, rel=1e-11)
        assert _direct.float_dp_lower_tail(values, counts, r) == pytest.approx(exact, rel=1e-13)


def test_tilted_path_on_a_large_problem_deep_in_the_tail() -> None:
    values, counts = [1, 2, 3, 4, 5, 6, 7, 8, 9, 10], [90, 70, 55, 40, 30, 24, 18, 12, 6, 3]
    s = sum(a * k for a, k in zip(values, counts, strict=True))
    sd = math.sqrt(sum(a * a * k for a, k in zip(values, counts, strict=True))) / 2
    problems = [(values, counts, int(s / 2 - z * sd)) for z in (0.3, 2.0, 6.0, 10.0, 14.0)]
    tails = _tilted.tilted_lower_tails(problems)
    for (_, _, r), tail in zip(problems, tails, strict=True):
        exact = lower_tail_count(values, counts, r) / (1 << sum(counts))
        assert tail == pytest.approx(exact, rel=1e-11)
    assert tails[-1] is not None and tails[-1] < 1e-40


def test_direct_methods_for_huge_supports_agree_with_exact_counts() -> None:
    rng = random.Random(3)
    for _ in range(20):
        values = sorted(rng.sample(range(1, 5000), 4))
        counts = [rng.randint(1, 5) for _ in values]
        s = sum(a * k for a, k in zip(values, counts, strict=True))
        r = rng.randint(0, s // 2)
        exact = lower_tail_count(values, counts, r)
        assert _direct.meet_in_the_middle_count(values, counts, r) == exact
        assert _direct.float_dp_lower_tail(values, counts, r) == pytest.approx(
            exact / (1 << sum(counts)), rel=1e-13
        )


def test_huge_support_routes_to_a_direct_method() -> None:
    # m·S ≤ 10^8 but S > 10^6: the tilted period would be too long.
    summary = NullSummary(t=1_999_999 - 3, values=(1, 1_999_999), counts=(3, 1))
    exact = lower_tail_count(summary.values, summary.counts, (summary.s - summary.t) // 2)
    assert p_value(summary) == 2 * exact / 16


def test_normal_approximation_above_the_threshold() -> None:
    summary = NullSummary(t=3001, values=(1, 2, 7), counts=(6000, 5000, 3000))
    assert summary.m * summary.s > signflip.NORMAL_APPROXIMATION_THRESHOLD
    expected = math.erfc(3001 / math.sqrt(2 * (6000 + 4 * 5000 + 49 * 3000)))
    assert p_value(summary) == expected


def test_batch_matches_single_and_exact_fallback_without_numpy(monkeypatch: pytest.MonkeyPatch) -> None:
    rng = random.Random(5)
    summaries = []
    for _ in range(12):
        diffs = [rng.choice([0, 0, 1, -1, 2, -2, 3, 5, -4]) for _ in range(rng.choice([8, 60, 300]))]
        summaries.append(summarize_differences(diffs))
    batch = p_values(summaries)
    assert batch == [p_value(s) for s in summaries]
    monkeypatch.setattr(signflip, "_tilted", None)
    exact = p_values(summaries)
    assert batch == pytest.approx(exact, rel=1e-11)


def test_pairwise_p_values_match_the_single_pair_test() -> None:
    assert pairwise_p_values([[], []]) == {(0, 1): 1.0}
    assert pairwise_p_values([[Fraction(1)]]) == {}
    rng = random.Random(9)
    for denominators in ([1], [10], [6, 4], [1024, 3], [2**70, 3]):
        vectors = [
            [Fraction(rng.randint(0, d), d) for d in (rng.choice(denominators) for _ in range(40))]
            for _ in range(5)
        ]
        batch = pairwise_p_values(vectors)
        assert len(batch) == 10
        for (i, j), p in batch.items():
            assert p == paired_permutation_test(vectors[i], vectors[j])
            forward, backward = summarize_pair(vectors[i], vectors[j]), summarize_pair(vectors[j], vectors[i])
            assert (forward.t, forward.values, forward.counts) == (
                -backward.t,
                backward.values,
                backward.counts,
            )


# --- Holm --------------------------------------------------------------------------------------------


@MODERATE
@given(st.lists(st.floats(min_value=0.0, max_value=1.0), min_size=1, max_size=30))
def test_holm_adjusted_values_are_monotone_capped_and_consistent(p: list[float]) -> None:
    result = holm(p)
    order = sorted(range(len(p)), key=lambda i: p[i])
    adjusted = [result.adjusted[i] for i in order]
    assert adjusted == sorted(adjusted)
    assert all(p[i] <= result.adjusted[i] <= 1.0 for i in range(len(p)))
    rejected = [result.rejected[i] for i in order]
    assert rejected == sorted(rejected, reverse=True)  # a prefix of the sorted order is rejected
    expected_rejected, expected_adjusted = reference_holm(p)
    assert result.rejected == expected_rejected
    assert result.adjusted == pytest.approx(expected_adjusted, rel=1e-12, abs=0)


def reference_holm(p: list[float], alpha: float = 0.05) -> tuple[list[bool], list[float]]:
    """Holm's step-down procedure as statistics.md §5 states it: sort ascending, reject while
    p_(j) ≤ α/(P − j + 1), stop at the first failure; adjusted p_(j) = min(1, max_{i ≤ j} (P − i + 1)
    p_(i))."""
    size = len(p)
    order = sorted(range(size), key=lambda i: p[i])
    rejected = [False] * size
    for j, i in enumerate(order, start=1):
        if p[i] > alpha / (size - j + 1):
            break
        rejected[i] = True
    adjusted = [0.0] * size
    running = 0.0
    for j, i in enumerate(order, start=1):
        running = max(running, (size - j + 1) * p[i])
        adjusted[i] = min(1.0, running)
    return rejected, adjusted


# --- ranks -------------------------------------------------------------------------------------------


@st.composite
def leaderboards(draw: st.DrawFn) -> list[Participant]:
    tasks = draw(st.integers(min_value=1, max_value=25))
    size = draw(st.integers(min_value=1, max_value=7))
    rows = []
    for index in range(size):
        skill = draw(st.floats(min_value=0.0, max_value=1.0))
        seed = draw(st.integers(0, 2**16))
        rng = random.Random(seed)
        task_scores = {f"t{i}": Fraction(int(rng.random() < skill)) for i in range(tasks)}
        group = draw(st.sampled_from(["full", "full", "parity"]))
        estimate = sum(task_scores.values(), Fraction(0)) / tasks
        rows.append(
            Participant(f"p{index}", f"name{draw(st.integers(0, 3))}", index, group, estimate, task_scores)
        )
    # One task list per group, as the spec requires: the parity group uses a prefix of the tasks.
    parity = [p for p in rows if p.group == "parity"]
    keep = max(1, tasks // 2)
    for p in parity:
        rows[rows.index(p)] = Participant(
            p.id,
            p.name,
            p.order,
            p.group,
            sum(list(p.task_scores.values())[:keep], Fraction(0)) / keep,
            dict(list(p.task_scores.items())[:keep]),
        )
    return rows


@MODERATE
@given(leaderboards(), st.randoms(use_true_random=False))
def test_ranks_do_not_depend_on_listing_order(board: list[Participant], rnd: random.Random) -> None:
    expected = rank_participants(board)
    shuffled = list(board)
    rnd.shuffle(shuffled)
    assert rank_participants(shuffled) == expected
    ranks = {r.id: r.rank for r in expected}
    assert min(ranks.values()) == 1
    assert [r.rank for r in expected] == sorted(r.rank for r in expected)
    counts = {rank: list(ranks.values()).count(rank) for rank in ranks.values()}
    assert all(r.tied == (counts[r.rank] > 1) for r in expected)


def reference_ranks(board: list[Participant]) -> dict[str, tuple[int, bool]]:
    """Ranks and ties exactly as statistics.md §5 defines them, from enumerated p values and exact Holm."""
    alpha = 0.05
    rejected: set[frozenset[str]] = set()
    for group in {p.group for p in board}:
        members = [p for p in board if p.group == group]
        pairs = [
            (
                frozenset((x.id, y.id)),
                brute_force_p(list(x.task_scores.values()), list(y.task_scores.values())),
            )
            for x, y in itertools.combinations(members, 2)
        ]
        pairs.sort(key=lambda pair: pair[1])
        for j, (key, p) in enumerate(pairs, start=1):
            if p > alpha / (len(pairs) - j + 1):
                break
            rejected.add(key)

    def beats(b: Participant, a: Participant) -> bool:
        return b.estimate > a.estimate and (b.group != a.group or frozenset((a.id, b.id)) in rejected)

    top = max(board, key=lambda p: (p.estimate, -p.order))
    ranks = {a.id: 1 if a is top or not beats(top, a) else 1 + sum(beats(b, a) for b in board) for a in board}
    return {pid: (rank, list(ranks.values()).count(rank) > 1) for pid, rank in ranks.items()}


@st.composite
def small_leaderboards(draw: st.DrawFn) -> list[Participant]:
    """As leaderboards(), with at most 10 tasks so that every pair's p can be enumerated."""
    board = draw(leaderboards())
    keep = min(10, len(board[0].task_scores))
    return [
        Participant(
            p.id,
            p.name,
            p.order,
            p.group,
            sum(list(p.task_scores.values())[:keep], Fraction(0)) / keep,
            dict(list(p.task_scores.items())[:keep]),
        )
        for p in board
    ]


@MODERATE
@given(small_leaderboards())
def test_ranks_and_ties_equal_the_reference_definition(board: list[Participant]) -> None:
    ranked = {r.id: (r.rank, r.tied) for r in rank_participants(board)}
    assert ranked == reference_ranks(board)


def test_participants_of_one_group_must_share_the_task_list() -> None:
    a = Participant("a", "a", 0, "g", Fraction(1), {"x": Fraction(1)})
    b = Participant("b", "b", 1, "g", Fraction(1), {"y": Fraction(1)})
    with pytest.raises(ValueError, match="task list"):
        rank_participants([a, b])


def test_different_groups_are_never_tied() -> None:
    full = Participant("a", "a", 0, "full", Fraction(1, 2), {"x": Fraction(1), "y": Fraction(0)})
    parity = Participant("b", "b", 1, "parity", Fraction(1, 3), {"x": Fraction(1), "z": Fraction(0)})
    ranked = rank_participants([parity, full])
    assert [(r.id, r.rank, r.tied) for r in ranked] == [("a", 1, False), ("b", 2, False)]
    assert ranked[1].comparison.p_value is None and ranked[1].comparison.p_holm is None


def test_rank_lower_is_better_is_competition_ranking() -> None:
    ranks = rank_lower_is_better({"a": 0.5, "b": 0.2, "c": 0.5, "d": None, "e": 0.7, "f": 0.2})
    assert ranks == {"a": 3, "b": 1, "c": 3, "d": None, "e": 5, "f": 1}
    assert tied_flags(ranks) == {"a": True, "b": True, "c": True, "d": False, "e": False, "f": True}
    with pytest.raises(ValueError):
        rank_lower_is_better({"a": float("nan")})
