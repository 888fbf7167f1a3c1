"""Two participants side by side, task by task: two agents of one run, or agents of two runs of one
benchmark version. Per task the two pass rates (passed / scored attempts); overall pass@1 on the tasks
both scored, with the Wilson intervals and the exact paired sign-flip test of docs/reference/statistics.md.

The statistics are the kernel's (regatta_shared.statistics, imported, never restated), the ones scoring
ranks with, so a comparison here always agrees with the p-values behind the leaderboard's ranks.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

from regatta_shared.csv_export import csv_text
from regatta_shared.eventstore import EventStore
from regatta_shared.outcomes import PASSED, SCORED
from regatta_shared.participants import agent_label, stored_agent_model
from regatta_shared.statistics import paired_permutation_test, score
from sqlalchemy import func, select

from regatta_gateway.errors import Conflict, Invalid, NotFound
from regatta_gateway.principals import Scope
from regatta_gateway.queries.benchmarks import find_run
from regatta_gateway.queries.run_rows import run_submissions
from regatta_gateway.readmodels import tables as t

PARTICIPANT_MAX = 400
"""A run key (≤ 300) plus ':' and an agent index: anything longer is not a participant."""

_PARTICIPANT = re.compile(r"(?P<run>[^\x00-\x1f\x7f]+):(?P<agent>[0-9]{1,4})")
VERDICTS = ("improved", "regressed", "same", "unscored")
CSV_COLUMNS = (
    "task",
    "category",
    "a_passed",
    "a_scored",
    "a_rate",
    "b_passed",
    "b_scored",
    "b_rate",
    "difference",
    "verdict",
)


@dataclass(frozen=True, slots=True)
class Participant:
    run: str
    agent_index: int


def parse_participant(value: str, field: str) -> Participant:
    """`RUN:AGENT_INDEX`, strictly: the index is mandatory, so a run named `x:1` is never misread."""
    match = _PARTICIPANT.fullmatch(value) if len(value) <= PARTICIPANT_MAX else None
    if match is None:
        raise Invalid(
            f"{field} must be RUN:AGENT_INDEX (a run id or name, ':' and an agent index of 1-4 digits)",
            code="VALIDATION",
            field=field,
        )
    return Participant(run=match["run"], agent_index=int(match["agent"]))


def compare(store: EventStore, scope: Scope, a: Participant, b: Participant) -> dict[str, Any]:
    side_a, side_b = participants(store, scope, a, b)
    counts_a, counts_b = side_a.pop("counts"), side_b.pop("counts")
    categories = {**side_b.pop("categories"), **side_a.pop("categories")}
    in_b = set(side_b.pop("tasks"))
    common = [task for task in side_a.pop("tasks") if task in in_b]
    rows = [task_row(task, categories.get(task), counts_a.get(task), counts_b.get(task)) for task in common]
    return {"a": side_a, "b": side_b, "tasks": rows, "summary": _summary(rows, counts_a, counts_b)}


def participants(
    store: EventStore, scope: Scope, a: Participant, b: Participant
) -> tuple[dict[str, Any], dict[str, Any]]:
    """Both sides (run, agent, tasks, per-task counts), or the refusal when they ran different tasks."""
    side_a = _side(store, scope, a, "a")
    side_b = _side(store, scope, b, "b")
    if (side_a["benchmark_id"], side_a["version"], side_a["digest"]) != (
        side_b["benchmark_id"],
        side_b["version"],
        side_b["digest"],
    ):
        raise Conflict(
            "The two participants ran different benchmarks or benchmark versions "
            f"({side_a['benchmark_name']} {side_a['version']} and {side_b['benchmark_name']} "
            f"{side_b['version']}): a task-by-task comparison needs the same tasks",
            code="CONFLICT",
        )
    return side_a, side_b


def rows_csv(result: dict[str, Any]) -> str:
    return csv_text(CSV_COLUMNS, ([row[column] for column in CSV_COLUMNS] for row in result["tasks"]))


def _side(store: EventStore, scope: Scope, who: Participant, field: str) -> dict[str, Any]:
    columns = [t.runs.c.id, t.runs.c.name, t.runs.c.benchmark_id, t.runs.c.status]
    row = find_run(store, scope, who.run, columns)
    submission = run_submissions(store, [row["id"]]).get(row["id"]) or {}
    agents = {agent["index"]: agent for agent in submission.get("agents") or []}
    agent = agents.get(who.agent_index)
    if agent is None:
        # agent_index counts from 0; people count agents from 1 (the CLI's RUN:AGENT, the run page).
        raise NotFound(
            f"Run {row['name']!r} has no agent_index {who.agent_index} (agent {who.agent_index + 1}); "
            f"it has {len(agents)} agent{'s' if len(agents) != 1 else ''} ({field})",
            code="NOT_FOUND",
            field=field,
        )
    tasks = submission.get("tasks") or []
    return {
        "run_id": row["id"],
        "run_name": row["name"],
        "run_status": row["status"],
        "agent_index": who.agent_index,
        "harness": agent.get("harness", ""),
        "model": stored_agent_model(agent),
        "label": agent_label(agent.get("harness", ""), stored_agent_model(agent)),
        "benchmark_id": row["benchmark_id"],
        "benchmark_name": submission.get("benchmark_name", ""),
        "version": submission.get("benchmark_version"),
        "digest": submission.get("benchmark_digest"),
        "tasks": [task["name"] for task in tasks],
        "categories": {task["name"]: task.get("category") for task in tasks},
        "counts": _counts(store, row["id"], who.agent_index),
    }


def _counts(store: EventStore, run_id: str, agent_index: int) -> dict[str, tuple[int, int]]:
    """(passed, scored) per task; errored and cancelled attempts are not scored (statistics.md §1)."""
    a = t.attempts.c
    query = (
        select(a.task, a.outcome, func.count())
        .where(a.run_id == run_id, a.agent_index == agent_index, a.outcome.in_(sorted(SCORED)))
        .group_by(a.task, a.outcome)
    )
    counts: dict[str, tuple[int, int]] = {}
    with store.read_engine.connect() as conn:
        for task, outcome, n in conn.execute(query):
            passed, scored = counts.get(task, (0, 0))
            counts[task] = (passed + (n if outcome == PASSED else 0), scored + n)
    return counts


def _rate(counts: tuple[int, int] | None) -> Fraction | None:
    if not counts or counts[1] == 0:
        return None
    return Fraction(counts[0], counts[1])


def task_row(
    task: str, category: str | None, a: tuple[int, int] | None, b: tuple[int, int] | None
) -> dict[str, Any]:
    rate_a, rate_b = _rate(a), _rate(b)
    if rate_a is None or rate_b is None:
        difference, verdict = None, "unscored"
    else:
        difference = float(rate_b - rate_a)
        verdict = "improved" if rate_b > rate_a else "regressed" if rate_b < rate_a else "same"
    return {
        "task": task,
        "category": category,
        "a_passed": a[0] if a else 0,
        "a_scored": a[1] if a else 0,
        "a_rate": None if rate_a is None else float(rate_a),
        "b_passed": b[0] if b else 0,
        "b_scored": b[1] if b else 0,
        "b_rate": None if rate_b is None else float(rate_b),
        "difference": difference,
        "verdict": verdict,
    }


def _summary(
    rows: list[dict[str, Any]], counts_a: dict[str, tuple[int, int]], counts_b: dict[str, tuple[int, int]]
) -> dict[str, Any]:
    paired = [row["task"] for row in rows if row["verdict"] != "unscored"]
    verdicts = {verdict: sum(1 for row in rows if row["verdict"] == verdict) for verdict in VERDICTS}
    body: dict[str, Any] = {"tasks_compared": len(paired), "tasks_in_both": len(rows), **verdicts}
    if not paired:
        return {
            **body,
            "a_pass_at_1": None,
            "b_pass_at_1": None,
            "difference": None,
            "p_value": None,
            "significant": False,
        }
    # pass@1 of each side is the unweighted mean of its per-task rates over the tasks both scored.
    scores_a = [_rate(counts_a[task]) for task in paired]
    scores_b = [_rate(counts_b[task]) for task in paired]
    mean_a = sum(scores_a, Fraction(0)) / len(paired)
    mean_b = sum(scores_b, Fraction(0)) / len(paired)
    p = paired_permutation_test(scores_a, scores_b)  # type: ignore[arg-type]
    return {
        **body,
        "a_pass_at_1": _metric(mean_a, len(paired)),
        "b_pass_at_1": _metric(mean_b, len(paired)),
        "difference": float(mean_b - mean_a),
        "p_value": p,
        "significant": p <= 0.05,
    }


def _metric(mean: Fraction, n: int) -> dict[str, Any]:
    s = score(mean, n)
    return {"value": s.value, "ci_low": s.ci_low, "ci_high": s.ci_high, "n": s.n}
