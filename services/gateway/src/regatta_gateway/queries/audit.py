"""The audit trail: who did what, from the ops read model, filterable by actor, kind and time."""

from __future__ import annotations

from typing import Any

from regatta_shared.eventstore import EventStore
from sqlalchemy import select

from regatta_gateway.errors import Invalid
from regatta_gateway.principals import Scope
from regatta_gateway.readmodels import tables as t
from regatta_gateway.readmodels.operations import audit


def list_audit(
    store: EventStore,
    scope: Scope,
    *,
    actor: str | None = None,
    kind: str | None = None,
    since: str | None = None,
    until: str | None = None,
    limit: int = 100,
    before: int | None = None,
) -> dict[str, Any]:
    query = select(audit, t.users.c.name.label("actor_name")).outerjoin(
        t.users, t.users.c.id == audit.c.actor
    )
    query = query.where(audit.c.workspace_id == scope.workspace_id)
    if actor:
        query = query.where((audit.c.actor == actor) | (t.users.c.name == actor) | (t.users.c.email == actor))
    if kind:
        query = query.where(audit.c.kind == kind)
    for value, name in ((since, "since"), (until, "until")):
        if value is not None and not _is_time(value):
            raise Invalid(f"{name} must be an ISO-8601 timestamp", field=name, code="VALIDATION")
    if since:
        query = query.where(audit.c.recorded_at >= since)
    if until:
        query = query.where(audit.c.recorded_at <= until)
    if before:
        query = query.where(audit.c.position < before)
    with store.read_engine.connect() as conn:
        rows = conn.execute(query.order_by(audit.c.position.desc()).limit(limit + 1)).mappings().all()
    more = len(rows) > limit
    rows = rows[:limit]
    entries = [
        {
            "position": r["position"],
            "at": r["recorded_at"],
            "actor": r["actor"],
            "actor_name": r["actor_name"] or r["actor"],
            "kind": r["kind"],
            "stream": r["stream_id"],
            "summary": r["summary"],
        }
        for r in rows
    ]
    return {"entries": entries, "next_before": rows[-1]["position"] if more and rows else None}


def _is_time(value: str) -> bool:
    from datetime import datetime

    try:
        datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return False
    return True
