"""What a run did: its attempts in (task, agent, attempt) order, all or paged and filtered, and its log
(newest page first, a position as cursor)."""

from __future__ import annotations

from typing import Any

from regatta_shared.eventstore import EventStore
from regatta_shared.runs import INTEGRITY_FILTERS, integrity_summary
from sqlalchemy import select

from regatta_gateway.errors import Invalid, NotFound
from regatta_gateway.principals import Scope
from regatta_gateway.queries.annotations import run_labels
from regatta_gateway.queries.benchmarks import find_run
from regatta_gateway.readmodels import tables as t

_ID = (t.runs.c.id,)


def list_attempts(
    store: EventStore,
    scope: Scope,
    key: str,
    *,
    limit: int | None = None,
    offset: int = 0,
    task: str | None = None,
    agent_index: int | None = None,
    outcome: str | None = None,
    label: str | None = None,
    integrity: str | None = None,
) -> list[dict[str, Any]]:
    """The run's attempts in (task, agent, attempt) order: all of them by default; `limit`/`offset`
    page through them and the filters narrow them, so a run of 100k attempts need not be one response.
    The order is ix_rm_attempts_run_order's, so a page is an index range scan. `integrity` keeps the
    attempts the per-agent counts of queries/integrity.py count under the same word."""
    run = find_run(store, scope, key, _ID)
    query = select(t.attempts).where(t.attempts.c.run_id == run["id"])
    if task is not None:
        query = query.where(t.attempts.c.task == task)
    if agent_index is not None:
        query = query.where(t.attempts.c.agent_index == agent_index)
    if outcome is not None:
        query = query.where(t.attempts.c.outcome == outcome)
    if label is not None:
        labelled = select(t.attempt_labels.c.attempt_id).where(
            t.attempt_labels.c.run_id == run["id"], t.attempt_labels.c.label == label
        )
        query = query.where(t.attempts.c.attempt_id.in_(labelled))
    if integrity is not None:
        query = query.where(_integrity_filter(integrity))
    query = query.order_by(t.attempts.c.task, t.attempts.c.agent_index, t.attempts.c.attempt_index)
    if limit is not None:
        query = query.limit(limit)
    if offset:
        query = query.offset(offset)
    with store.read_engine.connect() as conn:
        rows = conn.execute(query).mappings().all()
    labels = run_labels(store, run["id"], [r["attempt_id"] for r in rows] if limit is not None else None)
    return [_public(r, labels.get(r["attempt_id"], [])) for r in rows]


_PUBLIC = (
    "attempt_id",
    "agent_index",
    "task",
    "attempt_index",
    "status",
    "outcome",
    "try_number",
    "scheduled_at",
    "started_at",
    "finished_at",
)


def _public(row: Any, labels: list[dict[str, Any]]) -> dict[str, Any]:
    """An attempt as the API lists it: its evidence in full under `result.integrity`, its counts under
    `integrity` (null where the environment recorded none)."""
    return {k: row[k] for k in _PUBLIC} | {
        "result": row["result"],
        "integrity": integrity_summary(row),
        "labels": labels,
    }


def _integrity_filter(word: str) -> Any:
    column = INTEGRITY_FILTERS.get(word)
    if column is None:
        raise Invalid(
            f"integrity must be one of {', '.join(INTEGRITY_FILTERS)}", code="VALIDATION", field="integrity"
        )
    if word == "not_checked":
        return t.attempts.c[column].is_(False)
    return t.attempts.c[column] > 0


def attempts_page(
    store: EventStore,
    scope: Scope,
    key: str,
    *,
    limit: int | None = None,
    offset: int = 0,
    task: str | None = None,
    agent_index: int | None = None,
    outcome: str | None = None,
    label: str | None = None,
    integrity: str | None = None,
) -> dict[str, Any]:
    """GET /runs/{key}/attempts: `{"attempts": [...]}` as always; asked for a page (`limit` or `offset`),
    also `next_offset`, the offset of the next page or null after the last one."""
    filters = {
        "task": task,
        "agent_index": agent_index,
        "outcome": outcome,
        "label": label,
        "integrity": integrity,
    }
    if limit is None and not offset:
        return {"attempts": list_attempts(store, scope, key, **filters)}
    # One row more than asked tells whether another page follows, without counting the run's attempts.
    rows = list_attempts(
        store, scope, key, limit=None if limit is None else limit + 1, offset=offset, **filters
    )
    more = limit is not None and len(rows) > limit
    rows = rows[:limit] if limit is not None else rows
    return {"attempts": rows, "next_offset": offset + len(rows) if more else None}


MAX_POSITION = 2**63 - 1  # the log's positions are BIGINT: a larger cursor overflows the database


def _log_cursor(cursor: str) -> int:
    """A cursor is a log position this API handed out: a positive integer that fits a BIGINT."""
    if not (cursor.isascii() and cursor.isdigit()) or len(cursor) > 19 or not 0 < int(cursor) <= MAX_POSITION:
        raise Invalid(f"cursor must be a log position (1..{MAX_POSITION})", code="VALIDATION", field="cursor")
    return int(cursor)


def run_logs(store: EventStore, scope: Scope, key: str, limit: int, cursor: str | None) -> dict[str, Any]:
    """Newest page first, oldest first within a page (contract §2.8); the cursor is a position."""
    run = find_run(store, scope, key, _ID)
    query = select(t.run_logs).where(t.run_logs.c.run_id == run["id"])
    if cursor:
        query = query.where(t.run_logs.c.position < _log_cursor(cursor))
    with store.read_engine.connect() as conn:
        rows = conn.execute(query.order_by(t.run_logs.c.position.desc()).limit(limit + 1)).mappings().all()
    more = len(rows) > limit
    rows = list(reversed(rows[:limit]))
    logs = [
        {
            "timestamp": r["timestamp"],
            "level": r["level"],
            "step": r["step"],
            "message": r["message"],
            "details": r["details"],
        }
        for r in rows
    ]
    return {"logs": logs, "next_cursor": str(rows[0]["position"]) if more and rows else None}


def find_attempt(store: EventStore, scope: Scope, key: str, attempt_id: str) -> dict[str, Any]:
    """One attempt of the run named by `key` (in the caller's workspace), with its run's id and name."""
    run = find_run(store, scope, key, (t.runs.c.id, t.runs.c.name))
    query = select(t.attempts).where(t.attempts.c.run_id == run["id"], t.attempts.c.attempt_id == attempt_id)
    with store.read_engine.connect() as conn:
        row = conn.execute(query).mappings().first()
    if row is None:
        raise NotFound(f"Attempt {attempt_id[:80]!r} of run {key!r} not found", code="NOT_FOUND")
    return {
        **{k: row[k] for k in ("attempt_id", "agent_index", "task", "attempt_index", "status", "outcome")},
        **{k: row[k] for k in ("try_number", "scheduled_at", "started_at", "finished_at")},
        "run_id": run["id"],
        "run_name": run["name"],
        "result": row["result"],
        "integrity": integrity_summary(row),
    }


def attempt_detail(store: EventStore, scope: Scope, key: str, attempt_id: str) -> dict[str, Any]:
    """GET /runs/{key}/attempts/{attempt_id}: the attempt as the list shows it, with its run and labels."""
    attempt = find_attempt(store, scope, key, attempt_id)
    labels = run_labels(store, attempt["run_id"], [attempt_id]).get(attempt_id, [])
    return {**attempt, "labels": labels}
