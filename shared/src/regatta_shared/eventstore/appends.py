"""How an append is written on each backend, and the JSON codec of payloads (store.py uses both)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import datetime
from typing import Any

import orjson
from sqlalchemy import Connection

from regatta_shared.clock import utcnow
from regatta_shared.events.envelope import NewEvent, StoredEvent

ANY = -1  # expected_version: append whatever the stream's version


class WrongExpectedVersion(Exception):
    def __init__(self, stream_id: str, expected: int, actual: int) -> None:
        super().__init__(f"stream {stream_id}: expected version {expected}, found {actual}")
        self.stream_id = stream_id
        self.expected = expected
        self.actual = actual


# --- the append statements ------------------------------------------------------------------------
# One INSERT does the whole append: insert-or-ignore by event id (events already stored are skipped,
# the others stored, their versions counted on from the stream's current one without gaps), and the
# optimistic version check. Skipping per event, not per batch: a batch that mixes a redelivered
# report's already-stored event with new ones (the run-scheduler decides a whole batch of reports at
# once) must still store the new ones; skipping the whole batch lost them while their reports were
# acknowledged. The rows travel as ONE JSON document (ids also as an array, for the index lookup), so
# the statement has 6 parameters whatever the batch size and psycopg caches it instead of parsing a
# VALUES list of 7 x N placeholders again for every batch (that parse dominated a 500-event append); a
# text[] of payloads cost psycopg a Python-level escape of every character (a sixth of a 2,000-task
# submission's CPU). One round trip. The ids already stored are found first through the unique index
# (`= ANY`): a per-row NOT EXISTS let the planner hash-join the whole table, a sixth of the rate.
# Window functions run after WHERE, so row_number() numbers only the new rows.
_PG_APPEND = """WITH known AS (SELECT event_id FROM events WHERE event_id = ANY(%(ids)s::text[]))
INSERT INTO events (event_id, stream_id, version, type, data, metadata, recorded_at)
SELECT e.event_id, %(stream)s::text, s.current + row_number() OVER (ORDER BY e.n), e.type, e.data,
       e.metadata, %(at)s
FROM (SELECT coalesce(max(version), 0) AS current FROM events WHERE stream_id = %(stream)s::text) AS s,
     ROWS FROM (jsonb_to_recordset(%(rows)s::jsonb) AS (event_id text, type text, data jsonb, metadata jsonb))
         WITH ORDINALITY AS e(event_id, type, data, metadata, n)
WHERE e.event_id NOT IN (SELECT event_id FROM known)
  AND (%(expected)s::int = -1 OR s.current = %(expected)s::int)
ORDER BY e.n
RETURNING position, event_id, version"""

_PG_STATE = """SELECT (SELECT count(*) FROM events WHERE event_id = ANY(%(ids)s::text[])),
       (SELECT coalesce(max(version), 0) FROM events WHERE stream_id = %(stream)s::text)"""

# SQLite: the ids travel as one JSON array (no limit on host parameters); the last position comes along
# because this connection holds the only write lock (BEGIN IMMEDIATE), so new positions continue it.
_SQLITE_KNOWN = "SELECT event_id FROM events WHERE event_id IN (SELECT value FROM json_each(?))"
_SQLITE_STATE = """SELECT (SELECT coalesce(max(version), 0) FROM events WHERE stream_id = ?),
       (SELECT coalesce(max(position), 0) FROM events)"""

_SQLITE_APPEND = (
    "INSERT INTO events (position, event_id, stream_id, version, type, data, metadata, recorded_at) "
    "VALUES (?, ?, ?, ?, ?, ?, ?, ?)"
)
_SQLITE_DATETIME = "%Y-%m-%d %H:%M:%S.%f"  # how SQLAlchemy's DateTime stores (and parses) on SQLite


def append_postgres(
    conn: Connection, stream_id: str, new_events: Sequence[NewEvent], expected_version: int
) -> list[StoredEvent]:
    recorded_at = utcnow()
    ids = [e.event_id for e in new_events]
    rows_json = dumps(
        [{"event_id": e.event_id, "type": e.type, "data": e.data, "metadata": e.metadata} for e in new_events]
    )
    params = {
        "stream": stream_id,
        "at": recorded_at,
        "ids": ids,
        "rows": rows_json,
        "expected": expected_version,
    }
    rows = conn.exec_driver_sql(_PG_APPEND, params).all()
    if not rows:
        # Nothing inserted: a retried append (every event known: a no-op) or a version conflict. The
        # lock is still held, so this second look sees what the INSERT saw.
        known, current = conn.exec_driver_sql(_PG_STATE, {"ids": ids, "stream": stream_id}).one()
        if known == len(set(ids)):
            return []
        raise WrongExpectedVersion(stream_id, expected_version, current)
    stored = {event_id: (position, version) for position, event_id, version in rows}
    return [
        _stored(e, stream_id, *stored[e.event_id], recorded_at) for e in new_events if e.event_id in stored
    ]


def append_sqlite(
    conn: Connection, stream_id: str, new_events: Sequence[NewEvent], expected_version: int
) -> list[StoredEvent]:
    ids = json.dumps([e.event_id for e in new_events])
    known = {row[0] for row in conn.exec_driver_sql(_SQLITE_KNOWN, (ids,))}
    new_events = [e for e in new_events if e.event_id not in known]
    if not new_events:
        return []
    current, last = conn.exec_driver_sql(_SQLITE_STATE, (stream_id,)).one()
    if expected_version != ANY and expected_version != current:
        raise WrongExpectedVersion(stream_id, expected_version, current)
    recorded_at = utcnow()
    at = recorded_at.strftime(_SQLITE_DATETIME)
    rows = [
        (last + i, e.event_id, stream_id, current + i, e.type, dumps(e.data), dumps(e.metadata), at)
        for i, e in enumerate(new_events, start=1)
    ]
    conn.exec_driver_sql(_SQLITE_APPEND, rows)
    return [
        _stored(e, stream_id, last + i, current + i, recorded_at) for i, e in enumerate(new_events, start=1)
    ]


def loads(text: str | bytes) -> Any:
    """orjson, several times faster than json; json for what orjson refuses but older rows may hold
    (the json module wrote NaN as a bare token)."""
    try:
        return orjson.loads(text)
    except orjson.JSONDecodeError:
        return json.loads(text)


def dumps(value: Any) -> str:
    """orjson, several times faster than json on event payloads; json for what orjson refuses (an
    integer beyond 64 bits), so nothing the json module stored before is refused now."""
    try:
        return orjson.dumps(value, option=orjson.OPT_NON_STR_KEYS).decode()
    except orjson.JSONEncodeError:
        return json.dumps(value)


def _stored(e: NewEvent, stream_id: str, position: int, version: int, recorded_at: datetime) -> StoredEvent:
    return StoredEvent(
        position=position,
        event_id=e.event_id,
        stream_id=stream_id,
        version=version,
        type=e.type,
        data=e.data,
        metadata=e.metadata,
        recorded_at=recorded_at,
    )
