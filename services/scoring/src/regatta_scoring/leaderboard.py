"""Leaderboards (statistics.md §5–6): one ranking of every qualifying participant, ties only inside a
comparison group.

A comparison group is (benchmark version/digest, the full task list or the recommended set, scoring
conditions; and k for pass@k). Each participant has a row per group it qualified in, with its latest
qualifying run there: a quick run of the recommended set never replaces an agent's full-list row. All rows
are ranked together by each metric, as the product asks ("all qualifying participants are in the same
ranking"); the paired tests and Holm families stay inside a group, so two rows of different groups are
never tied and never tested against each other (a parity run and a full run are different measurements).
Only scores of the current rules version are ranked; a run's older scores are shown apart until rescored.

Tasks a workspace admin excluded from a benchmark version (BenchmarkTaskExcluded) are taken out of every
run of that version, earlier runs included: their attempts are not counted (scores.tally), so such a run
qualifies and ranks on its remaining tasks; the exclusions it was scored without are part of its group's
key and named on its row.

Pure: takes run histories, returns rows.
"""

from __future__ import annotations

import hashlib
from collections import Counter
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

from regatta_shared import statistics as st
from regatta_shared.events import (
    AgentScores,
    BenchmarkTaskExcluded,
    ErroredAttemptsRerunRequested,
    RunFinished,
    RunScored,
    RunSubmitted,
)
from regatta_shared.eventstore import StoredEvent
from regatta_shared.rules.conditions import qualification
from regatta_shared.rules.per_task import per_task_figures
from regatta_shared.rules.scoring_rules import RULES_VERSION

from .scores import score_run, tally

PASS_METRICS = ("pass_at_1", "pass_at_k")
COST_METRICS = {
    "cost_per_task": "cost_per_task",
    "time_per_task": "mean_duration_seconds",
    "tokens_per_task": "tokens_per_task",
}


@dataclass(frozen=True)
class LeaderboardEntry:
    participant: str
    harness: str
    model: str
    run_id: str
    run_name: str
    order: int
    group: tuple[Any, ...]
    task_set: str
    version: str
    k: int
    scores: AgentScores
    conditions: dict[str, Any]
    recommended: bool = False
    rules_version: int = RULES_VERSION
    excluded: tuple[tuple[str, str], ...] = ()  # (task, reason) taken out of this run's scores

    @property
    def figures(self) -> dict[str, float | None]:
        return per_task_figures(self.scores.model_dump())


def finished_now(history: list[StoredEvent]) -> bool:
    """Whether the run is finished: a RunFinished after its latest re-run of errored attempts (a re-run
    makes a finished run run again, and only its new final scores count)."""
    for event in reversed(history):
        if event.type == RunFinished.type_name:
            return True
        if event.type == ErroredAttemptsRerunRequested.type_name:
            return False
    return False


def rerun_round(history: list[StoredEvent]) -> tuple[str, ...]:
    """Id parts of the events scoring records for the run's latest re-run (none before any): the final
    scores and `finished` of a re-run must not reuse those of the run's first finish."""
    reruns = (e.data["rerun"] for e in history if e.type == ErroredAttemptsRerunRequested.type_name)
    rerun = max(reruns, default=0)
    return (f"rerun-{rerun}",) if rerun else ()


def exclusions(benchmark_history: list[StoredEvent]) -> dict[str, dict[str, str]]:
    """version -> {task: reason} of the tasks excluded from each version of a benchmark."""
    excluded: dict[str, dict[str, str]] = {}
    for event in benchmark_history:
        if event.type == BenchmarkTaskExcluded.type_name:
            excluded.setdefault(event.data["version"], {}).setdefault(
                event.data["task"], event.data["reason"]
            )
    return excluded


def entries_from_run(
    history: list[StoredEvent], excluded: dict[str, str] | None = None
) -> list[LeaderboardEntry]:
    """The qualifying agents of one run: finished run, full list or recommended set, the benchmark's standard
    scoring conditions (regatta_shared.rules.conditions), every attempt scored but those of the `excluded`
    tasks (task -> reason) of its version, which are not counted at all."""
    if not history or history[0].type != RunSubmitted.type_name:
        return []
    submitted = history[0].payload()
    assert isinstance(submitted, RunSubmitted)
    final = latest_final_scores(history)
    finished = next((e for e in reversed(history) if e.type == RunFinished.type_name), None)
    if finished is None or not finished_now(history) or final is None:
        return []
    qualifies = qualification(history[0].data)
    if not qualifies["qualifies"]:
        return []
    task_set = submitted.selection.task_set or "full"
    conditions = qualifies["conditions"]
    without = tuple(sorted((t.name, excluded[t.name]) for t in submitted.tasks if t.name in (excluded or {})))
    agents = final.agents
    if without and final.rules_version == RULES_VERSION:
        # Scored again without them, by the same rules (a run of older rules stays unranked as it is).
        run = tally(history, excluded=frozenset(task for task, _ in without))
        agents = score_run(run) if run is not None else []
    # Runs scored with and without an exclusion are different measurements: never in one group.
    dropped = (("excluded", tuple(task for task, _ in without)),) if without else ()
    entries = []
    for scores in agents:
        if not scores.complete or scores.pass_at_1 is None:
            continue
        agent = submitted.agents[scores.agent_index]
        entries.append(
            LeaderboardEntry(
                participant=agent.participant,
                harness=agent.harness,
                model=agent.participant_model,
                run_id=submitted.run_id,
                run_name=submitted.name,
                order=finished.position,
                # The conditions are in the key although every entry here is at its benchmark's standard
                # ones: a re-synced manifest may change them while the task digests (and so the
                # benchmark digest) stay the same.
                group=(submitted.benchmark_digest, task_set, *sorted(conditions.items()), *dropped),
                task_set=task_set,
                version=submitted.benchmark_version,
                k=submitted.execution.attempts_per_task,
                scores=scores,
                conditions=conditions,
                recommended=submitted.selection.task_set is not None,
                rules_version=final.rules_version,
                excluded=without,
            )
        )
    return entries


def latest_final_scores(history: list[StoredEvent]) -> RunScored | None:
    final = next(
        (e.payload() for e in reversed(history) if e.type == RunScored.type_name and e.data["final"]), None
    )
    return final if isinstance(final, RunScored) else None


def needs_rescore(history: list[StoredEvent], benchmark_version: str | None = None) -> bool:
    """Whether the run (of `benchmark_version`, when given) has final scores of an older rules version."""
    if not history or history[0].type != RunSubmitted.type_name:
        return False
    if benchmark_version is not None and history[0].data["benchmark_version"] != benchmark_version:
        return False
    final = latest_final_scores(history)
    return final is not None and final.rules_version < RULES_VERSION


def latest_per_participant(entries: list[LeaderboardEntry]) -> list[LeaderboardEntry]:
    """Each participant's latest qualifying run in each comparison group."""
    latest: dict[tuple[Any, ...], LeaderboardEntry] = {}
    for entry in sorted(entries, key=lambda e: e.order):
        latest[(entry.group, entry.participant)] = entry
    return list(latest.values())


def _task_scores(scores: AgentScores, k: int) -> dict[str, Fraction]:
    return {task: st.pass_at_k_task(n, c, k) for task, (n, c) in scores.task_counts.items()}


def _row_id(entry: LeaderboardEntry) -> str:
    """A row: one participant in one comparison group."""
    return f"{entry.participant}#{_section(entry)['key']}"


def _pass_participants(entries: list[LeaderboardEntry], metric: str) -> list[st.Participant]:
    participants = []
    for entry in entries:
        k = 1 if metric == "pass_at_1" else entry.k
        tasks = _task_scores(entry.scores, k)
        estimate = sum(tasks.values(), Fraction(0)) / len(tasks)
        # k is part of the pass@k group key: pass@2 and pass@5 are different measurements.
        group = entry.group if metric == "pass_at_1" else (*entry.group, k)
        participants.append(
            st.Participant(
                id=_row_id(entry),
                name=entry.participant,
                order=entry.order,
                group=group,
                estimate=estimate,
                task_scores=tasks,
            )
        )
    return participants


def build_leaderboard(all_entries: list[LeaderboardEntry]) -> list[dict[str, Any]]:
    """Every row (a participant's latest qualifying run per comparison group), ranked together, in pass@1
    rank order; then, unranked, the rows whose scores are of an older rules version and that no current
    row of their participant and group replaces, each in a section of its own (scores of two rules
    versions are never ranked together: the same attempts may count differently under each)."""
    current = [e for e in all_entries if e.rules_version == RULES_VERSION]
    ranked = latest_per_participant(current)
    taken = {(e.group, e.participant) for e in ranked}
    stale = [
        e
        for e in latest_per_participant([e for e in all_entries if e.rules_version != RULES_VERSION])
        if (e.group, e.participant) not in taken
    ]
    stale_rows = sorted(
        (_row(e) for e in stale),
        key=lambda r: (r["rules_version"], -r["pass_at_1"]["value"], r["participant"]),
    )
    return [*_rank_all(ranked), *stale_rows]


def _section(entry: LeaderboardEntry) -> dict[str, Any]:
    stale = entry.rules_version != RULES_VERSION
    # A row of older rules is in a section apart from the current rows of its group: it is not ranked.
    group = (*entry.group, ("rules_version", entry.rules_version)) if stale else entry.group
    return {
        "key": hashlib.sha256(repr(group).encode()).hexdigest()[:16],
        "task_set": entry.task_set,
        "recommended": entry.recommended,
        "version": entry.version,
        "digest": entry.group[0],
        "conditions": entry.conditions,
        "rules_version": entry.rules_version,
        "unranked_reason": f"scored under rules v{entry.rules_version}; rescore" if stale else None,
        # "scored without task X: reason" on the leaderboard.
        "excluded_tasks": [{"task": task, "reason": reason} for task, reason in entry.excluded],
    }


def _rank_all(entries: list[LeaderboardEntry]) -> list[dict[str, Any]]:
    rows: dict[str, dict[str, Any]] = {_row_id(e): _row(e) for e in entries}
    for metric in PASS_METRICS:
        participants = _pass_participants(entries, metric)
        groups = {p.id: p.group for p in participants}
        ranked_all = st.rank_participants(participants)
        # Tied: sharing the rank with a row of the same group. Rows of different groups may land on one
        # rank number without a test ever comparing them: that is not a tie.
        shared = Counter((groups[r.id], r.rank) for r in ranked_all)
        for ranked in ranked_all:
            top_group = groups[ranked.comparison.top_id]
            rows[ranked.id]["ranks"][metric] = {
                "rank": ranked.rank,
                "tied": shared[(groups[ranked.id], ranked.rank)] > 1,
                "comparison": _comparison(ranked.comparison, comparable=top_group == groups[ranked.id]),
            }
    for metric, field in COST_METRICS.items():
        values = {_row_id(e): e.figures[field] for e in entries}
        ranks = st.rank_lower_is_better(values)
        tied = st.tied_flags(ranks)
        for pid in rows:
            rows[pid]["ranks"][metric] = {
                "rank": ranks.get(pid),
                "tied": tied.get(pid, False),
                "comparison": None,
            }
    return sorted(
        rows.values(),
        key=lambda r: (
            r["ranks"]["pass_at_1"]["rank"],
            -r["pass_at_1"]["value"],
            r["participant"],
            r["section"]["recommended"],
            r["version"],
        ),
    )


def _participant_of(row_id: str) -> str:
    return row_id.rsplit("#", 1)[0]


def _comparison(comparison: st.TopComparison, *, comparable: bool) -> dict[str, Any]:
    return {
        "top": _participant_of(comparison.top_id),
        "top_row": comparison.top_id,
        # False: the top row is of another comparison group (task set, version, conditions or k), so
        # no test compares the two and p is None.
        "comparable": comparable,
        "top_estimate": float(comparison.top_estimate),
        "estimate": float(comparison.estimate),
        "difference": float(comparison.difference),
        "p_value": comparison.p_value,
        "p_holm": comparison.p_holm,
    }


def _row(entry: LeaderboardEntry) -> dict[str, Any]:
    scores = entry.scores
    pass_k = [p for p in scores.pass_at_k if p["k"] <= entry.k]
    return {
        "row_id": _row_id(entry),
        "participant": entry.participant,
        "harness": entry.harness,
        "model": entry.model,
        "run_id": entry.run_id,
        "run_name": entry.run_name,
        "agent_index": entry.scores.agent_index,  # the row's agent within its run (links to /compare)
        "task_set": entry.task_set,
        "version": entry.version,
        "k": entry.k,
        "pass_at_1": scores.pass_at_1.model_dump() if scores.pass_at_1 else None,
        "pass_at_k": pass_k,
        **entry.figures,
        "conditions": entry.conditions,
        "rules_version": entry.rules_version,
        "section": _section(entry),
        "ranks": {},
    }


def rank_run_agents(agents: list[AgentScores]) -> list[AgentScores]:
    """The run's own ranking of its agents by pass@1 (one group), for Agent Results.

    While a run is in progress agents have scored different tasks; the paired test needs one task list,
    so provisional ranks compare the tasks every ranked agent has scored.
    """
    scored = [a for a in agents if a.pass_at_1 is not None]
    common = set.intersection(*(set(a.task_counts) for a in scored)) if scored else set()
    participants = []
    for a in scored:
        tasks = {t: v for t, v in _task_scores(a, 1).items() if t in common}
        if tasks:
            participants.append(
                st.Participant(
                    id=str(a.agent_index),
                    name=str(a.agent_index),
                    order=a.agent_index,
                    group="run",
                    estimate=sum(tasks.values(), Fraction(0)) / len(tasks),
                    task_scores=tasks,
                )
            )
    ranked = {r.id: r for r in st.rank_participants(participants)}
    return [
        a.model_copy(
            update={"rank": ranked[str(a.agent_index)].rank, "tied": ranked[str(a.agent_index)].tied}
        )
        if str(a.agent_index) in ranked
        else a
        for a in agents
    ]
