"""Who belongs where: a user's workspaces, a workspace's members."""

from __future__ import annotations

from typing import Any

from regatta_shared.eventstore import EventStore
from sqlalchemy import select

from regatta_gateway.readmodels import tables as t


def user_workspaces(store: EventStore, user_id: str) -> list[dict[str, Any]]:
    """The workspaces `user_id` belongs to, by name, with the role; `default` marks the one they were
    given first, where a request naming no workspace acts (a later workspace never moves them)."""
    query = (
        select(t.workspaces.c.id, t.workspaces.c.name, t.members.c.role, t.members.c.joined)
        .join(t.members, t.members.c.workspace_id == t.workspaces.c.id)
        .where(t.members.c.user_id == user_id)
        .order_by(t.workspaces.c.name)
    )
    with store.read_engine.connect() as conn:
        rows = [dict(row) for row in conn.execute(query).mappings()]
    first = min(rows, key=lambda row: (row["joined"] or 0, row["name"]), default=None)
    return [{"id": r["id"], "name": r["name"], "role": r["role"], "default": r is first} for r in rows]


def member_list(store: EventStore, workspace_id: str) -> list[dict[str, str]]:
    """Who belongs to a workspace, by email: id, email, name and role (never their tokens)."""
    query = (
        select(t.users.c.id.label("user_id"), t.users.c.email, t.users.c.name, t.members.c.role)
        .join(t.members, t.members.c.user_id == t.users.c.id)
        .where(t.members.c.workspace_id == workspace_id)
        .order_by(t.users.c.email)
    )
    with store.read_engine.connect() as conn:
        return [dict(row) for row in conn.execute(query).mappings()]
