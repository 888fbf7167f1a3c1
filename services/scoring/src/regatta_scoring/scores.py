"""A run's scores, folded from its events (statistics.md §1–3, §7) under the current scoring rules
(regatta_shared.rules.scoring_rules). Pure: no I/O.

The unit of analysis is the task: per agent and task we keep n (scored attempts) and c (passed
attempts) as integers and derive every number from them.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from regatta_shared.events import (
    AgentScores,
    AttemptFinished,
    CategoryScore,
    ErroredAttemptsRerunRequested,
    MetricValue,
    RunSubmitted,
)
from regatta_shared.events.envelope import StoredEvent
from regatta_shared.rules.outcomes import PASSED, SCORED
from regatta_shared.rules.per_task import per_task_figures
from regatta_shared.rules.scoring_rules import RULES_VERSION, outcome_under
from regatta_shared.runs import ATTEMPT_EVENTS, RunFold, no_totals, rerun_rows, with_finished
from regatta_shared.statistics import pass_at_k, pass_at_k_curve, wilson


@dataclass
class AgentTally:
    counts: dict[str, list[int]] = field(default_factory=dict)  # task -> [n scored, c passed]
    outcomes: dict[str, int] = field(default_factory=lambda: defaultdict(int))
    # Tokens and cost as the read model's run totals count them (regatta_shared.runs), per agent.
    totals: dict[str, Any] = field(default_factory=no_totals)
    durations: dict[str, float] = field(default_factory=dict)  # attempt id -> its total seconds

    @property
    def input_tokens(self) -> int:
        return self.totals["input_tokens"]

    @property
    def output_tokens(self) -> int:
        return self.totals["output_tokens"]

    @property
    def cache_tokens(self) -> int:
        return self.totals["cache_tokens"]

    @property
    def cost_usd(self) -> float | None:
        return self.totals["cost_usd"]


@dataclass
class RunTally:
    submitted: RunSubmitted
    agents: dict[int, AgentTally]
    # The run's attempts by the read models' rules: a finish counts once, for a scheduled attempt.
    fold: RunFold
    # Tasks taken out of the run's benchmark version (BenchmarkTaskExcluded): not counted at all.
    excluded: frozenset[str] = frozenset()


def tally(
    events: Iterable[StoredEvent], rules_version: int = RULES_VERSION, excluded: frozenset[str] = frozenset()
) -> RunTally | None:
    """The run's counts with each attempt's outcome under `rules_version` (the current one unless a
    caller reproduces an older deployment's scores), without the attempts of the `excluded` tasks (the
    leaderboard's, for a version with excluded tasks)."""
    run: RunTally | None = None
    for stored in events:
        if stored.type == RunSubmitted.type_name:
            submitted = stored.payload()
            assert isinstance(submitted, RunSubmitted)
            agents = {agent.index: AgentTally() for agent in submitted.agents}
            run = RunTally(submitted, agents, RunFold(submitted.run_id), excluded)
        elif stored.type == ErroredAttemptsRerunRequested.type_name and run is not None:
            # The errored results of attempts run again stop counting; their new ones will.
            for row in rerun_rows(run.fold.attempts, stored.data):
                if row["task"] in excluded:
                    continue
                agent = run.agents[row["agent_index"]]
                agent.outcomes["errored"] -= 1
                agent.durations.pop(row["attempt_id"], None)
        elif stored.type in ATTEMPT_EVENTS and run is not None:
            counted = run.fold.apply(stored.type, stored.data)
            if stored.type == AttemptFinished.type_name and counted is not None:
                finished = stored.payload()
                assert isinstance(finished, AttemptFinished)
                if finished.task in excluded:
                    continue
                _count(run.agents[finished.agent_index], finished, stored.data, rules_version)
    return run


def _count(agent: AgentTally, finished: AttemptFinished, data: Mapping[str, Any], rules_version: int) -> None:
    outcome = outcome_under(finished, rules_version)
    agent.outcomes[outcome] += 1
    if outcome in SCORED:
        n_c = agent.counts.setdefault(finished.task, [0, 0])
        n_c[0] += 1
        n_c[1] += outcome == PASSED
    agent.totals = with_finished(agent.totals, data)
    if finished.timings.total is not None:
        agent.durations[finished.attempt_id] = finished.timings.total


def metric(value: float, n_tasks: int) -> MetricValue:
    low, high = wilson(value, n_tasks)
    return MetricValue(value=float(value), ci_low=low, ci_high=high, n=n_tasks)


def score_agent(run: RunTally, index: int) -> AgentScores:
    submitted = run.submitted
    agent = run.agents[index]
    k = submitted.execution.attempts_per_task
    scored = [(n, c) for n, c in agent.counts.values() if n > 0]
    one = pass_at_k(scored, 1) if scored else None
    curve = pass_at_k_curve(scored) if scored else []
    pass_k = []
    for kk, value in curve:
        low, high = wilson(value, len(scored))
        pass_k.append({"k": kk, "value": float(value), "ci_low": low, "ci_high": high})
    categories = _categories(submitted, agent)
    complete = all(
        agent.counts.get(t.name, [0, 0])[0] == k for t in submitted.tasks if t.name not in run.excluded
    )
    figures = per_task_figures(
        {
            **agent.outcomes,
            "input_tokens": agent.input_tokens,
            "output_tokens": agent.output_tokens,
            "cost_usd": agent.cost_usd,
        }
    )
    return AgentScores(
        agent_index=index,
        pass_at_1=metric(one, len(scored)) if one is not None else None,
        pass_at_k=pass_k,
        k=k,
        categories=categories,
        task_counts={task: list(n_c) for task, n_c in sorted(agent.counts.items())},
        passed=agent.outcomes["passed"],
        failed=agent.outcomes["failed"],
        errored=agent.outcomes["errored"],
        cancelled=agent.outcomes["cancelled"],
        input_tokens=agent.input_tokens,
        output_tokens=agent.output_tokens,
        cache_tokens=agent.cache_tokens,
        cost_usd=agent.cost_usd,
        cost_per_task=figures["cost_per_task"],
        mean_duration_seconds=sum(agent.durations.values()) / len(agent.durations)
        if agent.durations
        else None,
        tokens_per_task=figures["tokens_per_task"],
        complete=complete,
    )


def _categories(submitted: RunSubmitted, agent: AgentTally) -> list[CategoryScore]:
    by_category: dict[str, list[tuple[int, int]]] = defaultdict(list)
    for task in submitted.tasks:
        n_c = agent.counts.get(task.name)
        if task.category and n_c and n_c[0] > 0:
            by_category[task.category].append((n_c[0], n_c[1]))
    scores = []
    for category, counts in sorted(by_category.items()):
        value = pass_at_k(counts, 1)
        assert value is not None
        scores.append(
            CategoryScore(category=category, pass_at_1=metric(value, len(counts)), n_tasks=len(counts))
        )
    return scores


def score_run(run: RunTally) -> list[AgentScores]:
    return [score_agent(run, agent.index) for agent in run.submitted.agents]
