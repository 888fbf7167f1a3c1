"""What the projection's handlers share: the Handler signature, `@handles(...)` registration into a
module's own table (projection.py joins them), an event's recorded time and a user's display name."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from regatta_shared.clock import isoformat
from regatta_shared.events import Event
from regatta_shared.eventstore import StoredEvent
from sqlalchemy import Connection, select

from regatta_gateway.readmodels import tables as t

Handler = Callable[[Connection, StoredEvent, dict[str, Any]], None]


def registrar(registry: dict[str, Handler]) -> Callable[..., Callable[[Handler], Handler]]:
    """`handles(*event_types)`, a decorator filing the handler in `registry` under each type's name."""

    def handles(*types: type[Event]) -> Callable[[Handler], Handler]:
        def register(fn: Handler) -> Handler:
            for event_type in types:
                registry[event_type.type_name] = fn
            return fn

        return register

    return handles


def recorded_at(event: StoredEvent) -> str:
    return isoformat(event.recorded_at) or ""


def user_name(conn: Connection, user_id: str | None) -> str | None:
    if not user_id:
        return None
    row = conn.execute(select(t.users.c.name).where(t.users.c.id == user_id)).first()
    return row[0] if row else user_id
