"""The projection's handlers for a run's lifecycle: submitted, queued, started, stop requested, ended.
Attempt events, scores and log lines are folded in bulk by batch.py instead."""

from __future__ import annotations

from typing import Any

from regatta_shared.events import (
    ErroredAttemptsRerunRequested,
    RunFailed,
    RunFinished,
    RunQueued,
    RunStarted,
    RunStopped,
    RunStopRequested,
    RunSubmitted,
)
from regatta_shared.eventstore import StoredEvent
from regatta_shared.runs import (
    STATUS_BY_EVENT,
    expected_attempts,
    public_submission,
    rerun_rows,
)
from sqlalchemy import Connection, delete, insert, select, update

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


@handles(ErroredAttemptsRerunRequested)
def _rerun_requested(conn: Connection, e: StoredEvent, d: dict[str, Any]) -> None:
    """The errored rows go (their new AttemptScheduled insert fresh ones) and their new results are
    expected on top, as regatta_shared.runs folds it; the run is running again."""
    rows = conn.execute(
        select(t.attempts.c.attempt_id, t.attempts.c.outcome).where(
            t.attempts.c.run_id == d["run_id"], t.attempts.c.attempt_id.in_(d["attempt_ids"])
        )
    ).mappings()
    attempts = {row["attempt_id"]: dict(row) for row in rows}
    rerun = rerun_rows(attempts, d)
    expected = conn.execute(select(t.runs.c.expected).where(t.runs.c.id == d["run_id"])).scalar_one_or_none()
    if expected is None:
        return
    conn.execute(delete(t.attempts).where(t.attempts.c.attempt_id.in_([row["attempt_id"] for row in rerun])))
    _run(
        conn,
        d["run_id"],
        status=STATUS_BY_EVENT[e.type],
        completed_at=None,
        expected=expected + len(rerun),
    )


@handles(RunFinished)
def _run_finished(conn: Connection, e: StoredEvent, d: dict[str, Any]) -> None:
    _run(conn, d["run_id"], status=STATUS_BY_EVENT[e.type], completed_at=recorded_at(e))
