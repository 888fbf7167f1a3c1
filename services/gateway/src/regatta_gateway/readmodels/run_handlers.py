"""The projection's handlers for a run's lifecycle: submitted, queued, started, stop requested, ended.
Attempt events, scores and log lines are folded in bulk by batch.py instead."""

from __future__ import annotations

from typing import Any

from regatta_shared.events import (
    RunFailed,
    RunFinished,
    RunQueued,
    RunStarted,
    RunStopped,
    RunStopRequested,
    RunSubmitted,
)
from regatta_shared.eventstore import StoredEvent
from regatta_shared.runs import STATUS_BY_EVENT, expected_attempts, public_submission
from sqlalchemy import Connection, insert, select, update

from regatta_gateway.readmodels import tables as t
from regatta_gateway.readmodels.handling import Handler, recorded_at, registrar

HANDLERS: dict[str, Handler] = {}
handles = registrar(HANDLERS)


def _run(conn: Connection, run_id: str, **values: Any) -> None:
    conn.execute(update(t.runs).where(t.runs.c.id == run_id).values(**values))


@handles(RunSubmitted)
def _run_submitted(conn: Connection, e: StoredEvent, d: dict[str, Any]) -> None:
    user = conn.execute(select(t.users).where(t.users.c.id == (e.actor or ""))).mappings().first()
    expected = expected_attempts(d)
    submission = public_submission(d)
    conn.execute(
        insert(t.runs).values(
            id=d["run_id"],
            workspace_id=d["workspace_id"],
            benchmark_id=d["benchmark_id"],
            name=d["name"],
            status=STATUS_BY_EVENT[e.type],
            created_at=recorded_at(e),
            created_by=user["name"] if user else e.actor,
            creator_email=user["email"] if user else None,
            expected=expected,
            ingested=0,
            seq=e.position,
            submission=submission,
            scores=None,
            scores_final=False,
            stop_requested=False,
            input_tokens=0,
            output_tokens=0,
            cost_usd=None,
        )
    )


@handles(RunQueued)
def _run_queued(conn: Connection, e: StoredEvent, d: dict[str, Any]) -> None:
    _run(conn, d["run_id"], status=STATUS_BY_EVENT[e.type], expected=d["expected_attempts"])


@handles(RunStarted)
def _run_started(conn: Connection, e: StoredEvent, d: dict[str, Any]) -> None:
    _run(conn, d["run_id"], status=STATUS_BY_EVENT[e.type], started_at=recorded_at(e))


@handles(RunStopRequested)
def _stop_requested(conn: Connection, _e: StoredEvent, d: dict[str, Any]) -> None:
    _run(conn, d["run_id"], stop_requested=True)


@handles(RunStopped, RunFailed)
def _run_ended(conn: Connection, e: StoredEvent, d: dict[str, Any]) -> None:
    _run(
        conn, d["run_id"], status=STATUS_BY_EVENT[e.type], completed_at=recorded_at(e), reason=d.get("reason")
    )


@handles(RunFinished)
def _run_finished(conn: Connection, e: StoredEvent, d: dict[str, Any]) -> None:
    _run(conn, d["run_id"], status=STATUS_BY_EVENT[e.type], completed_at=recorded_at(e))
