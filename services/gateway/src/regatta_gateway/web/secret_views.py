"""The secret records a user may use, by name and scope only: values never reach the read models."""

from __future__ import annotations

from typing import Any

from regatta_shared.eventstore import EventStore
from sqlalchemy import select

from regatta_gateway.principals import Scope
from regatta_gateway.readmodels import tables as t


def secret_names(store: EventStore, scope: Scope) -> list[dict[str, Any]]:
    """Secret records this user can use: every workspace record and the user's personal ones."""
    with store.read_engine.connect() as conn:
        rows = (
            conn.execute(
                select(t.secrets)
                .where(t.secrets.c.workspace_id == scope.workspace_id)
                .order_by(t.secrets.c.name, t.secrets.c.scope)
            )
            .mappings()
            .all()
        )
    return [
        {
            "id": r["id"],
            "name": r["name"],
            "scope": r["scope"],
            "updated_at": r["updated_at"] or r["created_at"],
            "updater_name": r["updater_name"] or r["creator_name"],
        }
        for r in rows
        if r["scope"] == "workspace" or r["owner_user_id"] == scope.principal.user_id
    ]
