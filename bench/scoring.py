"""Benchmark of the leaderboard statistics: 100 participants x 2,000 tasks x 10 attempts, one group.

Run: .venv/bin/python bench/scoring.py [--seed N] [--repeat N] [--baseline-pairs N]

Times the scoring step only (per-task pass@1 and pass@10, Wilson intervals, ALL pairwise exact paired
tests + Holm + ranks, for both metrics), excluding data generation, against a 2 s budget. The baseline is
the literal shift-algorithm DP of statistics.md section 4 (one O(S) numpy pass per differing task, float
probabilities) timed on a seeded sample of pairs and scaled to all pairs; its p-values on that sample are
also compared with ours.
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import time
from fractions import Fraction

import numpy as np
from regatta_shared.statistics import (
    Participant,
    pass_at_k,
    per_task_pass_at_k,
    rank_participants,
    score,
    summarize_pair,
)
from regatta_shared.statistics.signflip import p_value

PARTICIPANTS = 100
TASKS = 2000
ATTEMPTS = 10
BUDGET_S = 2.0


def generate(seed: int) -> dict[str, dict[str, tuple[int, int]]]:
    """Per participant, per task: (scored attempts, passed attempts).

    Logistic skill - difficulty model. 25 skill tiers of 4 near-identical participants: pairs inside a
    tier should tie, pairs far apart should not, and neighbouring tiers sit in between.
    """
    rng = np.random.default_rng(seed)
    difficulty = rng.normal(0.0, 1.6, TASKS)
    tiers = 25
    skill = np.repeat(np.linspace(-1.0, 1.0, tiers), PARTICIPANTS // tiers) + rng.normal(
        0.0, 0.003, PARTICIPANTS
    )
    prob = 1.0 / (1.0 + np.exp(-(skill[:, None] - difficulty[None, :])))
    passed = rng.binomial(ATTEMPTS, prob).tolist()
    names = [f"task-{i:04d}" for i in range(TASKS)]
    return {
        f"agent-{p:03d}": {name: (ATTEMPTS, c) for name, c in zip(names, passed[p], strict=True)}
        for p in range(PARTICIPANTS)
    }


def scoring(data: dict[str, dict[str, tuple[int, int]]]) -> dict[str, object]:
    """The step being budgeted: everything a leaderboard recomputation does for two pass metrics."""
    results: dict[str, object] = {}
    for metric, k in (("pass@1", 1), (f"pass@{ATTEMPTS}", ATTEMPTS)):
        participants = []
        scores = {}
        for order, (pid, tasks) in enumerate(data.items()):
            estimate = pass_at_k(list(tasks.values()), k)
            per_task = per_task_pass_at_k(tasks, k)
            assert estimate is not None and per_task is not None
            scores[pid] = score(estimate, len(tasks))
            participants.append(Participant(pid, pid, order, ("bench", "v1", "all"), estimate, per_task))
        results[metric] = (scores, rank_participants(participants))
    return results


def naive_p(scores_a: list[Fraction], scores_b: list[Fraction]) -> float:
    """The shift algorithm as written in the spec: one pass over all integer sums per differing task."""
    summary = summarize_pair(scores_a, scores_b)
    if summary.m == 0 or summary.t == 0:
        return 1.0
    s = summary.s
    dist = np.zeros(2 * s + 1)
    dist[s] = 1.0
    for a, count in zip(summary.values, summary.counts, strict=True):
        for _ in range(count):
            shifted = np.zeros_like(dist)
            shifted[a:] += dist[:-a]
            shifted[:-a] += dist[a:]
            dist = 0.5 * shifted
    t = abs(summary.t)
    return float(min(1.0, dist[: s - t + 1].sum() + dist[s + t :].sum()))


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--seed", type=int, default=20240611)
    parser.add_argument(
        "--repeat", type=int, default=5, help="timed runs of the scoring step (the best decides)"
    )
    parser.add_argument(
        "--baseline-pairs", type=int, default=12, help="sampled pairs per metric for the baseline"
    )
    args = parser.parse_args()

    started = time.perf_counter()
    data = generate(args.seed)
    generated = time.perf_counter() - started
    pairs = PARTICIPANTS * (PARTICIPANTS - 1) // 2
    print(f"data: {PARTICIPANTS} participants x {TASKS} tasks x {ATTEMPTS} attempts, one comparison group")
    load = os.getloadavg()[0]
    print(f"generated in {generated:.2f} s (not timed); load average {load:.1f} on {os.cpu_count()} CPUs")

    # Warm up lazy imports and code paths once (4 participants, all tasks), as in a running service.
    scoring(dict(list(data.items())[:4]))

    walls: list[float] = []
    cpus: list[float] = []
    results: dict[str, object] = {}
    for run in range(max(1, args.repeat)):
        wall, cpu = time.perf_counter(), time.process_time()
        results = scoring(data)
        walls.append(time.perf_counter() - wall)
        cpus.append(time.process_time() - cpu)
        print(f"  run {run + 1}: wall {walls[-1]:.3f} s, cpu {cpus[-1]:.3f} s")
    for metric, (_, ranked) in results.items():  # type: ignore[misc]
        ranks = [r.rank for r in ranked]
        print(
            f"  {metric}: {pairs} paired tests + Holm; {ranks.count(1)} at rank 1, "
            f"{sum(1 for r in ranked if r.tied)} tied, {len(set(ranks))} distinct ranks"
        )
    # The best of several runs is the closest estimate of an uncontended machine; the median is shown too.
    elapsed = min(walls)
    verdict = "WITHIN" if elapsed < BUDGET_S else "OVER"
    print(
        f"scoring step (pass@1 + pass@{ATTEMPTS}: estimates, Wilson, {2 * pairs} exact paired tests, Holm, "
        f"ranks): best wall {elapsed:.3f} s (median {statistics.median(walls):.3f} s, "
        f"best cpu {min(cpus):.3f} s) -> {verdict} the {BUDGET_S:.0f} s budget"
    )
    if load > (os.cpu_count() or 1):
        print(f"  note: load average {load:.1f} > CPU count: wall times include waiting for other processes")

    # Baseline: the literal shift DP on a seeded sample of pairs per metric, scaled to all pairs.
    rng = random.Random(args.seed)
    ids = list(data)
    sample = rng.sample(
        [(i, j) for i in range(len(ids)) for j in range(i + 1, len(ids))], args.baseline_pairs
    )
    naive_total = 0.0
    worst_rel = 0.0
    for k in (1, ATTEMPTS):
        vectors = []
        for pid in ids:
            per_task = per_task_pass_at_k(data[pid], k)
            assert per_task is not None
            vectors.append(list(per_task.values()))
        spent = 0.0
        for i, j in sample:
            t0 = time.perf_counter()
            naive = naive_p(vectors[i], vectors[j])
            spent += time.perf_counter() - t0
            ours = p_value(summarize_pair(vectors[i], vectors[j]))
            if naive > 1e-290:  # the float DP underflows below that; ours does not
                worst_rel = max(worst_rel, abs(ours - naive) / naive)
        naive_total += spent / len(sample) * pairs
    print(
        f"baseline: naive shift-algorithm DP (statistics.md section 4 as written, numpy float, one O(S) pass "
        f"per differing task), timed on {args.baseline_pairs} sampled pairs per metric and scaled to "
        f"{2 * pairs} pairs: ~{naive_total:.1f} s for the tests alone vs {elapsed:.3f} s for the whole step "
        f"(~{naive_total / elapsed:.0f}x)"
    )
    print(f"agreement with the naive DP on the sample: max relative difference {worst_rel:.1e}")


if __name__ == "__main__":
    main()
