"""The projection's handlers for identity and workspaces: workspaces, users, members and roles, platform
admins, API tokens and secret records (names and scopes; values never reach the read models)."""

from __future__ import annotations

from typing import Any

from regatta_shared.events import (
    ApiTokenCreated,
    ApiTokenRevoked,
    MemberAdded,
    MemberRemoved,
    MemberRoleChanged,
    PlatformAdminGranted,
    SecretDeleted,
    SecretSet,
    UserRegistered,
    WorkspaceCreated,
    WorkspaceDeleted,
    WorkspaceRenamed,
)
from regatta_shared.eventstore import StoredEvent
from sqlalchemy import Connection, and_, delete, insert, select, update

from regatta_gateway.readmodels import tables as t
from regatta_gateway.readmodels.handling import Handler, recorded_at, registrar, user_name

HANDLERS: dict[str, Handler] = {}
handles = registrar(HANDLERS)


@handles(WorkspaceCreated)
def _workspace(conn: Connection, _e: StoredEvent, d: dict[str, Any]) -> None:
    conn.execute(insert(t.workspaces).values(id=d["workspace_id"], name=d["name"]))


@handles(UserRegistered)
def _user(conn: Connection, _e: StoredEvent, d: dict[str, Any]) -> None:
    conn.execute(insert(t.users).values(id=d["user_id"], email=d["email"], name=d["name"]))


@handles(MemberAdded)
def _member(conn: Connection, e: StoredEvent, d: dict[str, Any]) -> None:
    """Adding someone already in the workspace changes only their role: they keep their place."""
    where = and_(t.members.c.workspace_id == d["workspace_id"], t.members.c.user_id == d["user_id"])
    if conn.execute(select(t.members.c.user_id).where(where)).first() is not None:
        conn.execute(update(t.members).where(where).values(role=d["role"]))
        return
    conn.execute(
        insert(t.members).values(
            workspace_id=d["workspace_id"], user_id=d["user_id"], role=d["role"], joined=e.position
        )
    )


@handles(MemberRoleChanged)
def _member_role(conn: Connection, _e: StoredEvent, d: dict[str, Any]) -> None:
    where = and_(t.members.c.workspace_id == d["workspace_id"], t.members.c.user_id == d["user_id"])
    conn.execute(update(t.members).where(where).values(role=d["role"]))


@handles(MemberRemoved)
def _member_removed(conn: Connection, _e: StoredEvent, d: dict[str, Any]) -> None:
    where = and_(t.members.c.workspace_id == d["workspace_id"], t.members.c.user_id == d["user_id"])
    conn.execute(delete(t.members).where(where))


@handles(WorkspaceRenamed)
def _workspace_renamed(conn: Connection, _e: StoredEvent, d: dict[str, Any]) -> None:
    conn.execute(update(t.workspaces).where(t.workspaces.c.id == d["workspace_id"]).values(name=d["name"]))


@handles(WorkspaceDeleted)
def _workspace_deleted(conn: Connection, _e: StoredEvent, d: dict[str, Any]) -> None:
    """Gone from every list and out of reach (no members); its runs' rows stay, as its events do."""
    conn.execute(delete(t.members).where(t.members.c.workspace_id == d["workspace_id"]))
    conn.execute(delete(t.workspaces).where(t.workspaces.c.id == d["workspace_id"]))


@handles(PlatformAdminGranted)
def _platform_admin(conn: Connection, _e: StoredEvent, d: dict[str, Any]) -> None:
    conn.execute(delete(t.platform_admins).where(t.platform_admins.c.user_id == d["user_id"]))
    conn.execute(insert(t.platform_admins).values(user_id=d["user_id"]))


@handles(ApiTokenCreated)
def _token(conn: Connection, e: StoredEvent, d: dict[str, Any]) -> None:
    conn.execute(
        insert(t.tokens).values(
            id=d["token_id"],
            user_id=d["user_id"],
            token_hash=d["token_hash"],
            name=d["name"],
            expires_at=d.get("expires_at"),
            revoked=False,
            created_at=recorded_at(e),
        )
    )


@handles(ApiTokenRevoked)
def _revoke(conn: Connection, _e: StoredEvent, d: dict[str, Any]) -> None:
    conn.execute(update(t.tokens).where(t.tokens.c.id == d["token_id"]).values(revoked=True))


@handles(SecretSet)
def _secret_set(conn: Connection, e: StoredEvent, d: dict[str, Any]) -> None:
    who = user_name(conn, e.actor)
    existing = conn.execute(select(t.secrets.c.id).where(t.secrets.c.id == d["secret_id"])).first()
    if existing:
        conn.execute(
            update(t.secrets)
            .where(t.secrets.c.id == d["secret_id"])
            .values(updated_at=recorded_at(e), updater_name=who)
        )
    else:
        conn.execute(
            insert(t.secrets).values(
                id=d["secret_id"],
                workspace_id=d["workspace_id"],
                name=d["name"],
                scope=d["scope"],
                owner_user_id=d.get("owner_user_id"),
                created_at=recorded_at(e),
                updated_at=recorded_at(e),
                creator_name=who,
                updater_name=who,
            )
        )


@handles(SecretDeleted)
def _secret_deleted(conn: Connection, _e: StoredEvent, d: dict[str, Any]) -> None:
    conn.execute(delete(t.secrets).where(t.secrets.c.id == d["secret_id"]))
