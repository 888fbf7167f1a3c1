"""First start: the bootstrap token creates the first admin and workspace; hosted benchmarks are added."""

from __future__ import annotations

import json
import logging

from regatta_shared.events import (
    ApiTokenCreated,
    MemberAdded,
    PlatformAdminGranted,
    UserRegistered,
    WorkspaceCreated,
)
from regatta_shared.eventstore import EventStore
from regatta_shared.eventstore.records import deterministic_id, new_event
from regatta_shared.ids import workspace_stream
from regatta_shared.settings import Settings
from regatta_shared.source_policy import SourcePolicy
from sqlalchemy import select

from .auth import Principal, Scope, hash_token
from .benchmark_sources import parse_source
from .commands import add_benchmark
from .readmodels import tables as t

log = logging.getLogger("regatta.gateway")


def bootstrap(store: EventStore, settings: Settings) -> Scope | None:
    """Idempotent: event ids derive from the token hash, so every restart appends nothing new."""
    if not settings.bootstrap_token:
        return None
    token_hash = hash_token(settings.bootstrap_token)
    seed = token_hash[:16]
    workspace_id = f"ws_{seed}"
    user_id = f"usr_{seed}"
    token_id = f"tok_{seed}"
    events = [
        new_event(
            WorkspaceCreated(workspace_id=workspace_id, name=settings.bootstrap_workspace),
            event_id=deterministic_id(seed, "workspace"),
            actor="system",
        ),
        new_event(
            UserRegistered(user_id=user_id, email="admin@localhost", name="admin"),
            event_id=deterministic_id(seed, "user"),
            actor="system",
        ),
        new_event(
            MemberAdded(workspace_id=workspace_id, user_id=user_id, role="admin"),
            event_id=deterministic_id(seed, "member"),
            actor="system",
        ),
        new_event(
            ApiTokenCreated(token_id=token_id, user_id=user_id, token_hash=token_hash, name="bootstrap"),
            event_id=deterministic_id(seed, "token"),
            actor="system",
        ),
        # The bootstrap admin is the first platform administrator (it grants others: identity.py).
        new_event(
            PlatformAdminGranted(user_id=user_id),
            event_id=deterministic_id(seed, "platform-admin"),
            actor="system",
        ),
    ]
    store.append(workspace_stream(workspace_id), events)
    principal = Principal(user_id, "admin", "admin@localhost", token_id, None, platform_admin=True)
    return Scope(principal, workspace_id, settings.bootstrap_workspace, "admin")


def add_hosted_benchmarks(store: EventStore, settings: Settings, scope: Scope) -> None:
    """Hosted benchmarks come from the deployment's configuration and cannot be removed."""
    if not settings.hosted_benchmarks:
        return
    declared = json.loads(settings.hosted_benchmarks)
    with store.read_engine.connect() as conn:
        existing = {
            (row.source_type, row.source_ref)
            for row in conn.execute(
                select(t.benchmarks.c.source_type, t.benchmarks.c.source_ref).where(
                    t.benchmarks.c.workspace_id == scope.workspace_id, t.benchmarks.c.hosted.is_(True)
                )
            )
        }
    for body in declared:
        source = parse_source(body)
        if (source.type, source.ref) in existing:
            continue
        add_benchmark(store, scope, body, SourcePolicy.from_settings(settings), hosted=True)
        log.info("hosted benchmark %s added", source.ref)
