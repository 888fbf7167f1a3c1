"""Workspace commands: create, rename, delete; remove a member, change a member's role.

Each folds the workspace's stream (workspaces/aggregate.py), decides, and appends with the version it
folded as the expected version (workspaces/appends.execute, the one way any command appends to a
workspace's stream).

Names are unique across workspaces, a fact no single stream holds: create and rename decide it under the
event store's append lock, from the naming events of the log itself (the read models may lag behind
it), in the transaction that appends.
"""

from __future__ import annotations

from typing import Any

from regatta_shared.events import WorkspaceCreated, WorkspaceDeleted, WorkspaceRenamed
from regatta_shared.events.envelope import new_event
from regatta_shared.eventstore import EventStore
from regatta_shared.eventstore.appends import loads
from regatta_shared.eventstore.schema import events
from regatta_shared.ids import new_id, workspace_stream
from regatta_shared.runs.status import ACTIVE
from regatta_shared.settings import Settings
from sqlalchemy import Connection, func, select

from regatta_gateway.admission.default_registry import DefaultRegistry
from regatta_gateway.commands.hosted import add_hosted_benchmarks
from regatta_gateway.commands.runs import stop_run
from regatta_gateway.errors import Forbidden, Refused
from regatta_gateway.principals import Scope
from regatta_gateway.readmodels import tables as t
from regatta_gateway.workspaces import aggregate as ws
from regatta_gateway.workspaces.appends import execute


def _names(conn: Connection) -> dict[str, str]:
    """Every live workspace's name, from the log (indexed by type), read under the append lock."""
    types = (WorkspaceCreated.type_name, WorkspaceRenamed.type_name, WorkspaceDeleted.type_name)
    rows = conn.execute(
        select(events.c.type, events.c.data).where(events.c.type.in_(types)).order_by(events.c.position)
    ).all()
    return ws.workspace_names(
        (kind, loads(raw) if isinstance(raw, str | bytes) else raw) for kind, raw in rows
    )


# --- commands -------------------------------------------------------------------------------------


def create_workspace(
    store: EventStore,
    settings: Settings,
    scope: Scope,
    body: dict[str, Any],
    default_registry: DefaultRegistry | None = None,
) -> dict[str, Any]:
    """A new workspace whose only member is its creator (admin), with the hosted benchmarks. Nobody's
    default workspace changes: that is the first one each user was given."""
    if not scope.is_admin:
        raise Forbidden("Only workspace admins can create workspaces", code="FORBIDDEN")
    name = ws.clean_name(body.get("name"))
    workspace_id = new_id("ws")
    actor = scope.principal.user_id
    with store.transaction() as conn:
        store.lock_appends(conn)
        decided = ws.decide_create(workspace_id, name, _names(conn), actor)
        recorded = [new_event(event, actor=actor, workspace_id=workspace_id) for event in decided]
        store.append_within(conn, workspace_stream(workspace_id), recorded, 0)
    add_hosted_benchmarks(store, settings, [(workspace_id, name)], scope.principal, default_registry)
    return {"id": workspace_id, "name": name, "role": "admin"}


def rename_workspace(store: EventStore, scope: Scope, body: dict[str, Any]) -> dict[str, Any]:
    name = ws.clean_name(body.get("name"))
    actor = scope.principal.user_id
    with store.transaction() as conn:
        store.lock_appends(conn)
        names = _names(conn)
        execute(
            store, scope.workspace_id, actor, lambda s: ws.decide_rename(s, actor, name, names), conn=conn
        )
    return {"id": scope.workspace_id, "name": name, "role": scope.role}


def delete_workspace(store: EventStore, scope: Scope, confirm: str | None) -> dict[str, Any]:
    """Deleted for every member; runs still active are asked to stop (their results stay in the log)."""
    with store.read_engine.connect() as conn:
        runs = conn.execute(
            select(t.runs.c.id, t.runs.c.status).where(t.runs.c.workspace_id == scope.workspace_id)
        ).all()
    actor = scope.principal.user_id
    execute(store, scope.workspace_id, actor, lambda s: ws.decide_delete(s, actor, confirm, len(runs)))
    stopped = 0
    for run_id, status in runs:
        if status in ACTIVE:
            try:
                stop_run(store, scope, run_id, reason="workspace deleted")
                stopped += 1
            except Refused:  # it ended meanwhile
                pass
    return {"id": scope.workspace_id, "name": scope.workspace_name, "deleted": True, "stopped_runs": stopped}


def remove_member(store: EventStore, scope: Scope, user_id: str) -> None:
    actor = scope.principal.user_id
    execute(store, scope.workspace_id, actor, lambda s: ws.decide_remove_member(s, actor, user_id))


def change_role(store: EventStore, scope: Scope, user_id: str, body: dict[str, Any]) -> dict[str, Any]:
    role = ws.clean_role(body.get("role"))
    actor = scope.principal.user_id
    execute(store, scope.workspace_id, actor, lambda s: ws.decide_change_role(s, actor, user_id, role))
    return {"workspace_id": scope.workspace_id, "user_id": user_id, "role": role}


def run_count(store: EventStore, workspace_id: str) -> int:
    with store.read_engine.connect() as conn:
        return conn.execute(
            select(func.count()).select_from(t.runs).where(t.runs.c.workspace_id == workspace_id)
        ).scalar_one()
