"""The append-only event store over SQLAlchemy Core (Postgres in production, SQLite embedded).

Guarantees (architecture.md, invariants 1 and 2):
- appends are atomic per call and optimistic per stream (`UNIQUE(stream_id, version)`);
- appends are insert-or-ignore by event id: events already stored are skipped, the others stored, so a
  retried command never appends twice and a batch mixing old and new events loses none of the new;
- global position order equals commit order: on Postgres every append holds one transaction-scoped
  advisory lock, so a position is only assigned once every earlier append has committed; SQLite has a
  single writer (`BEGIN IMMEDIATE`). A reader by position therefore never skips a slower transaction.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import (
    Connection,
    Engine,
    MetaData,
    bindparam,
    create_engine,
    event,
    exc,
    func,
    insert,
    select,
    text,
)
from sqlalchemy.exc import IntegrityError

from regatta_shared.events.codec import current_shape
from regatta_shared.events.envelope import NewEvent, StoredEvent

from .appends import ANY, WrongExpectedVersion, append_postgres, append_sqlite, loads
from .limits import check_sizes
from .schema import checkpoints, events, metadata, relay_set_aside

_DDL_LOCK = 0x52454744
APPENDED = "regatta.appended"
_TRUSTED_IDLE_SEC = 2.0
_APPEND_LOCK = 0x52454741  # one advisory lock key for every append: serialises position assignment


_READ = "SELECT position, event_id, stream_id, version, type, data, metadata, recorded_at FROM events"
_READ_STREAM = text(f"{_READ} WHERE stream_id = :stream AND version > :after ORDER BY version")
# Statements built once: every projection batch and relay round reads and saves a checkpoint, and
# building the expression (and its cache key) each time was a tenth of a projection's CPU.
_CHECKPOINT = select(checkpoints.c.position).where(checkpoints.c.name == bindparam("name"))
_SAVE_CHECKPOINT = (
    checkpoints.update()
    .where(checkpoints.c.name == bindparam("p_name"))
    .values(position=bindparam("p_position"))
)
_READ_ALL = text(f"{_READ} WHERE position > :after ORDER BY position LIMIT :limit")
_READ_ALL_OF_TYPES = text(
    f"{_READ} WHERE position > :after AND type IN :types ORDER BY position LIMIT :limit"
).bindparams(bindparam("types", expanding=True))


def _sqlite_engine(url: str, *, immediate: bool) -> Engine:
    engine = create_engine(
        url,
        connect_args={"timeout": 60, "check_same_thread": False},
        pool_size=10,
        json_deserializer=loads,
    )

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


def _postgres_engine(url: str) -> Engine:
    # orjson decodes event payloads and JSON columns: decoding weighs on every projection rebuild and
    # on every event a consumer reads (figures in docs/performance.md).
    engine = create_engine(url, pool_size=10, max_overflow=20, json_deserializer=loads)

    # Pessimistic disconnect handling, but only for connections that sat idle: a ping on every
    # checkout (pool_pre_ping) was a third of the gateway's database time under load, while a
    # connection used a moment ago is as alive as a ping would show. After a Postgres restart every
    # idle connection fails its ping and the pool replaces it (DisconnectionError makes it retry).
    @event.listens_for(engine, "checkin")
    def _on_checkin(_dbapi_connection: Any, record: Any) -> None:
        record.info["idle_since"] = time.monotonic()

    @event.listens_for(engine, "checkout")
    def _on_checkout(dbapi_connection: Any, record: Any, _proxy: Any) -> None:
        if time.monotonic() - record.info.get("idle_since", 0.0) < _TRUSTED_IDLE_SEC:
            return
        try:
            with dbapi_connection.cursor() as cursor:
                cursor.execute("SELECT 1")
            dbapi_connection.rollback()  # the ping's implicit transaction would pin the isolation level
        except Exception as error:
            raise exc.DisconnectionError(str(error)) from error

    return engine


class EventStore:
    def __init__(self, url: str) -> None:
        self.url = url
        # Set by a writer that knows the bus's max_payload (the gateway): larger events are refused.
        self.max_event_bytes: int | None = None
        self.is_sqlite = url.startswith("sqlite")
        if self.is_sqlite:
            self.engine = _sqlite_engine(url, immediate=True)
            self.read_engine = _sqlite_engine(url, immediate=False)
        else:
            self.engine = _postgres_engine(url)
            # Reads need no transaction: READ COMMITTED gives every statement its own snapshot anyway,
            # so autocommit changes nothing a read sees and saves the BEGIN and ROLLBACK round trips
            # of each checkout (two of the four an API query cost). The pool is the writers' one.
            self.read_engine = self.engine.execution_options(isolation_level="AUTOCOMMIT")

    def create_schema(self) -> None:
        self.create_tables(metadata)

    def create_tables(self, tables: MetaData) -> None:
        """CREATE IF NOT EXISTS under a lock: every service creates the schema at start, often at once."""
        with self.engine.begin() as conn:
            if not self.is_sqlite:
                conn.execute(text("SELECT pg_advisory_xact_lock(:key)"), {"key": _DDL_LOCK})
            tables.create_all(conn)
            # create_all skips a table that exists, and with it an index added to it since: a read
            # model's index added for performance must reach existing databases too.
            for table in tables.sorted_tables:
                for index in table.indexes:
                    index.create(conn, checkfirst=True)

    def dispose(self) -> None:
        self.engine.dispose()
        if self.is_sqlite:  # its own engine; on Postgres a view of the same pool
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
        """Append to one stream; returns the events stored now (those already stored are skipped)."""
        if not new_events:
            return []
        try:
            with self.engine.begin() as conn:
                return self._append(conn, stream_id, new_events, expected_version)
        except IntegrityError as error:
            # Only reachable if a writer bypassed the lock; report it as the conflict it is.
            actual = self.stream_version(stream_id)
            raise WrongExpectedVersion(stream_id, expected_version, actual) from error

    def lock_appends(self, conn: Connection) -> None:
        """Hold the append lock for the rest of the caller's write transaction, so a check the caller
        makes before appending (is this already recorded?) cannot race another writer. SQLite's write
        transactions are serialised already (BEGIN IMMEDIATE)."""
        if not self.is_sqlite:
            conn.exec_driver_sql("SELECT pg_advisory_xact_lock(%(key)s)", {"key": _APPEND_LOCK})

    def append_within(
        self, conn: Connection, stream_id: str, new_events: Sequence[NewEvent], expected_version: int = ANY
    ) -> list[StoredEvent]:
        """Append inside the caller's write transaction (`transaction()`), so a side table the caller
        writes in it (e.g. the gateway's encrypted secret values) commits or rolls back with the events."""
        if not new_events:
            return []
        return self._append(conn, stream_id, new_events, expected_version)

    def _append(
        self, conn: Connection, stream_id: str, new_events: Sequence[NewEvent], expected_version: int
    ) -> list[StoredEvent]:
        if self.max_event_bytes is not None:
            check_sizes(new_events, self.max_event_bytes)
        # Read at commit by listeners that care only about transactions that stored events (nudge.py).
        conn.info[APPENDED] = True
        if self.is_sqlite:
            return append_sqlite(conn, stream_id, new_events, expected_version)
        # Its own statement, before the INSERT: READ COMMITTED takes a snapshot per statement, so the
        # INSERT's checks then see every append that committed before this one got the lock.
        conn.exec_driver_sql("SELECT pg_advisory_xact_lock(%(key)s)", {"key": _APPEND_LOCK})
        return append_postgres(conn, stream_id, new_events, expected_version)

    # --- reading ------------------------------------------------------------------------------

    def stream_version(self, stream_id: str) -> int:
        with self.read_engine.connect() as conn:
            return conn.execute(
                select(func.coalesce(func.max(events.c.version), 0)).where(events.c.stream_id == stream_id)
            ).scalar_one()

    def read_stream(self, stream_id: str, after_version: int = 0) -> list[StoredEvent]:
        with self.read_engine.connect() as conn:
            rows = conn.execute(_READ_STREAM, {"stream": stream_id, "after": after_version}).all()
            return self._stored_rows(rows)

    def read_all(
        self, after_position: int = 0, limit: int = 1000, types: Sequence[str] | None = None
    ) -> list[StoredEvent]:
        params: dict[str, Any] = {"after": after_position, "limit": limit}
        if types:
            params["types"] = list(types)
        with self.read_engine.connect() as conn:
            rows = conn.execute(_READ_ALL_OF_TYPES if types else _READ_ALL, params).all()
            return self._stored_rows(rows)

    def _stored_rows(self, rows: Iterable[Any]) -> list[StoredEvent]:
        """Rows of `_READ` (fetched with one fetchall) as StoredEvents. Untyped text() rows skip
        SQLAlchemy's per-value result processing (a third of a projection rebuild went there): Postgres
        already hands back dicts and aware datetimes; SQLite gives the JSON text and SQLAlchemy's
        datetime text, decoded here. Payloads come out in their type's current shape (codec.py)."""
        if self.is_sqlite:
            parse = datetime.fromisoformat
            return [
                current_shape(StoredEvent(p, i, s, v, t, loads(d), loads(m), parse(r).replace(tzinfo=UTC)))
                for p, i, s, v, t, d, m, r in rows
            ]
        return [
            current_shape(StoredEvent(p, i, s, v, t, d, m, r if r.tzinfo else r.replace(tzinfo=UTC)))
            for p, i, s, v, t, d, m, r in rows
        ]

    def last_position(self) -> int:
        with self.read_engine.connect() as conn:
            return conn.execute(select(func.coalesce(func.max(events.c.position), 0))).scalar_one()

    # --- events the relay stepped past ---------------------------------------------------------

    def record_set_aside(self, aside: Sequence[tuple[StoredEvent, int]], reason: str) -> None:
        """Record (event, encoded size) pairs the relay could not publish; recording one twice (the
        relay restarted before its checkpoint moved past it) keeps the first record."""
        with self.engine.begin() as conn:
            known = set(
                conn.execute(
                    select(relay_set_aside.c.position).where(
                        relay_set_aside.c.position.in_([event.position for event, _ in aside])
                    )
                ).scalars()
            )
            rows = [
                {
                    "position": event.position,
                    "event_id": event.event_id,
                    "stream_id": event.stream_id,
                    "type": event.type,
                    "size": size,
                    "reason": reason[:500],
                    "set_aside_at": datetime.now(UTC),
                }
                for event, size in aside
                if event.position not in known
            ]
            if rows:
                conn.execute(insert(relay_set_aside), rows)

    def set_aside_events(self, limit: int = 100) -> list[dict[str, Any]]:
        """The latest events the relay set aside, newest first."""
        with self.read_engine.connect() as conn:
            rows = conn.execute(
                select(relay_set_aside).order_by(relay_set_aside.c.position.desc()).limit(limit)
            ).mappings()
            return [dict(row) for row in rows]

    # --- checkpoints --------------------------------------------------------------------------

    def checkpoint(self, name: str, conn: Connection | None = None) -> int:
        if conn is not None:
            return conn.execute(_CHECKPOINT, {"name": name}).scalar_one_or_none() or 0
        with self.read_engine.connect() as own:
            return own.execute(_CHECKPOINT, {"name": name}).scalar_one_or_none() or 0

    @staticmethod
    def save_checkpoint(conn: Connection, name: str, position: int) -> None:
        updated = conn.execute(_SAVE_CHECKPOINT, {"p_name": name, "p_position": position}).rowcount
        if not updated:
            conn.execute(insert(checkpoints).values(name=name, position=position))
