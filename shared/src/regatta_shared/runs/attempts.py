"""What a run's attempt events do to its attempt rows: the one rule behind the gateway's rm_attempts
(batched and single), the run snapshot behind downloads and scoring's count of finished attempts.

Pure: event data (the JSON shape stored events carry) in, row values out. The rules follow the run
aggregate (run-scheduler's run.py), which decides every attempt event: an attempt exists once
scheduled, and once finished it is final, so a late start, retry or second finish changes nothing.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any

from regatta_shared.clock import isoformat
from regatta_shared.events import (
    AttemptFinished,
    AttemptRetried,
    AttemptScheduled,
    AttemptStarted,
    RunSubmitted,
)
from regatta_shared.rules.execution_defaults import ATTEMPTS_PER_TASK

from .integrity import INTEGRITY_COLUMNS, integrity_columns

ATTEMPT_EVENTS = frozenset(
    e.type_name for e in (AttemptScheduled, AttemptStarted, AttemptRetried, AttemptFinished)
)


def attempts_per_agent(submitted: RunSubmitted | Mapping[str, Any]) -> int:
    """Attempts one agent of a run makes: every task, attempts_per_task times. Takes the submission as
    the scheduler holds it (the event) or as stored (its JSON, possibly partial)."""
    if isinstance(submitted, RunSubmitted):
        return len(submitted.tasks) * submitted.execution.attempts_per_task
    execution = submitted.get("execution") or {}
    return len(submitted.get("tasks") or []) * int(execution.get("attempts_per_task") or ATTEMPTS_PER_TASK)


def expected_attempts(submitted: RunSubmitted | Mapping[str, Any]) -> int:
    """Attempts a run makes in all: each agent's."""
    agents = submitted.agents if isinstance(submitted, RunSubmitted) else submitted.get("agents") or []
    return attempts_per_agent(submitted) * len(agents)


def scheduled_row(d: Mapping[str, Any], at: str | None) -> dict[str, Any]:
    """The row an AttemptScheduled creates (every rm_attempts column)."""
    return {
        "attempt_id": d["attempt_id"],
        "run_id": d["run_id"],
        "agent_index": d["agent_index"],
        "task": d["task"],
        "attempt_index": d["attempt_index"],
        "status": "scheduled",
        "outcome": None,
        "try_number": d.get("try_number", 1),
        "scheduled_at": at,
        "started_at": None,
        "finished_at": None,
        "result": None,
        **dict.fromkeys(INTEGRITY_COLUMNS),
    }


def attempt_change(
    event_type: str, d: Mapping[str, Any], at: str | None, row: Mapping[str, Any] | None
) -> dict[str, Any] | None:
    """The columns an AttemptStarted, AttemptRetried or AttemptFinished sets on its attempt's row, given
    the row as it stands (at least its `outcome` and `started_at`; None when the attempt is unknown).
    None when the event changes nothing; a finish that returns values is the one that counts."""
    if row is None or row["outcome"] is not None:
        return None
    if event_type == AttemptStarted.type_name:
        return {"status": "running", "started_at": at, "try_number": d["try_number"]}
    if event_type == AttemptRetried.type_name:
        return {"status": "retrying", "try_number": d["try_number"]}
    if event_type == AttemptFinished.type_name:
        values = {
            "status": "finished",
            "outcome": d["outcome"],
            "finished_at": at,
            "result": d,
            "try_number": d["try_number"],
            **integrity_columns(d),
        }
        if row["started_at"] is None:
            values["started_at"] = trial_start(d)
        return values
    return None


def trial_start(d: Mapping[str, Any]) -> str | None:
    """When a finished attempt's trial started, written as the read models write times. An attempt
    shorter than the executors' started-report delay has no AttemptStarted to take it from."""
    try:
        return isoformat(datetime.fromisoformat(d["started_at"])) if d.get("started_at") else None
    except (TypeError, ValueError):
        return None
