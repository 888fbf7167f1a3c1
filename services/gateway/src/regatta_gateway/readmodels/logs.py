"""One log line per run event (contract §4.6 LogEntry), so Logs tell the run from submission to cleanup."""

from __future__ import annotations

from typing import Any

from regatta_shared.clock import isoformat
from regatta_shared.events import (
    AttemptFinished,
    AttemptLabelled,
    AttemptLabelRemoved,
    AttemptRetried,
    AttemptScheduled,
    AttemptStarted,
    ErroredAttemptsRerunRequested,
    ExecutorNoted,
    RunExecutionCompleted,
    RunFailed,
    RunFinished,
    RunQueued,
    RunScored,
    RunStarted,
    RunStopped,
    RunStopRequested,
    RunSubmitted,
)
from regatta_shared.eventstore import StoredEvent


def _message(event: StoredEvent, actor: str | None) -> tuple[str, str, str] | None:
    d = event.data
    match event.type:
        case RunSubmitted.type_name:
            return (
                "info",
                "submit",
                f"Run submitted by {actor or 'unknown'}: {len(d['tasks'])} tasks × "
                f"{len(d['agents'])} agents × {d['execution']['attempts_per_task']} attempts",
            )
        case RunQueued.type_name:
            return "info", "queue", f"Run queued: {d['expected_attempts']} attempts expected"
        case RunStarted.type_name:
            return "info", "start", "Run started"
        case AttemptScheduled.type_name:
            return (
                "debug",
                "dispatch",
                f"Attempt {d['attempt_index'] + 1} of {d['task']} (agent {d['agent_index'] + 1}) dispatched",
            )
        case AttemptStarted.type_name:
            again = f", delivery {d['delivery']}" if d.get("delivery", 1) > 1 else ""
            return (
                "info",
                "attempt",
                f"Attempt {d['attempt_id']} started on {d['executor_id']} (try {d['try_number']}{again}): "
                "sandbox created",
            )
        case AttemptRetried.type_name:
            kind = ", an infrastructure retry" if d.get("infrastructure") else ""
            return (
                "warning",
                "retry",
                f"Attempt {d['attempt_id']} retried (try {d['try_number']}{kind}) after "
                f"{d.get('exception_type')}: {d.get('exception_message') or ''}".strip(),
            )
        case AttemptFinished.type_name:
            level = "error" if d["outcome"] == "errored" else "info"
            extra = f" ({d['exception_type']})" if d.get("exception_type") else ""
            unbuilt = ""
            if d.get("environment_built") is False:
                level = "warning" if level == "info" else level
                unbuilt = f"; the task's environment was not built ({d.get('environment')})"
            return (
                level,
                "result",
                f"{d['task']} attempt {d['attempt_index'] + 1} (agent {d['agent_index'] + 1}): "
                f"{d['outcome']}{extra}{unbuilt}; sandbox cleaned",
            )
        case ExecutorNoted.type_name:
            return d.get("level", "info"), "sandbox", f"{d['attempt_id']}: {d['note']}"
        case RunStopRequested.type_name if d.get("ends_as") == "failed":
            return "error", "fail", f"Run failing: {d.get('reason', '')}; stopping its remaining attempts"
        case RunStopRequested.type_name:
            return "warning", "stop", f"Stop requested by {actor or 'unknown'}: {d.get('reason', '')}"
        case RunExecutionCompleted.type_name:
            return "info", "execute", "All attempts recorded"
        case ErroredAttemptsRerunRequested.type_name:
            count = len(d["attempt_ids"])
            return (
                "info",
                "rerun",
                f"Re-run of {count} errored attempt{'s' if count != 1 else ''} requested by "
                f"{actor or 'unknown'}: they run again under the run's conditions",
            )
        case RunScored.type_name:
            return ("info", "score", "Final scores recorded") if d["final"] else None
        case RunFinished.type_name:
            return "info", "finish", "Run finished"
        case RunStopped.type_name:
            return "warning", "stop", f"Run stopped: {d.get('reason', '')}; sandboxes cleaned"
        case RunFailed.type_name:
            return "error", "fail", f"Run failed: {d.get('reason', '')}"
        case AttemptLabelled.type_name:
            who = actor or "unknown"
            return "info", "label", f"{who} labelled attempt {d['attempt_id']} “{d['label']}”"
        case AttemptLabelRemoved.type_name:
            who = actor or "unknown"
            return "info", "label", f"{who} removed the label “{d['label']}” of {d['attempt_id']}"
    return None


def log_entry(event: StoredEvent, actor: str | None, timestamp: str | None = None) -> dict[str, Any] | None:
    """`timestamp`: the event's recorded_at as isoformat, when the caller has it already."""
    found = _message(event, actor)
    if found is None:
        return None
    level, step, message = found
    details = {"event_type": event.type, "event_id": event.event_id}
    if event.type == AttemptFinished.type_name:
        details.update({k: event.data.get(k) for k in ("attempt_id", "rewards", "exception_message")})
    return {
        "run_id": event.data["run_id"],
        "position": event.position,
        "timestamp": timestamp if timestamp is not None else isoformat(event.recorded_at),
        "level": level,
        "step": step,
        "message": message,
        "details": details,
    }
