"""Bearer tokens (stored only as SHA-256 hashes) and the workspace a request acts in: the service layer's
view of who acts, with no HTTP in it (routes pass the headers' values)."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from regatta_shared.clock import utcnow
from regatta_shared.eventstore import EventStore
from sqlalchemy import and_, select, true

from regatta_gateway.errors import NotFound, Refused, Unauthorized
from regatta_gateway.principals import Principal, Scope, hash_token
from regatta_gateway.readmodels import tables as t

_PRINCIPAL_COLUMNS = (
    t.tokens.c.id,
    t.tokens.c.user_id,
    t.tokens.c.revoked,
    t.tokens.c.expires_at,
    t.users.c.name,
    t.users.c.email,
    t.platform_admins.c.user_id.label("platform_admin"),
)


def _bearer(authorization: str | None) -> str:
    if not authorization or not authorization.lower().startswith("bearer "):
        raise Unauthorized("Missing bearer token", code="AUTH_HEADER_MISSING")
    return hash_token(authorization.split(" ", 1)[1].strip())


def _principal(row: Any) -> Principal:
    if row is None:
        raise Unauthorized("Invalid token", code="TOKEN_INVALID")
    if row["revoked"]:
        raise Unauthorized("Token revoked", code="TOKEN_REVOKED")
    if row["expires_at"] and datetime.fromisoformat(row["expires_at"]) <= utcnow():
        raise Unauthorized("Token expired", code="TOKEN_EXPIRED")
    return Principal(
        row["user_id"], row["name"], row["email"], row["id"], row["expires_at"], bool(row["platform_admin"])
    )


def _no_workspace() -> Refused:
    return NotFound("Workspace not found or not accessible", code="WORKSPACE_SCOPE_HEADER_ACCESS_DENIED")


def _workspace_filter(workspace: str | None) -> Any:
    """The named workspace (by name or id), or any (the user's first, their default, is taken)."""
    if not workspace:
        return true()
    name = workspace.strip()
    return (t.workspaces.c.name == name) | (t.workspaces.c.id == name)


def authenticate(store: EventStore, authorization: str | None) -> Principal:
    token_hash = _bearer(authorization)
    with store.read_engine.connect() as conn:
        row = (
            conn.execute(
                select(*_PRINCIPAL_COLUMNS)
                .join(t.users, t.users.c.id == t.tokens.c.user_id)
                .outerjoin(t.platform_admins, t.platform_admins.c.user_id == t.tokens.c.user_id)
                .where(t.tokens.c.token_hash == token_hash)
            )
            .mappings()
            .first()
        )
    return _principal(row)


def resolve_scope(store: EventStore, principal: Principal, workspace: str | None) -> Scope:
    """The named workspace (by name or id) if the user belongs to it; else their default one."""
    query = (
        select(t.workspaces.c.id, t.workspaces.c.name, t.members.c.role)
        .join(t.members, t.members.c.workspace_id == t.workspaces.c.id)
        .where(t.members.c.user_id == principal.user_id, _workspace_filter(workspace))
        .order_by(t.members.c.joined, t.workspaces.c.name)
    )
    with store.read_engine.connect() as conn:
        row = conn.execute(query).mappings().first()
    if row is None:
        raise _no_workspace()
    return Scope(principal, row["id"], row["name"], row["role"])


def authorize(store: EventStore, authorization: str | None, workspace: str | None) -> Scope:
    """authenticate + resolve_scope in one query (every API request pays it): the token's row, its user
    and the workspace, outer-joined so that a valid token without that workspace still tells which."""
    token_hash = _bearer(authorization)
    membership = t.members.join(
        t.workspaces, and_(t.workspaces.c.id == t.members.c.workspace_id, _workspace_filter(workspace))
    )
    query = (
        select(
            *_PRINCIPAL_COLUMNS,
            t.workspaces.c.id.label("workspace_id"),
            t.workspaces.c.name.label("workspace_name"),
            t.members.c.role,
        )
        .join(t.users, t.users.c.id == t.tokens.c.user_id)
        .outerjoin(t.platform_admins, t.platform_admins.c.user_id == t.tokens.c.user_id)
        .outerjoin(membership, t.members.c.user_id == t.tokens.c.user_id)
        .where(t.tokens.c.token_hash == token_hash)
        .order_by(t.members.c.joined, t.workspaces.c.name)
        .limit(1)
    )
    with store.read_engine.connect() as conn:
        row = conn.execute(query).mappings().first()
    principal = _principal(row)
    if row["workspace_id"] is None:
        raise _no_workspace()
    return Scope(principal, row["workspace_id"], row["workspace_name"], row["role"])
