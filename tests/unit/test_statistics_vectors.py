"""Test vectors of docs/reference/statistics.md §8, reproduced exactly, and cross-checks with scipy and
statsmodels."""

from __future__ import annotations

import math
import random
from fractions import Fraction

import pytest
from regatta_shared.statistics import (
    Participant,
    holm,
    paired_permutation_test,
    pass_at_1,
    pass_at_k,
    pass_at_k_curve,
    pass_at_k_score,
    pass_at_k_task,
    rank_participants,
    wilson,
)
from scipy import stats
from statsmodels.stats.multitest import multipletests
from statsmodels.stats.proportion import proportion_confint

TOL = 1e-12


def v(indices: range | list[int], n: int) -> list[Fraction]:
    """The spec's v(idx, N): 0/1 per-task scores with 1 at the listed task indices."""
    chosen = set(indices)
    return [Fraction(int(i in chosen)) for i in range(n)]


def participant(pid: str, scores: list[Fraction], order: int, group: str = "g") -> Participant:
    return Participant(
        id=pid,
        name=pid,
        order=order,
        group=group,
        estimate=sum(scores, Fraction(0)) / len(scores),
        task_scores={f"t{i:02d}": s for i, s in enumerate(scores)},
    )


def ranks_of(*participants: Participant) -> dict[str, int]:
    return {r.id: r.rank for r in rank_participants(list(participants))}


def per_task(counts: tuple[int, ...], n: int, k: int) -> list[Fraction]:
    return [pass_at_k_task(n, c, k) for c in counts]


def assert_interval(actual: tuple[float, float], expected: tuple[float, float]) -> None:
    assert actual[0] == pytest.approx(expected[0], abs=TOL)
    assert actual[1] == pytest.approx(expected[1], abs=TOL)


# --- vector 1 ---------------------------------------------------------------------------------------


def test_vector_01_pass_at_k_of_one_task() -> None:
    assert pass_at_k_task(10, 3, 1) == Fraction(3, 10)
    assert pass_at_k_task(10, 3, 5) == Fraction(11, 12)
    assert pass_at_k_task(10, 3, 8) == 1
    assert pass_at_k_task(10, 0, 5) == 0
    assert pass_at_k_task(5, 2, 5) == 1
    big = pass_at_k_task(200, 13, 10)
    assert big == Fraction(78115540005393, 157000030132960)
    assert float(big) == pytest.approx(0.4975511147306061, abs=TOL)
    huge = pass_at_k_task(2000, 3, 1000)
    assert huge == Fraction(3499, 3998)
    assert float(huge) == pytest.approx(0.8751875937968985, abs=TOL)


# --- vector 2 ---------------------------------------------------------------------------------------


def test_vector_02_unweighted_task_mean_and_undefined_pass_at_k() -> None:
    tasks = [(5, 0), (5, 2), (3, 3), (10, 1)]
    assert pass_at_1(tasks) == Fraction(3, 8)
    assert float(pass_at_k(tasks, 1) or 0) == 0.375
    assert [pass_at_k_task(n, c, 3) for n, c in tasks] == [0, Fraction(9, 10), 1, Fraction(3, 10)]
    assert pass_at_k(tasks, 3) == Fraction(11, 20)
    assert pass_at_k(tasks, 5) is None  # a task has n = 3: undefined, never dropped or clamped
    assert [k for k, _ in pass_at_k_curve(tasks)] == [1, 2, 3]


def test_vector_02_is_not_the_pooled_value() -> None:
    tasks = [(5, 0), (5, 2), (3, 3), (10, 1)]
    pooled = Fraction(sum(c for _, c in tasks), sum(n for n, _ in tasks))
    assert float(pooled) == pytest.approx(0.2608695652173913, abs=TOL)
    assert pass_at_1(tasks) != pooled
    assert float(pass_at_1(tasks) or 0) != pytest.approx(0.2608695652173913, abs=1e-3)


# --- vector 3 ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("passed", "n", "expected"),
    [
        (3, 5, (0.2307242812760128, 0.882379225767352)),
        (5, 5, (0.5655175352168251, 1.0)),
        (0, 5, (0.0, 0.43448246478317476)),
        (14, 20, (0.4810271816464765, 0.8545227551323956)),
    ],
)
def test_vector_03_wilson_one_outcome_per_task(passed: int, n: int, expected: tuple[float, float]) -> None:
    assert_interval(wilson(Fraction(passed, n), n), expected)
    score = pass_at_k_score([(1, 1)] * passed + [(1, 0)] * (n - passed), 1)
    assert score is not None
    assert (score.value, score.n) == (passed / n, n)
    assert_interval((score.ci_low, score.ci_high), expected)


# --- vector 4 ---------------------------------------------------------------------------------------


def test_vector_04_fractional_task_means_and_their_intervals() -> None:
    tasks = [(4, c) for c in (4, 0, 2, 3, 1)]
    one = pass_at_k_score(tasks, 1)
    assert pass_at_1(tasks) == Fraction(1, 2)
    assert one is not None and one.value == 0.5 and one.n == 5
    assert_interval((one.ci_low, one.ci_high), (0.17042358064358776, 0.8295764193564122))

    assert [pass_at_k_task(4, c, 2) for _, c in tasks] == [1, 0, Fraction(5, 6), 1, Fraction(1, 2)]
    assert pass_at_k(tasks, 2) == Fraction(2, 3)
    two = pass_at_k_score(tasks, 2)
    assert two is not None
    assert two.value == pytest.approx(0.6666666666666666, abs=TOL)
    assert_interval((two.ci_low, two.ci_high), (0.27519899421099175, 0.9133068508612832))

    assert pass_at_k(tasks, 4) == Fraction(4, 5)
    four = pass_at_k_score(tasks, 4)
    assert four is not None and four.value == 0.8
    assert_interval((four.ci_low, four.ci_high), (0.37553462976252533, 0.9637758913675698))


# --- vector 5 ---------------------------------------------------------------------------------------


def test_vector_05_interval_never_has_zero_width() -> None:
    score = pass_at_k_score([(4, 4)] * 5, 1)
    assert score is not None and score.value == 1.0
    assert_interval((score.ci_low, score.ci_high), (0.5655175352168251, 1.0))
    assert score.ci_high - score.ci_low > 0.4


# --- vectors 6-8: ties and non-ties on 0/1 scores ---------------------------------------------------


def test_vector_06_tie() -> None:
    a, b = v(range(5), 10), v([0, 1, 2, 3, 5, 6, 7, 8], 10)
    assert paired_permutation_test(a, b) == 0.375
    assert ranks_of(participant("A", a, 0), participant("B", b, 1)) == {"A": 1, "B": 1}


def test_vector_07_not_a_tie() -> None:
    a, b = v([0, 1], 12), v(range(11), 12)
    assert paired_permutation_test(a, b) == 0.00390625
    assert ranks_of(participant("A", a, 0), participant("B", b, 1)) == {"A": 2, "B": 1}


def test_vector_08_five_tasks_can_never_separate() -> None:
    a, b = v([], 5), v(range(5), 5)
    assert paired_permutation_test(a, b) == 0.0625
    ranked = rank_participants([participant("A", a, 0), participant("B", b, 1)])
    assert [(r.id, r.rank, r.tied) for r in ranked] == [("B", 1, True), ("A", 1, True)]
    # On 0/1 scores the test is the exact sign test on the 5 discordant tasks: scipy's binomial test is an
    # independent oracle for our p (a paired t-test, which sees zero variance here, would call it certain).
    oracle = stats.binomtest(5, 5, 0.5).pvalue
    assert math.isfinite(oracle) and paired_permutation_test(a, b) == pytest.approx(oracle, rel=1e-15)


# --- vector 9: fractional per-task scores -----------------------------------------------------------


def test_vector_09_pass_at_1_and_pass_at_2() -> None:
    c_a, c_b = (4, 3, 2, 4, 1, 0, 2, 3), (4, 4, 4, 4, 3, 2, 2, 4)
    a1, b1 = per_task(c_a, 4, 1), per_task(c_b, 4, 1)
    assert sum(a1) / 8 == Fraction(19, 32) and float(sum(a1) / 8) == 0.59375
    assert sum(b1) / 8 == Fraction(27, 32) and float(sum(b1) / 8) == 0.84375
    assert paired_permutation_test(a1, b1) == 0.0625
    assert paired_permutation_test(per_task(c_a, 4, 2), per_task(c_b, 4, 2)) == 0.25


# --- vector 10: Holm and skipping ranks -------------------------------------------------------------


def test_vector_10_holm_and_skipped_ranks() -> None:
    a, b, c = v(range(16), 20), v([*range(15), 16], 20), v(range(4), 20)
    assert paired_permutation_test(a, b) == 1.0
    assert paired_permutation_test(a, c) == 0.00048828125
    assert paired_permutation_test(b, c) == 0.00048828125
    correction = holm([1.0, 0.00048828125, 0.00048828125])
    assert correction.rejected == [False, True, True]

    ranked = rank_participants([participant("A", a, 0), participant("B", b, 1), participant("C", c, 2)])
    assert [(r.id, r.rank, r.tied) for r in ranked] == [("A", 1, True), ("B", 1, True), ("C", 3, False)]
    by_id = {r.id: r.comparison for r in ranked}
    assert by_id["A"].p_value is None and by_id["A"].difference == 0
    assert by_id["B"].top_id == "A" and by_id["B"].p_value == 1.0 and by_id["B"].p_holm == 1.0
    assert by_id["C"].p_value == 0.00048828125
    assert by_id["C"].p_holm == 3 * 0.00048828125
    assert by_id["C"].difference == Fraction(4, 20) - Fraction(16, 20)


# --- vector 11: overlapping intervals are not a test ------------------------------------------------


def test_vector_11_overlapping_intervals_yet_significant() -> None:
    a, b = v(range(20), 30), v(range(12), 30)
    wa, wb = wilson(Fraction(20, 30), 30), wilson(Fraction(12, 30), 30)
    assert_interval(wa, (0.4878005164454384, 0.8076950191632386))
    assert_interval(wb, (0.24590628116801852, 0.5767963974667752))
    assert wb[1] > wa[0]  # the intervals overlap
    assert paired_permutation_test(a, b) == 0.0078125
    assert ranks_of(participant("A", a, 0), participant("B", b, 1)) == {"A": 1, "B": 2}


# --- vector 12: exact ties --------------------------------------------------------------------------


def test_vector_12_exact_tie_is_p_one() -> None:
    c_a = (0, 0, 3, 4, 4, 3, 2, 4, 0, 3, 2, 3, 4, 0)
    c_b = (3, 0, 2, 0, 1, 4, 2, 3, 4, 4, 0, 1, 4, 3)
    a, b = per_task(c_a, 4, 2), per_task(c_b, 4, 2)
    assert sum(a) == sum(b)
    assert paired_permutation_test(a, b) == 1.0
    assert paired_permutation_test(b, a) == 1.0
    ranked = rank_participants([participant("A", a, 0), participant("B", b, 1)])
    assert [(r.id, r.rank) for r in ranked] == [("A", 1), ("B", 1)]


# --- cross-checks -----------------------------------------------------------------------------------


def test_wilson_matches_statsmodels_for_integer_counts() -> None:
    for n in range(1, 61):
        for passed in range(n + 1):
            low, high = proportion_confint(passed, n, alpha=0.05, method="wilson")
            assert_interval(wilson(Fraction(passed, n), n), (max(0.0, low), min(1.0, high)))


def test_holm_matches_statsmodels() -> None:
    rng = random.Random(7)
    for size in (1, 2, 3, 5, 8, 13, 21, 34, 55, 89, 144, 233):  # statsmodels runs gc.collect() per call
        p = [rng.choice([rng.random(), rng.random() ** 4 / 50, 1.0, 0.05 / size]) for _ in range(size)]
        ours = holm(p)
        reject, adjusted, _, _ = multipletests(p, alpha=0.05, method="holm")
        assert ours.rejected == reject.tolist()
        assert ours.adjusted == pytest.approx(adjusted.tolist(), rel=1e-15, abs=0)


def test_zero_one_paired_test_is_the_exact_binomial_test_on_discordant_tasks() -> None:
    rng = random.Random(11)
    for _ in range(100):
        n = rng.choice([5, 20, 100, 1000, 2000])
        rate_a, rate_b = rng.random(), rng.random()
        a = [Fraction(int(rng.random() < rate_a)) for _ in range(n)]
        b = [Fraction(int(rng.random() < rate_b)) for _ in range(n)]
        wins_b = sum(1 for x, y in zip(a, b, strict=True) if y > x)
        wins_a = sum(1 for x, y in zip(a, b, strict=True) if x > y)
        expected = 1.0 if wins_a + wins_b == 0 else stats.binomtest(wins_b, wins_a + wins_b, 0.5).pvalue
        ours = paired_permutation_test(a, b)
        assert math.isfinite(expected) and math.isfinite(ours)
        if expected > 1e-300:
            assert ours == pytest.approx(expected, rel=1e-12)
        else:
            assert 0.0 < ours <= 1e-290
