"""Identity commands: API tokens, members, platform administrators. Each is decided on the workspace's
stream (workspaces/records.py) and appended at the version it read (workspaces/appends.execute); reads
use the read models. Workspaces themselves are decided in workspaces/aggregate.py.

Tokens are shown once and stored only as SHA-256 hashes. A user's id is derived from their email, so
the event store's event-id check settles a race of two requests adding the same new user instead of
leaving duplicates to the projection.
"""

from __future__ import annotations

import hashlib
import secrets
from datetime import datetime, timedelta
from typing import Any

from regatta_shared.clock import isoformat, utcnow
from regatta_shared.events import ApiTokenCreated, MemberAdded, UserRegistered
from regatta_shared.eventstore import EventStore
from regatta_shared.ids import new_id
from sqlalchemy import func, select

from regatta_gateway.errors import Forbidden, Invalid, NotFound
from regatta_gateway.principals import Principal, Scope, hash_token
from regatta_gateway.readmodels import tables as t
from regatta_gateway.workspaces import aggregate as ws
from regatta_gateway.workspaces import records
from regatta_gateway.workspaces.appends import execute

ROLES = ("admin", "member")
MAX_TOKEN_SECONDS = 10 * 366 * 24 * 3600  # ten years; a larger one overflows the date arithmetic


def _digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def _text(body: dict[str, Any], key: str, *, required: bool = True, limit: int = 200) -> str | None:
    value = body.get(key)
    if value is None and not required:
        return None
    if not isinstance(value, str) or not value.strip() or len(value.strip()) > limit:
        raise Invalid(f"{key} must be a non-empty string of at most {limit} characters", field=key)
    return value.strip()


def _expiry(body: dict[str, Any]) -> str | None:
    seconds = body.get("expires_in_seconds")
    raw = body.get("expires_at")
    if seconds is not None and raw is not None:
        raise Invalid("give expires_at or expires_in_seconds, not both", field="expires_at")
    if seconds is not None:
        if isinstance(seconds, bool) or not isinstance(seconds, int) or not 0 < seconds <= MAX_TOKEN_SECONDS:
            raise Invalid(
                f"expires_in_seconds must be an integer from 1 to {MAX_TOKEN_SECONDS}",
                field="expires_in_seconds",
            )
        return isoformat(utcnow() + timedelta(seconds=seconds))
    if raw is None:
        return None
    try:
        moment = datetime.fromisoformat(str(raw))
    except ValueError:
        raise Invalid("expires_at must be an ISO-8601 timestamp", field="expires_at") from None
    if moment.tzinfo is None:
        raise Invalid("expires_at needs a timezone", field="expires_at")
    if moment <= utcnow():
        raise Invalid("expires_at must be in the future", field="expires_at")
    return isoformat(moment)


def _new_token(user_id: str, name: str, expires_at: str | None) -> tuple[str, ApiTokenCreated]:
    """The token (shown once) and the event that records only its hash."""
    token = "rg_" + secrets.token_urlsafe(32)
    created = ApiTokenCreated(
        token_id=new_id("tok"),
        user_id=user_id,
        token_hash=hash_token(token),
        name=name,
        expires_at=expires_at,
    )
    return token, created


def issue_token(
    store: EventStore, user_id: str, name: str, expires_at: str | None, *, actor: str, workspace_id: str
) -> dict[str, Any]:
    token, created = _new_token(user_id, name, expires_at)
    stored = execute(
        store,
        workspace_id,
        actor,
        lambda state: records.decide_create_token(state, actor, created),
        reads=ws.standing(actor),
    )
    body = {
        "id": created.token_id,
        "name": name,
        "token": token,
        "created_at": isoformat(stored[0].recorded_at),
    }
    if expires_at:
        body["expires_at"] = expires_at
    return body


def create_token(store: EventStore, scope: Scope, body: dict[str, Any]) -> dict[str, Any]:
    name = _text(body, "name", required=False) or "api token"
    actor = scope.principal.user_id
    return issue_token(store, actor, name, _expiry(body), actor=actor, workspace_id=scope.workspace_id)


def list_tokens(store: EventStore, principal: Principal) -> list[dict[str, Any]]:
    with store.read_engine.connect() as conn:
        rows = (
            conn.execute(
                select(
                    t.tokens.c.id,
                    t.tokens.c.name,
                    t.tokens.c.expires_at,
                    t.tokens.c.revoked,
                    t.tokens.c.created_at,
                )
                .where(t.tokens.c.user_id == principal.user_id)
                .order_by(t.tokens.c.created_at, t.tokens.c.id)
            )
            .mappings()
            .all()
        )
    return [
        {k: v for k, v in dict(r).items() if v is not None} | {"revoked": bool(r["revoked"])} for r in rows
    ]


def revoke_token(store: EventStore, scope: Scope, token_id: str) -> None:
    """Only the token's owner revokes it; anyone else learns nothing about it (404)."""
    with store.read_engine.connect() as conn:
        row = conn.execute(
            select(t.tokens.c.revoked).where(
                t.tokens.c.id == token_id, t.tokens.c.user_id == scope.principal.user_id
            )
        ).first()
    if row is None:
        raise NotFound(f"Token {token_id!r} not found", code="NOT_FOUND")
    if row[0]:
        return
    actor = scope.principal.user_id
    execute(
        store,
        scope.workspace_id,
        actor,
        lambda state: records.decide_revoke_token(state, actor, token_id),
        reads=ws.standing(actor),
    )


def _user_by_email(store: EventStore, email: str) -> dict[str, Any] | None:
    with store.read_engine.connect() as conn:
        row = (
            conn.execute(
                select(t.users).where(func.lower(t.users.c.email) == email.lower()).order_by(t.users.c.id)
            )
            .mappings()
            .first()
        )
    return dict(row) if row else None


def add_member(store: EventStore, scope: Scope, body: dict[str, Any]) -> dict[str, Any]:
    """Add a user (created if the email is new) to the scope's workspace; a platform administrator may
    also issue them a token. A workspace admin may not: a token for someone else acts as them in every
    workspace they belong to, so minting one is a platform administrator's act (and an existing user's
    own `POST /tokens` otherwise)."""
    if not scope.is_admin:
        raise Forbidden("Only workspace admins can add members", code="FORBIDDEN")
    if body.get("issue_token") and not scope.principal.platform_admin:
        raise Forbidden(
            "issue_token: only platform administrators issue tokens to other users",
            code="FORBIDDEN",
            field="issue_token",
        )
    email = _text(body, "email", limit=300)
    assert email is not None
    if "@" not in email:
        raise Invalid("email must be an email address", field="email")
    role = body.get("role", "member")
    if role not in ROLES:
        raise Invalid("role must be admin or member", field="role")
    expires_at = _expiry(body) if body.get("issue_token") else None
    actor = scope.principal.user_id
    user = _user_by_email(store, email)
    registered = None
    if user is None:
        name = _text(body, "name", required=False, limit=300) or email.split("@", 1)[0]
        user = {"id": f"usr_{_digest('user:' + email.lower())}", "email": email, "name": name}
        registered = UserRegistered(user_id=user["id"], email=email, name=name)
    added = MemberAdded(workspace_id=scope.workspace_id, user_id=user["id"], role=role)
    token = created = None
    if body.get("issue_token"):
        token, created = _new_token(user["id"], f"issued by {scope.principal.user_name}", expires_at)
    execute(
        store,
        scope.workspace_id,
        actor,
        lambda state: records.decide_add_member(state, actor, added, registered, created),
        reads=records.member_reads(actor, user["id"]),
    )
    result: dict[str, Any] = {
        "workspace_id": scope.workspace_id,
        "user_id": user["id"],
        "email": user["email"],
        "name": user["name"],
        "role": role,
    }
    if created is not None:
        result.update(token=token, token_id=created.token_id)
    return result


def grant_platform_admin(store: EventStore, scope: Scope, body: dict[str, Any]) -> dict[str, Any]:
    """A platform administrator makes an existing user (by email) one too; idempotent."""
    if not scope.principal.platform_admin:
        raise Forbidden("Only platform administrators can grant this", code="FORBIDDEN")
    email = _text(body, "email", limit=300)
    assert email is not None
    user = _user_by_email(store, email)
    if user is None:
        raise NotFound(f"No user with email {email!r}", code="NOT_FOUND", field="email")
    actor = scope.principal.user_id
    execute(
        store,
        scope.workspace_id,
        actor,
        lambda state: records.decide_grant_platform_admin(state, actor, user["id"]),
        reads=ws.standing(actor),
    )
    return {"user_id": user["id"], "email": user["email"], "platform_admin": True}


def list_platform_admins(store: EventStore, scope: Scope) -> list[dict[str, str]]:
    if not scope.principal.platform_admin:
        raise Forbidden("Only platform administrators can list them", code="FORBIDDEN")
    query = (
        select(t.users.c.id.label("user_id"), t.users.c.email, t.users.c.name)
        .join(t.platform_admins, t.platform_admins.c.user_id == t.users.c.id)
        .order_by(t.users.c.email)
    )
    with store.read_engine.connect() as conn:
        return [dict(row) for row in conn.execute(query).mappings()]
