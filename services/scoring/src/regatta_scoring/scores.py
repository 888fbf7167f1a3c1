"""A run's scores, folded from its events (statistics.md §1–3, §7). Pure: no I/O.

The unit of analysis is the task: per agent and task we keep n (scored attempts) and c (passed
attempts) as integers and derive every number from them.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field

from regatta_shared.events import (
    AgentScores,
    AttemptFinished,
    CategoryScore,
    MetricValue,
    RunSubmitted,
)
from regatta_shared.eventstore import StoredEvent
from regatta_shared.per_task import per_task_figures

from .statistics import pass_at_k, pass_at_k_curve, wilson


@dataclass
class AgentTally:
    counts: dict[str, list[int]] = field(default_factory=dict)  # task -> [n scored, c passed]
    outcomes: dict[str, int] = field(default_factory=lambda: defaultdict(int))
    input_tokens: int = 0
    output_tokens: int = 0
    cache_tokens: int = 0
    cost_usd: float | None = None
    durations: list[float] = field(default_factory=list)


@dataclass
class RunTally:
    submitted: RunSubmitted
    agents: dict[int, AgentTally]
    recorded: set[str] = field(default_factory=set)


def tally(events: Iterable[StoredEvent]) -> RunTally | None:
    run: RunTally | None = None
    for stored in events:
        if stored.type == "RunSubmitted":
            submitted = stored.payload()
            assert isinstance(submitted, RunSubmitted)
            run = RunTally(submitted, {agent.index: AgentTally() for agent in submitted.agents})
        elif stored.type == "AttemptFinished" and run is not None:
            finished = stored.payload()
            assert isinstance(finished, AttemptFinished)
            if finished.attempt_id not in run.recorded:
                run.recorded.add(finished.attempt_id)
                _count(run.agents[finished.agent_index], finished)
    return run


def _count(agent: AgentTally, finished: AttemptFinished) -> None:
    agent.outcomes[finished.outcome] += 1
    if finished.outcome in ("passed", "failed"):
        n_c = agent.counts.setdefault(finished.task, [0, 0])
        n_c[0] += 1
        n_c[1] += finished.outcome == "passed"
    usage = finished.usage
    agent.input_tokens += usage.input_tokens or 0
    agent.output_tokens += usage.output_tokens or 0
    agent.cache_tokens += usage.cache_tokens or 0
    if usage.cost_usd is not None:
        agent.cost_usd = (agent.cost_usd or 0.0) + usage.cost_usd
    if finished.timings.total is not None:
        agent.durations.append(finished.timings.total)


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
    complete = all(agent.counts.get(t.name, [0, 0])[0] == k for t in submitted.tasks)
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
        mean_duration_seconds=sum(agent.durations) / len(agent.durations) if agent.durations else None,
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
