"""Per-run data keys of run-supplied secrets: the one place they live, so deleting a row shreds a run's
secrets (invariant 6; see regatta_shared.security.sealing).

Not the event log and not a read model: the gateway inserts a row in the transaction that appends the
run's `RunSubmitted`, the run-scheduler reads it to build jobs and deletes it when the run ends. A
projection rebuild never touches it. Rows hold the key wrapped under the sealing subkey, never raw.
"""

from __future__ import annotations

from sqlalchemy import Column, Connection, MetaData, String, Table, Text, delete, insert, select

from regatta_shared.clock import isoformat, utcnow
from regatta_shared.eventstore import EventStore

metadata = MetaData()
run_keys = Table(
    "run_keys",
    metadata,
    Column("run_id", String(64), primary_key=True),
    Column("wrapped_key", Text, nullable=False),
    Column("created_at", String(40), nullable=False),
)


def create_table(store: EventStore) -> None:
    store.create_tables(metadata)


def save(conn: Connection, run_id: str, wrapped_key: str) -> None:
    """Inside the caller's transaction, so the key exists exactly when the run's submission does."""
    conn.execute(
        insert(run_keys).values(run_id=run_id, wrapped_key=wrapped_key, created_at=isoformat(utcnow()) or "")
    )


def wrapped_key(store: EventStore, run_id: str) -> str | None:
    with store.read_engine.connect() as conn:
        return conn.execute(
            select(run_keys.c.wrapped_key).where(run_keys.c.run_id == run_id)
        ).scalar_one_or_none()


def purge(store: EventStore, run_id: str) -> bool:
    """Delete the run's key; True if a row went. Idempotent, so a redelivered end event is harmless."""
    with store.transaction() as conn:
        return conn.execute(delete(run_keys).where(run_keys.c.run_id == run_id)).rowcount > 0


def run_ids(store: EventStore) -> list[str]:
    with store.read_engine.connect() as conn:
        return list(conn.execute(select(run_keys.c.run_id).order_by(run_keys.c.run_id)).scalars())
