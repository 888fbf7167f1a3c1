"""The gateway's projection: folds every event into the read-model tables. This module holds the
ReadModels class and the registry of handlers, which live by subject in identity_handlers.py,
benchmark_handlers.py, run_handlers.py and annotation_handlers.py; attempt events, scores and log lines
are folded in batch.py.

Deterministic (invariant 7): timestamps come from the events' recorded_at, never from the clock.
Idempotent per event because the runner applies each position once, in order, with its checkpoint.
"""

from __future__ import annotations

from collections.abc import Sequence

from regatta_shared.eventstore import StoredEvent
from sqlalchemy import Connection, insert

from regatta_gateway.readmodels import (
    annotation_handlers,
    benchmark_handlers,
    identity_handlers,
    run_handlers,
)
from regatta_gateway.readmodels import tables as t
from regatta_gateway.readmodels.batch import apply_batch
from regatta_gateway.readmodels.handling import Handler, user_name
from regatta_gateway.readmodels.logs import log_entry

# Which handler folds each event type: identity and workspaces, benchmarks, a run's lifecycle.
HANDLERS: dict[str, Handler] = {
    **identity_handlers.HANDLERS,
    **benchmark_handlers.HANDLERS,
    **run_handlers.HANDLERS,
    **annotation_handlers.HANDLERS,
}


class ReadModels:
    name = "gateway"
    metadata = t.metadata

    def apply(self, conn: Connection, event: StoredEvent) -> None:
        """One event: a batch of one, so every event goes through the same fold however it arrives."""
        self.apply_batch(conn, [event])

    def apply_batch(self, conn: Connection, events: Sequence[StoredEvent]) -> None:
        """Events in order: attempt events, scores and log lines folded in bulk (batch.py), every other
        event through its handler here."""
        apply_batch(conn, events, _apply_handled, HANDLERS)


def _apply_handled(conn: Connection, event: StoredEvent) -> None:
    HANDLERS[event.type](conn, event, event.data)
    if event.stream_id.startswith("run-"):
        entry = log_entry(event, user_name(conn, event.actor))
        if entry is not None:
            conn.execute(insert(t.run_logs).values(**entry))
