"""Labels on attempts: one row per label, deleted when the label is removed."""

from __future__ import annotations

from typing import Any

from regatta_shared.events import AttemptLabelled, AttemptLabelRemoved
from regatta_shared.eventstore import StoredEvent
from sqlalchemy import Connection, delete, insert

from regatta_gateway.readmodels import tables as t
from regatta_gateway.readmodels.handling import Handler, recorded_at, registrar, user_name

HANDLERS: dict[str, Handler] = {}
handles = registrar(HANDLERS)


@handles(AttemptLabelled)
def _labelled(conn: Connection, e: StoredEvent, d: dict[str, Any]) -> None:
    # A label id is new per command; a copy of the event under another event id must not add a second row.
    conn.execute(delete(t.attempt_labels).where(t.attempt_labels.c.label_id == d["label_id"]))
    conn.execute(
        insert(t.attempt_labels).values(
            label_id=d["label_id"],
            run_id=d["run_id"],
            attempt_id=d["attempt_id"],
            label=d["label"],
            note=d.get("note") or "",
            by_user=e.actor,
            by_name=user_name(conn, e.actor),
            at=recorded_at(e),
            position=e.position,
        )
    )


@handles(AttemptLabelRemoved)
def _removed(conn: Connection, _e: StoredEvent, d: dict[str, Any]) -> None:
    conn.execute(delete(t.attempt_labels).where(t.attempt_labels.c.label_id == d["label_id"]))
