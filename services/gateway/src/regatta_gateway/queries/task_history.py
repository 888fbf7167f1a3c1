"""One task of a benchmark across the workspace's runs: every attempt at it, oldest first, with its run,
agent, outcome and primary reward. The task page and `GET /api/v1/benchmarks/{key}/task-history` read it.

The attempts are found through the benchmark's runs (rm_runs by benchmark_id), then by each run's
(run_id, task) prefix of ix_rm_attempts_run_order: no scan of every attempt of the workspace.
"""

from __future__ import annotations

from typing import Any

from regatta_shared.eventstore import EventStore
from regatta_shared.outcomes import PASSED, SCORED
from regatta_shared.participants import agent_label, stored_agent_model
from sqlalchemy import func, select

from regatta_gateway.errors import Invalid, NotFound
from regatta_gateway.principals import Scope
from regatta_gateway.queries.benchmarks import CONTROL, find_benchmark, page
from regatta_gateway.queries.run_rows import run_submissions
from regatta_gateway.readmodels import tables as t

TASK_MAX = 500  # rm_attempts.task's width: a longer name names no task


def check_task_name(task: str, field: str = "task") -> str:
    if not task or len(task) > TASK_MAX or CONTROL.search(task):
        raise Invalid(
            f"{field} must be a task name of 1-{TASK_MAX} characters without control characters",
            code="VALIDATION",
            field=field,
        )
    return task


def task_history(
    store: EventStore, scope: Scope, key: str, task: str, limit: int, offset: int
) -> dict[str, Any]:
    # The benchmark first: another workspace's benchmark is not found, whatever the task.
    benchmark = find_benchmark(store, scope, key)
    check_task_name(task)
    a, r = t.attempts.c, t.runs.c
    # When the attempt happened: its start, else (never started: cancelled, waiting) its scheduling.
    at = func.coalesce(a.started_at, a.scheduled_at, r.created_at)
    where = (r.workspace_id == scope.workspace_id, r.benchmark_id == benchmark["id"], a.task == task)
    joined = t.attempts.join(t.runs, a.run_id == r.id)
    query = (
        select(a.attempt_id, a.run_id, a.agent_index, a.attempt_index, a.status, a.outcome, a.result)
        .add_columns(a.started_at, a.finished_at, r.name.label("run_name"), at.label("at"))
        .select_from(joined)
        .where(*where)
        .order_by(at, r.seq, a.agent_index, a.attempt_index)
        .limit(limit)
        .offset(offset)
    )
    counts = select(a.outcome, func.count()).select_from(joined).where(*where).group_by(a.outcome)
    with store.read_engine.connect() as conn:
        rows = conn.execute(query).mappings().all()
        by_outcome = {outcome: n for outcome, n in conn.execute(counts)}
        category = conn.execute(
            select(t.benchmark_tasks.c.category).where(
                t.benchmark_tasks.c.benchmark_id == benchmark["id"],
                t.benchmark_tasks.c.sync_id == benchmark["ready_sync_id"],
                t.benchmark_tasks.c.name == task,
            )
        ).first()
    total = sum(by_outcome.values())
    if category is None and total == 0:
        raise NotFound(
            f"Benchmark {benchmark['name']!r} has no task {task[:100]!r} and no attempt at one",
            code="NOT_FOUND",
            field="task",
        )
    submissions = run_submissions(store, sorted({row["run_id"] for row in rows}))
    attempts = [_row(row, submissions.get(row["run_id"]) or {}) for row in rows]
    scored = sum(n for outcome, n in by_outcome.items() if outcome in SCORED)
    return {
        "benchmark_id": benchmark["id"],
        "benchmark_name": benchmark["name"],
        "task": {"name": task, "category": category[0] if category else None},
        "summary": {
            "attempts": total,
            "scored": scored,
            "passed": by_outcome.get(PASSED, 0),
            "outcomes": {str(k): v for k, v in sorted(by_outcome.items(), key=lambda kv: str(kv[0]))},
        },
        **page("attempts", attempts, total, limit, offset),
    }


def _row(row: Any, submission: dict[str, Any]) -> dict[str, Any]:
    agents = {agent["index"]: agent for agent in submission.get("agents") or []}
    agent = agents.get(row["agent_index"]) or {}
    result = row["result"] or {}
    return {
        "run_id": row["run_id"],
        "run_name": row["run_name"],
        "agent_index": row["agent_index"],
        "agent": agent_label(agent.get("harness", ""), stored_agent_model(agent)) if agent else "",
        "attempt_id": row["attempt_id"],
        "attempt_index": row["attempt_index"],
        "status": row["status"],
        "outcome": row["outcome"],
        "reward": result.get("primary_reward") if isinstance(result, dict) else None,
        "at": row["at"],
        "started_at": row["started_at"],
        "finished_at": row["finished_at"],
    }
