"""A run as of one version of its stream: what a download exports.

Downloads of a running run must be consistent: the manifest's sizes have to match the bytes served
later, while events keep arriving. So a manifest pins the run stream's version, and every file is
rebuilt from exactly the events up to that version. The fold mirrors the read-model projection.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any

from regatta_shared.events import (
    AttemptFinished,
    AttemptRetried,
    AttemptScheduled,
    AttemptStarted,
    RunFailed,
    RunFinished,
    RunQueued,
    RunScored,
    RunStarted,
    RunStopped,
    RunSubmitted,
)
from regatta_shared.eventstore import EventStore, StoredEvent
from regatta_shared.ids import run_stream
from sqlalchemy import select

from .readmodels import tables as t
from .readmodels.logs import log_entry

STATUS_BY_EVENT = {
    RunSubmitted.type_name: "pending",
    RunQueued.type_name: "queued",
    RunStarted.type_name: "running",
    RunFinished.type_name: "finished",
    RunStopped.type_name: "stopped",
    RunFailed.type_name: "failed",
}


@dataclass
class RunSnapshot:
    run_id: str
    version: int
    status: str = "pending"
    submission: dict[str, Any] = field(default_factory=dict)
    scores: list[dict[str, Any]] = field(default_factory=list)
    scores_final: bool = False
    attempts: dict[str, dict[str, Any]] = field(default_factory=dict)
    logs: list[dict[str, Any]] = field(default_factory=list)

    def attempt_rows(self) -> list[dict[str, Any]]:
        """Shaped like run_queries.list_attempts, in its order."""
        return sorted(self.attempts.values(), key=lambda a: (a["task"], a["agent_index"], a["attempt_index"]))


def _attempt(snapshot: RunSnapshot, event: StoredEvent) -> None:
    d = event.data
    if event.type == AttemptScheduled.type_name:
        snapshot.attempts[d["attempt_id"]] = {
            "attempt_id": d["attempt_id"],
            "agent_index": d["agent_index"],
            "task": d["task"],
            "attempt_index": d["attempt_index"],
            "status": "scheduled",
            "outcome": None,
            "try_number": d.get("try_number", 1),
            "scheduled_at": None,
            "started_at": None,
            "finished_at": None,
            "result": None,
        }
        return
    row = snapshot.attempts.get(d["attempt_id"])
    if row is None:
        return
    if event.type == AttemptStarted.type_name and row["outcome"] is None:
        row.update(status="running", try_number=d["try_number"])
    elif event.type == AttemptRetried.type_name:
        row.update(status="retrying", try_number=d["try_number"])
    elif event.type == AttemptFinished.type_name:
        row.update(status="finished", outcome=d["outcome"], try_number=d["try_number"], result=d)


def fold(run_id: str, events: list[StoredEvent], names: dict[str, str]) -> RunSnapshot:
    snapshot = RunSnapshot(run_id=run_id, version=events[-1].version if events else 0)
    for event in events:
        d = event.data
        if event.type in STATUS_BY_EVENT:
            snapshot.status = STATUS_BY_EVENT[event.type]
        if event.type == RunSubmitted.type_name:
            snapshot.submission = {k: v for k, v in d.items() if k != "sealed_secrets"}
        elif event.type == RunScored.type_name and not (snapshot.scores_final and not d["final"]):
            snapshot.scores, snapshot.scores_final = d["agents"], d["final"]
        elif event.type.startswith("Attempt"):
            _attempt(snapshot, event)
        actor = event.actor
        entry = log_entry(event, names.get(actor, actor) if actor else None)
        if entry is not None:
            snapshot.logs.append({k: entry[k] for k in ("timestamp", "level", "step", "message", "details")})
    return snapshot


_CACHE: OrderedDict[tuple[str, int], RunSnapshot] = OrderedDict()
_CACHE_SIZE = 16
_LOCK = threading.Lock()


def load_snapshot(store: EventStore, run_id: str, version: int) -> RunSnapshot:
    """The run as of `version`; cached, since a snapshot of a version never changes."""
    key = (run_id, version)
    with _LOCK:
        if key in _CACHE:
            _CACHE.move_to_end(key)
            return _CACHE[key]
    events = [e for e in store.read_stream(run_stream(run_id)) if e.version <= version]
    actors = {e.actor for e in events if e.actor}
    with store.read_engine.connect() as conn:
        names = dict(conn.execute(select(t.users.c.id, t.users.c.name).where(t.users.c.id.in_(actors))).all())
    snapshot = fold(run_id, events, names)
    with _LOCK:
        _CACHE[key] = snapshot
        while len(_CACHE) > _CACHE_SIZE:
            _CACHE.popitem(last=False)
    return snapshot
