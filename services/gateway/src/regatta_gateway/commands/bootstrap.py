"""First start: the bootstrap token creates the first admin and workspace."""

from __future__ import annotations

from regatta_shared.events import (
    ApiTokenCreated,
    MemberAdded,
    PlatformAdminGranted,
    UserRegistered,
    WorkspaceCreated,
)
from regatta_shared.events.envelope import deterministic_id, new_event
from regatta_shared.eventstore import EventStore, NewEvent
from regatta_shared.eventstore.appends import loads
from regatta_shared.eventstore.schema import events
from regatta_shared.ids import new_id, workspace_stream
from regatta_shared.settings import Settings, refuse_known_default
from sqlalchemy import Connection, select

from regatta_gateway.principals import Principal, Scope, hash_token


def bootstrap(store: EventStore, settings: Settings) -> Scope | None:
    """The bootstrap token's admin and workspace: created on first start, found on every later one.

    Their ids are random and recorded in the events: ids are visible to every member, and ids derived
    from the token (as they once were: 64 bits of its SHA-256) let anyone check guesses of it offline.
    Deployments bootstrapped so keep their ids: the admin is found by the token's hash, whatever its
    ids. Check and append share one locked transaction, so gateways starting together create one admin.
    """
    if not settings.bootstrap_token:
        return None
    refuse_known_default("REGATTA_BOOTSTRAP_TOKEN", settings.bootstrap_token)
    token_hash = hash_token(settings.bootstrap_token)
    with store.transaction() as conn:
        store.lock_appends(conn)
        found = _bootstrapped(conn, token_hash)
        if found is None:
            found = new_id("ws"), new_id("usr"), new_id("tok")
            store.append_within(
                conn, workspace_stream(found[0]), _bootstrap_events(*found, token_hash, settings), 0
            )
        # The bootstrap admin is the first platform administrator (it grants others: identity.py).
        # A deterministic event id makes this a no-op on every later start, and grants it once to
        # deployments bootstrapped before platform administrators existed. No version check: the append
        # lock held since the check above keeps every other writer out of this transaction.
        grant = new_event(
            PlatformAdminGranted(user_id=found[1]),
            event_id=deterministic_id(found[1], "platform-admin"),
            actor="system",
        )
        store.append_within(conn, workspace_stream(found[0]), [grant])
    workspace_id, user_id, token_id = found
    principal = Principal(user_id, "admin", "admin@localhost", token_id, None, platform_admin=True)
    return Scope(principal, workspace_id, settings.bootstrap_workspace, "admin")


def _bootstrapped(conn: Connection, token_hash: str) -> tuple[str, str, str] | None:
    """(workspace, user, token) ids of the bootstrap that recorded `token_hash`, if one did."""
    rows = conn.execute(
        select(events.c.stream_id, events.c.data).where(events.c.type == ApiTokenCreated.type_name)
    ).all()
    for stream_id, raw in rows:
        data = loads(raw) if isinstance(raw, str | bytes) else raw
        if data.get("token_hash") == token_hash and data.get("name") == "bootstrap":
            created = conn.execute(
                select(events.c.data).where(
                    events.c.stream_id == stream_id, events.c.type == WorkspaceCreated.type_name
                )
            ).scalar_one_or_none()
            if created is not None:
                workspace = loads(created) if isinstance(created, str | bytes) else created
                return workspace["workspace_id"], data["user_id"], data["token_id"]
    return None


def _bootstrap_events(
    workspace_id: str, user_id: str, token_id: str, token_hash: str, settings: Settings
) -> list[NewEvent]:
    payloads = [
        WorkspaceCreated(workspace_id=workspace_id, name=settings.bootstrap_workspace),
        UserRegistered(user_id=user_id, email="admin@localhost", name="admin"),
        MemberAdded(workspace_id=workspace_id, user_id=user_id, role="admin"),
        ApiTokenCreated(token_id=token_id, user_id=user_id, token_hash=token_hash, name="bootstrap"),
    ]
    return [new_event(payload, actor="system") for payload in payloads]
