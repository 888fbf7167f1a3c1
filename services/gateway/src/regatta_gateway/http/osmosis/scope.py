"""Transport rules of the Osmosis CLI contract: scope headers (§2.3) and encoded path segments (§2.6)."""

from __future__ import annotations

import re
from typing import Any
from urllib.parse import unquote

from regatta_shared.eventstore import EventStore
from sqlalchemy import func, select
from starlette.types import ASGIApp, Receive, Send
from starlette.types import Scope as AsgiScope

from regatta_gateway.authentication import authenticate, resolve_scope
from regatta_gateway.errors import Invalid, NotFound
from regatta_gateway.principals import Principal, Scope
from regatta_gateway.readmodels import tables as t

CLI_PREFIX = "/api/cli/"
GIT_IDENTITY = re.compile(r"^[A-Za-z0-9][A-Za-z0-9-]*/[A-Za-z0-9._-]+$")


class RawCliPaths:
    """Route `/api/cli/*` on the raw (still percent-encoded) path.

    The server decodes `%2F` into `/` before routing, so a run named `a/b` would split into two segments
    and hit the wrong route. Routing the raw path keeps each segment whole; `segment()` decodes it.
    """

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: AsgiScope, receive: Receive, send: Send) -> None:
        raw = scope.get("raw_path") if scope["type"] == "http" else None
        if raw and scope["path"].startswith(CLI_PREFIX):
            scope = {**scope, "path": raw.decode("latin-1").split("?", 1)[0]}
        await self.app(scope, receive, send)


def segment(value: str) -> str:
    return unquote(value)


def cli_scope(store: EventStore, authorization: str | None, workspace: str | None, git: str | None) -> Scope:
    principal = authenticate(store, authorization)
    workspace = (workspace or "").strip() or None
    git = (git or "").strip() or None
    if workspace and git:
        raise Invalid(
            "Specify either a Git workspace or a workspace, not both",
            code="WORKSPACE_SCOPE_HEADER_CONFLICT",
        )
    if workspace:
        return resolve_scope(store, principal, workspace)
    if git:
        scope = git_scope(store, principal, git)
        if scope is None:
            raise NotFound(
                f"No accessible workspace is connected to {git}", code="GIT_REPOSITORY_NOT_CONNECTED"
            )
        return scope
    raise Invalid("X-Osmosis-Workspace or X-Osmosis-Git is required", code="GIT_SCOPE_HEADER_REQUIRED")


def git_scope(store: EventStore, principal: Principal, git: str) -> Scope | None:
    """A workspace named like the repository (`owner/repo`, case-insensitive) that the user belongs to.

    An unknown repository and one whose workspace the user cannot see answer the same, so the header
    cannot probe other teams' workspaces.
    """
    if not GIT_IDENTITY.match(git):
        raise Invalid("X-Osmosis-Git must be owner/repo", code="GIT_SCOPE_HEADER_INVALID")
    with store.read_engine.connect() as conn:
        row = (
            conn.execute(
                select(t.workspaces.c.id, t.workspaces.c.name, t.members.c.role)
                .join(t.members, t.members.c.workspace_id == t.workspaces.c.id)
                .where(
                    t.members.c.user_id == principal.user_id, func.lower(t.workspaces.c.name) == git.lower()
                )
            )
            .mappings()
            .first()
        )
    return Scope(principal, row["id"], row["name"], row["role"]) if row else None


def verify(store: EventStore, authorization: str | None, git: str | None) -> dict[str, Any]:
    """`GET /api/cli/verify` (§4.14): who the token belongs to and, from X-Osmosis-Git, the workspace."""
    principal = authenticate(store, authorization)
    body: dict[str, Any] = {
        "user": {"id": principal.user_id, "email": principal.email, "name": principal.user_name},
        "token_id": principal.token_id,
        "workspace": None,
    }
    if principal.expires_at:
        body["expires_at"] = principal.expires_at
    git = (git or "").strip()
    if git and GIT_IDENTITY.match(git):
        scope = git_scope(store, principal, git)
        if scope is not None:
            body["workspace"] = {"id": scope.workspace_id, "name": scope.workspace_name, "role": scope.role}
    return body
