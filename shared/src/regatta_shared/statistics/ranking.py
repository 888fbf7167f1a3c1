"""Leaderboard ranks with statistically honest ties (statistics.md §5-6)."""

from __future__ import annotations

import math
from collections import Counter, defaultdict
from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass
from fractions import Fraction

from .multiple import ALPHA, holm
from .paired import pairwise_p_values

__all__ = [
    "Participant",
    "RankedParticipant",
    "TopComparison",
    "rank_lower_is_better",
    "rank_participants",
    "tied_flags",
]


@dataclass(frozen=True, slots=True)
class Participant:
    """One leaderboard row's input for one pass metric.

    ``order`` is smaller for the earlier qualifying run (tiebreak for ``top``); ``group`` is the comparison
    group key (benchmark version/digest + task set + metric): tests only happen inside a group;
    ``task_scores`` is this metric's per-task score keyed by task name.
    """

    id: str
    name: str
    order: int
    group: Hashable
    estimate: Fraction
    task_scores: Mapping[str, Fraction]


@dataclass(frozen=True, slots=True)
class TopComparison:
    """What the rank tooltip shows: this participant against ``top``.

    ``difference`` is ``estimate - top_estimate`` (≤ 0). ``p_value``/``p_holm`` are ``None`` for ``top``
    itself and for participants outside top's comparison group (different measurements are not tested).
    """

    top_id: str
    top_estimate: Fraction
    estimate: Fraction
    difference: Fraction
    p_value: float | None
    p_holm: float | None


@dataclass(frozen=True, slots=True)
class RankedParticipant:
    id: str
    name: str
    estimate: Fraction
    rank: int
    tied: bool
    comparison: TopComparison


@dataclass(frozen=True, slots=True)
class _PairResult:
    p_value: float
    p_holm: float
    rejected: bool


def rank_participants(participants: Sequence[Participant], alpha: float = ALPHA) -> list[RankedParticipant]:
    """Rank participants by one pass metric; returns them in display order (rank ↑, estimate ↓, name ↑).

    Within each comparison group every pair is tested (exact paired sign-flip test) and Holm controls the
    family-wise error over all pairs of the group. b beats a when ŷ_b > ŷ_a and either the pair is in one
    group and Holm rejects it, or the two are in different groups (different measurements are never
    tied). rank(top) = 1; rank(a) = 1 if top does not beat a, else 1 + |{b : b beats a}|. Anchoring rank 1
    on "not separable from the best" is what lets an agent share first place instead of being pushed
    below it by noise; the count of beaters (not the position) is what makes ranks repeat and skip.
    """
    ids = [p.id for p in participants]
    if len(set(ids)) != len(ids):
        raise ValueError("participant ids must be unique")
    if not participants:
        return []
    pairs = _group_tests(participants, alpha)
    # Exact comparisons of the Fraction estimates, done once: level[id] orders the distinct estimates.
    level = {e: i for i, e in enumerate(sorted({p.estimate for p in participants}))}
    levels = {p.id: level[p.estimate] for p in participants}

    def beats(b: Participant, a: Participant) -> bool:
        if levels[b.id] <= levels[a.id]:
            return False
        if b.group != a.group:
            return True
        return pairs[_key(a.id, b.id)].rejected

    top = min(participants, key=lambda p: (-p.estimate, p.order, p.name, p.id))
    ranks: dict[str, int] = {}
    for a in participants:
        if a is top or not beats(top, a):
            ranks[a.id] = 1
        else:
            ranks[a.id] = 1 + sum(1 for b in participants if beats(b, a))
    shared = Counter(ranks.values())

    ranked: list[RankedParticipant] = []
    for a in participants:
        result = None if a is top or a.group != top.group else pairs[_key(a.id, top.id)]
        comparison = TopComparison(
            top_id=top.id,
            top_estimate=top.estimate,
            estimate=a.estimate,
            difference=a.estimate - top.estimate,
            p_value=None if result is None else result.p_value,
            p_holm=None if result is None else result.p_holm,
        )
        rank = ranks[a.id]
        ranked.append(
            RankedParticipant(
                id=a.id,
                name=a.name,
                estimate=a.estimate,
                rank=rank,
                tied=shared[rank] > 1,
                comparison=comparison,
            )
        )
    ranked.sort(key=lambda r: (r.rank, -r.estimate, r.name, r.id))
    return ranked


def _key(a: str, b: str) -> tuple[str, str]:
    return (a, b) if a < b else (b, a)


def _group_tests(participants: Sequence[Participant], alpha: float) -> dict[tuple[str, str], _PairResult]:
    """Paired tests of every same-group pair, Holm-corrected per group."""
    groups: defaultdict[Hashable, list[Participant]] = defaultdict(list)
    for p in participants:
        groups[p.group].append(p)
    results: dict[tuple[str, str], _PairResult] = {}
    for members in groups.values():
        if len(members) < 2:
            continue
        tasks = list(members[0].task_scores)
        task_set = set(tasks)
        vectors: list[list[Fraction]] = []
        for p in members:
            scores = p.task_scores
            if list(scores) == tasks:  # same order: the common case, no per-task lookups
                vectors.append(list(scores.values()))
            elif len(scores) == len(tasks) and set(scores) == task_set:
                vectors.append([scores[t] for t in tasks])
            else:
                raise ValueError(
                    f"participants of one comparison group must share one task list ({p.id} differs)"
                )
        tested = pairwise_p_values(vectors)
        keys = list(tested)
        correction = holm([tested[k] for k in keys], alpha)
        for (i, j), p_value, p_holm, rejected in zip(
            keys, (tested[k] for k in keys), correction.adjusted, correction.rejected, strict=True
        ):
            results[_key(members[i].id, members[j].id)] = _PairResult(p_value, p_holm, rejected)
    return results


def rank_lower_is_better(values: Mapping[str, float | None]) -> dict[str, int | None]:
    """Competition ranks (1, 1, 3) for cost/time/tokens per task: lower is better, equal values share a
    rank, no test (these are measured, not estimated from a sample of tasks), ``None`` is unranked."""
    present: list[tuple[float, str]] = []
    for key, value in values.items():
        if value is None:
            continue
        if math.isnan(value):
            raise ValueError(f"value of {key!r} is NaN")
        present.append((value, key))
    present.sort()
    ranks: dict[str, int | None] = dict.fromkeys(values)
    previous: float | None = None
    rank = 0
    for position, (value, key) in enumerate(present, start=1):
        if value != previous:
            rank = position
            previous = value
        ranks[key] = rank
    return ranks


def tied_flags(ranks: Mapping[str, int | None]) -> dict[str, bool]:
    """``True`` for every entry that shares its (non-None) rank with another."""
    shared = Counter(r for r in ranks.values() if r is not None)
    return {key: r is not None and shared[r] > 1 for key, r in ranks.items()}
