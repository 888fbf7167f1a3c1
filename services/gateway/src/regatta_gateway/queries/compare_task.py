"""One task of a comparison, both sides' attempts at it: outcome, primary reward and time of each, and
the attempt chosen on each side (by id, else the first that ended) in full, for its grading and transcript.
"""

from __future__ import annotations

from typing import Any

from regatta_shared.eventstore import EventStore
from sqlalchemy import select

from regatta_gateway.errors import NotFound
from regatta_gateway.principals import Scope
from regatta_gateway.queries import compare as compare_queries
from regatta_gateway.queries.run_rows import run_submissions
from regatta_gateway.queries.task_history import check_task_name
from regatta_gateway.readmodels import tables as t


def task_sides(
    store: EventStore,
    scope: Scope,
    a: compare_queries.Participant,
    b: compare_queries.Participant,
    task: str,
    chosen: dict[str, str],
) -> dict[str, Any]:
    """`chosen` maps a side ("a", "b") to the attempt id asked for; an id that is not one of that side's
    attempts at the task is refused, naming `a_attempt` or `b_attempt`."""
    side_a, side_b = compare_queries.participants(store, scope, a, b)
    check_task_name(task)
    if task not in side_a["tasks"] or task not in side_b["tasks"]:
        raise NotFound(
            f"Task {task[:100]!r} is not one both participants ran", code="NOT_FOUND", field="task"
        )
    category = side_a["categories"].get(task) or side_b["categories"].get(task)
    row = compare_queries.task_row(task, category, side_a["counts"].get(task), side_b["counts"].get(task))
    sides = {}
    for name, side in (("a", side_a), ("b", side_b)):
        public = {k: v for k, v in side.items() if k not in ("counts", "categories", "tasks")}
        sides[name] = {**public, **_attempts(store, side, task, chosen.get(name, ""), f"{name}_attempt")}
    return {"task": task, "category": category, "row": row, "a": sides["a"], "b": sides["b"]}


def _attempts(store: EventStore, side: dict[str, Any], task: str, wanted: str, field: str) -> dict[str, Any]:
    a = t.attempts.c
    query = (
        select(t.attempts)
        .where(a.run_id == side["run_id"], a.task == task, a.agent_index == side["agent_index"])
        .order_by(a.attempt_index)
    )
    with store.read_engine.connect() as conn:
        rows = [dict(row) for row in conn.execute(query).mappings()]
    if wanted:
        chosen = next((r for r in rows if r["attempt_id"] == wanted), None)
        if chosen is None:
            raise NotFound(
                f"{field} is not an attempt of this side at task {task[:100]!r}",
                code="NOT_FOUND",
                field=field,
            )
    else:
        chosen = next((r for r in rows if r["outcome"]), rows[0] if rows else None)
    submission = run_submissions(store, [side["run_id"]]).get(side["run_id"]) or {}
    return {
        "attempts": [_summary(row) for row in rows],
        "chosen": chosen,
        "primary_key": submission.get("primary_reward_key"),
    }


def _summary(row: dict[str, Any]) -> dict[str, Any]:
    result = row["result"] if isinstance(row["result"], dict) else {}
    return {
        "attempt_id": row["attempt_id"],
        "attempt_index": row["attempt_index"],
        "status": row["status"],
        "outcome": row["outcome"],
        "reward": result.get("primary_reward"),
        "error": result.get("exception_type"),
        "started_at": row["started_at"],
        "finished_at": row["finished_at"],
    }
