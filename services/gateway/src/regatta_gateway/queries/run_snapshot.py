"""A run as of one version of its stream: what a download exports.

Downloads of a running run must be consistent: the manifest's sizes have to match the bytes served
later, while events keep arriving. So a manifest pins the run stream's version, and every file is
rebuilt from exactly the events up to that version, folded by the read models' own rules
(regatta_shared.runs).
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any

from regatta_shared.clock import isoformat
from regatta_shared.events import AttemptLabelled, AttemptLabelRemoved
from regatta_shared.eventstore import EventStore, StoredEvent
from regatta_shared.ids import run_stream
from regatta_shared.runs import RunFold
from regatta_shared.runs.status import PENDING, RunStatus
from sqlalchemy import select

from regatta_gateway.readmodels import tables as t
from regatta_gateway.readmodels.logs import log_entry


@dataclass
class RunSnapshot:
    run_id: str
    version: int
    status: RunStatus = PENDING
    submission: dict[str, Any] = field(default_factory=dict)
    scores: list[dict[str, Any]] = field(default_factory=list)
    scores_final: bool = False
    attempts: dict[str, dict[str, Any]] = field(default_factory=dict)
    logs: list[dict[str, Any]] = field(default_factory=list)
    labels: dict[str, dict[str, Any]] = field(default_factory=dict)  # label_id -> label, in order

    def attempt_rows(self) -> list[dict[str, Any]]:
        """Shaped like run_activity.list_attempts (labels included), in its order."""
        by_attempt: dict[str, list[dict[str, Any]]] = {}
        for label in self.labels.values():
            by_attempt.setdefault(label["attempt_id"], []).append(
                {k: label[k] for k in ("id", "label", "note", "by", "at")}
            )
        rows = [a | {"labels": by_attempt.get(a["attempt_id"], [])} for a in self.attempts.values()]
        return sorted(rows, key=lambda a: (a["task"], a["agent_index"], a["attempt_index"]))


def fold(run_id: str, events: list[StoredEvent], names: dict[str, str]) -> RunSnapshot:
    run = RunFold(run_id)
    logs = []
    labels: dict[str, dict[str, Any]] = {}
    for event in events:
        at = isoformat(event.recorded_at) or ""
        run.apply(event.type, event.data, at)
        actor = event.actor
        _fold_label(labels, event, names.get(actor, actor) if actor else None, at)
        entry = log_entry(event, names.get(actor, actor) if actor else None, at)
        if entry is not None:
            logs.append({k: entry[k] for k in ("timestamp", "level", "step", "message", "details")})
    return RunSnapshot(
        run_id=run_id,
        version=events[-1].version if events else 0,
        status=run.status,
        submission=run.submission,
        scores=run.scores,
        scores_final=run.scores_final,
        attempts=run.attempts,
        logs=logs,
        labels=labels,
    )


def _fold_label(labels: dict[str, dict[str, Any]], event: StoredEvent, by: str | None, at: str) -> None:
    """As annotation_handlers folds them into rm_attempt_labels."""
    d = event.data
    if event.type == AttemptLabelled.type_name:
        labels.pop(d["label_id"], None)
        labels[d["label_id"]] = {
            "id": d["label_id"],
            "attempt_id": d["attempt_id"],
            "label": d["label"],
            "note": d.get("note") or "",
            "by": by,
            "at": at,
        }
    elif event.type == AttemptLabelRemoved.type_name:
        labels.pop(d["label_id"], None)


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
