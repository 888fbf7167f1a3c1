"""The append-only event store over SQLAlchemy Core (Postgres in production, SQLite embedded).

Guarantees (architecture.md, invariants 1 and 2):
- appends are atomic per call and optimistic per stream (`UNIQUE(stream_id, version)`);
- an append whose event ids are already stored is a no-op, so a retried command never appends twice;
- global position order equals commit order: on Postgres every append holds one transaction-scoped
  advisory lock, so a position is only assigned once every earlier append has committed; SQLite has a
  single writer (`BEGIN IMMEDIATE`). A reader by position therefore never skips a slower transaction.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from datetime import UTC
from typing import Any

from sqlalchemy import Connection, Engine, create_engine, event, func, insert, select, text
from sqlalchemy.exc import IntegrityError

from regatta_shared.clock import utcnow

from .records import NewEvent, StoredEvent
from .schema import checkpoints, events, metadata

ANY = -1
_APPEND_LOCK = 0x52454741  # one advisory lock key for every append: serialises position assignment


class WrongExpectedVersion(Exception):
    def __init__(self, stream_id: str, expected: int, actual: int) -> None:
        super().__init__(f"stream {stream_id}: expected version {expected}, found {actual}")
        self.stream_id = stream_id
        self.expected = expected
        self.actual = actual


def _sqlite_engine(url: str, *, immediate: bool) -> Engine:
    engine = create_engine(url, connect_args={"timeout": 60, "check_same_thread": False}, pool_size=10)

    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_connection: Any, _record: Any) -> None:
        # Let SQLAlchemy's BEGIN below decide the transaction mode instead of the driver.
        dbapi_connection.isolation_level = None
        cursor = dbapi_connection.cursor()
        cursor.execute("PRAGMA journal_mode=WAL")
        cursor.execute("PRAGMA synchronous=NORMAL")
        cursor.execute("PRAGMA busy_timeout=60000")
        cursor.close()

    @event.listens_for(engine, "begin")
    def _on_begin(conn: Connection) -> None:
        conn.exec_driver_sql("BEGIN IMMEDIATE" if immediate else "BEGIN")

    return engine


class EventStore:
    def __init__(self, url: str) -> None:
        self.url = url
        self.is_sqlite = url.startswith("sqlite")
        if self.is_sqlite:
            self.engine = _sqlite_engine(url, immediate=True)
            self.read_engine = _sqlite_engine(url, immediate=False)
        else:
            self.engine = create_engine(url, pool_size=10, max_overflow=20, pool_pre_ping=True)
            self.read_engine = self.engine

    def create_schema(self) -> None:
        with self.engine.begin() as conn:
            metadata.create_all(conn)

    def dispose(self) -> None:
        self.engine.dispose()
        if self.read_engine is not self.engine:
            self.read_engine.dispose()

    @contextmanager
    def transaction(self) -> Iterator[Connection]:
        """A write transaction; projections commit their effects and checkpoint through it."""
        with self.engine.begin() as conn:
            yield conn

    # --- writing ------------------------------------------------------------------------------

    def append(
        self, stream_id: str, new_events: Sequence[NewEvent], expected_version: int = ANY
    ) -> list[StoredEvent]:
        """Append to one stream; returns the stored events, or [] when they were already stored."""
        if not new_events:
            return []
        try:
            with self.engine.begin() as conn:
                return self._append(conn, stream_id, new_events, expected_version)
        except IntegrityError as error:
            # Only reachable if a writer bypassed the lock; report it as the conflict it is.
            actual = self.stream_version(stream_id)
            raise WrongExpectedVersion(stream_id, expected_version, actual) from error

    def _append(
        self, conn: Connection, stream_id: str, new_events: Sequence[NewEvent], expected_version: int
    ) -> list[StoredEvent]:
        if not self.is_sqlite:
            conn.execute(text("SELECT pg_advisory_xact_lock(:key)"), {"key": _APPEND_LOCK})
        ids = [e.event_id for e in new_events]
        if conn.execute(select(events.c.event_id).where(events.c.event_id.in_(ids)).limit(1)).first():
            return []
        current = conn.execute(
            select(func.coalesce(func.max(events.c.version), 0)).where(events.c.stream_id == stream_id)
        ).scalar_one()
        if expected_version != ANY and expected_version != current:
            raise WrongExpectedVersion(stream_id, expected_version, current)
        recorded_at = utcnow()
        rows = [
            {
                "event_id": e.event_id,
                "stream_id": stream_id,
                "version": current + i,
                "type": e.type,
                "data": e.data,
                "metadata": e.metadata,
                "recorded_at": recorded_at,
            }
            for i, e in enumerate(new_events, start=1)
        ]
        result = conn.execute(insert(events).returning(events.c.position, events.c.event_id), rows)
        positions = {event_id: position for position, event_id in result.all()}
        return [
            StoredEvent(position=positions[r["event_id"]], **r)  # type: ignore[arg-type]
            for r in rows
        ]

    # --- reading ------------------------------------------------------------------------------

    def stream_version(self, stream_id: str) -> int:
        with self.read_engine.connect() as conn:
            return conn.execute(
                select(func.coalesce(func.max(events.c.version), 0)).where(events.c.stream_id == stream_id)
            ).scalar_one()

    def read_stream(self, stream_id: str, after_version: int = 0) -> list[StoredEvent]:
        query = (
            select(events)
            .where(events.c.stream_id == stream_id, events.c.version > after_version)
            .order_by(events.c.version)
        )
        with self.read_engine.connect() as conn:
            return [_to_stored(row) for row in conn.execute(query).mappings()]

    def read_all(
        self, after_position: int = 0, limit: int = 1000, types: Sequence[str] | None = None
    ) -> list[StoredEvent]:
        query = select(events).where(events.c.position > after_position)
        if types:
            query = query.where(events.c.type.in_(list(types)))
        query = query.order_by(events.c.position).limit(limit)
        with self.read_engine.connect() as conn:
            return [_to_stored(row) for row in conn.execute(query).mappings()]

    def last_position(self) -> int:
        with self.read_engine.connect() as conn:
            return conn.execute(select(func.coalesce(func.max(events.c.position), 0))).scalar_one()

    # --- checkpoints --------------------------------------------------------------------------

    def checkpoint(self, name: str, conn: Connection | None = None) -> int:
        query = select(checkpoints.c.position).where(checkpoints.c.name == name)
        if conn is not None:
            return conn.execute(query).scalar_one_or_none() or 0
        with self.read_engine.connect() as own:
            return own.execute(query).scalar_one_or_none() or 0

    @staticmethod
    def save_checkpoint(conn: Connection, name: str, position: int) -> None:
        updated = conn.execute(
            checkpoints.update().where(checkpoints.c.name == name).values(position=position)
        ).rowcount
        if not updated:
            conn.execute(insert(checkpoints).values(name=name, position=position))


def _to_stored(row: Any) -> StoredEvent:
    recorded_at = row["recorded_at"]
    if recorded_at.tzinfo is None:
        recorded_at = recorded_at.replace(tzinfo=UTC)
    return StoredEvent(
        position=row["position"],
        event_id=row["event_id"],
        stream_id=row["stream_id"],
        version=row["version"],
        type=row["type"],
        data=row["data"],
        metadata=row["metadata"],
        recorded_at=recorded_at,
    )
