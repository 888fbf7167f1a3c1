"""The one way a command appends to a workspace's stream: fold it (aggregate.py), decide, and append
at the version folded, so that of two requests deciding on the same state only one is recorded as
decided. The workspace, identity, budget, webhook and secret commands all append through `execute`.
"""

from __future__ import annotations

from collections.abc import Callable

from regatta_shared.events import Event
from regatta_shared.events.envelope import new_event
from regatta_shared.eventstore import EventStore, StoredEvent, WrongExpectedVersion
from regatta_shared.ids import workspace_stream
from sqlalchemy import Connection

from regatta_gateway.errors import Conflict, Refused
from regatta_gateway.workspaces import aggregate as ws

Decide = Callable[[ws.WorkspaceState], list[Event]]
# Appends to a workspace's stream that change nothing a decision reads (a token, a budget, a webhook)
# only move its version: the decision is made again on the new state, a few times at most.
RETRIES = 5


def load(store: EventStore, workspace_id: str) -> ws.WorkspaceState:
    return ws.fold(workspace_id, store.read_stream(workspace_stream(workspace_id)))


def _concurrent(what: str) -> Refused:
    return Conflict(
        f"{what}: changed by another request while this one was decided; reload and try again",
        code="CONCURRENT_CHANGE",
    )


def execute(
    store: EventStore,
    workspace_id: str,
    actor: str,
    decide: Decide,
    *,
    reads: ws.Reads = ws.membership,
    state: ws.WorkspaceState | None = None,
    conn: Connection | None = None,
) -> list[StoredEvent]:
    """Decide on `state` (by default the stream as it is now) and append at its version. If the stream
    moved meanwhile and what the decision `reads` changed, the request conflicts with another one: 409
    naming it, nothing appended. `conn`: append inside the caller's transaction."""
    state = state or load(store, workspace_id)
    for _ in range(RETRIES):
        decided = decide(state)
        if not decided:
            return []
        recorded = [
            new_event(event, event_id=ws.event_id(event), actor=actor, workspace_id=workspace_id)
            for event in decided
        ]
        try:
            if conn is not None:
                return store.append_within(conn, workspace_stream(workspace_id), recorded, state.version)
            return store.append(workspace_stream(workspace_id), recorded, state.version)
        except WrongExpectedVersion:
            fresh = load(store, workspace_id)
            if reads(fresh) != reads(state):
                raise _concurrent(reads(state)[0]) from None
            state = fresh
    raise _concurrent(reads(state)[0])
