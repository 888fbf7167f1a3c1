"""The gateway projection's run events: attempt rows, run totals, scores and log lines, in bulk.

A run's log is almost all AttemptScheduled/Started/Retried/Finished, and one event at a time they cost
2–4 statements each (attempt row, run counters, log line). Here a run of such events (a segment) is
folded in memory over the rows it touches, read once up front, by the rules of regatta_shared.runs,
and written back with one statement per table and column set. Every other event ends the segment:
what was folded is written first, then the event goes through its handler (projection.py's registry), so it
sees exactly the tables it would have seen one event at a time. A single event is a segment of one,
so the result does not depend on batch boundaries (invariant 7); tests/integration/
test_projection_batching.py and bench/eventstore.py compare the two.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable, Sequence
from operator import itemgetter
from typing import Any

import orjson
from regatta_shared.clock import isoformat
from regatta_shared.events import AttemptFinished, AttemptScheduled, RunScored
from regatta_shared.eventstore import StoredEvent
from regatta_shared.runs import (
    ATTEMPT_EVENTS,
    RUN_TOTALS,
    attempt_change,
    keeps_scores,
    scheduled_row,
    with_finished,
)
from sqlalchemy import JSON, Connection, String, Table, bindparam, select, update
from sqlalchemy.dialects import postgresql

from regatta_gateway.readmodels import tables as t
from regatta_gateway.readmodels.logs import log_entry

# RunScored only sets a run's scores, which no attempt event reads: folding it keeps a busy run's
# segments whole (scoring publishes provisional scores every few seconds) and writes each run's last
# scores once per batch instead of every large provisional document.
BATCHED = ATTEMPT_EVENTS | {RunScored.type_name}
_IN_CHUNK = 500  # ids per IN (...) list: well inside SQLite's and Postgres's parameter limits

_UPDATE_RUN = (
    update(t.runs)
    .where(t.runs.c.id == bindparam("p_id"))
    .values({name: bindparam(f"p_{name}", type_=t.runs.c[name].type) for name in RUN_TOTALS})
)


def apply_batch(
    conn: Connection,
    events: Sequence[StoredEvent],
    apply_one: Callable[[Connection, StoredEvent], None],
    handled: Collection[str],
) -> None:
    """Apply `events` in order: segments of attempt events (and log-only events) folded and written in
    bulk; every other event type in `handled` through `apply_one`, after the segment before it."""
    segment: list[StoredEvent] = []
    for event in events:
        if event.type in BATCHED or event.type not in handled:
            segment.append(event)
            continue
        if segment:
            _Segment(conn, segment).write()
            segment = []
        apply_one(conn, event)
    if segment:
        _Segment(conn, segment).write()


def _at(event: StoredEvent) -> str:
    return isoformat(event.recorded_at) or ""  # as projection._at


class _Segment:
    def __init__(self, conn: Connection, events: list[StoredEvent]) -> None:
        self.conn = conn
        self.events = events
        self.inserts: list[dict[str, Any]] = []  # attempts scheduled in this segment, full rows
        self.inserted: set[str] = set()
        # Attempt id -> its row as far as the segment knows it: the full row of one scheduled here, else
        # the stored `outcome` and `started_at` (all the fold reads), with the segment's changes.
        self.rows: dict[str, dict[str, Any]] = {}
        self.changes: dict[str, dict[str, Any]] = {}  # stored attempts: column -> new value
        self.runs: dict[str, dict[str, Any]] = {}  # run id -> totals, as stored then folded
        self.touched_runs: set[str] = set()
        self.finals: dict[str, bool] = {}  # scored runs that exist -> scores_final as stored then folded
        self.scores: dict[str, dict[str, Any]] = {}  # run id -> the scores to write
        self.names: dict[str, str | None] = {}
        self.logs: list[dict[str, Any]] = []
        self._read()

    def _read(self) -> None:
        """Everything the segment's events read, in three queries rather than a few per event."""
        # An attempt scheduled in this segment has no stored row to read (a stored one would make the
        # INSERT fail anyway), and in a rebuild's large batches that is most of them.
        new = {e.data["attempt_id"] for e in self.events if e.type == AttemptScheduled.type_name}
        attempt_ids = {
            e.data["attempt_id"]
            for e in self.events
            if e.type in ATTEMPT_EVENTS - {AttemptScheduled.type_name}
        } - new
        for chunk in _chunks(attempt_ids):
            query = select(t.attempts.c.attempt_id, t.attempts.c.outcome, t.attempts.c.started_at).where(
                t.attempts.c.attempt_id.in_(chunk)
            )
            for aid, outcome, started_at in self.conn.execute(query):
                self.rows[aid] = {"outcome": outcome, "started_at": started_at}
        run_ids = {e.data["run_id"] for e in self.events if e.type == AttemptFinished.type_name}
        for chunk in _chunks(run_ids):
            columns = (t.runs.c[name] for name in RUN_TOTALS)
            query = select(t.runs.c.id, *columns).where(t.runs.c.id.in_(chunk))
            self.runs.update({row["id"]: dict(row) for row in self.conn.execute(query).mappings()})
        scored = {e.data["run_id"] for e in self.events if e.type == RunScored.type_name}
        for chunk in _chunks(scored):
            query = select(t.runs.c.id, t.runs.c.scores_final).where(t.runs.c.id.in_(chunk))
            self.finals.update({run_id: bool(final) for run_id, final in self.conn.execute(query)})
        actors = {e.actor for e in self.events if e.actor and e.stream_id.startswith("run-")}
        for chunk in _chunks(actors):
            query = select(t.users.c.id, t.users.c.name).where(t.users.c.id.in_(chunk))
            self.names.update({uid: name for uid, name in self.conn.execute(query)})

    def _user_name(self, user_id: str | None) -> str | None:
        # As handling.user_name: the user's name, else the id itself.
        if not user_id:
            return None
        return self.names.get(user_id, user_id)

    def write(self) -> None:
        for event in self.events:
            at = _at(event)
            if event.type in ATTEMPT_EVENTS:
                self.attempt(event.type, at, event.data)
            elif event.type == RunScored.type_name:
                self.scored(event.data)
            if event.stream_id.startswith("run-"):
                entry = log_entry(event, self._user_name(event.actor), at)
                if entry is not None:
                    self.logs.append(entry)
        conn = self.conn
        if self.inserts:
            _insert_rows(conn, t.attempts, self.inserts)
        by_columns: dict[tuple[str, ...], list[dict[str, Any]]] = {}
        for aid, change in self.changes.items():
            by_columns.setdefault(tuple(sorted(change)), []).append({"attempt_id": aid, **change})
        for rows in by_columns.values():
            _update_rows(conn, t.attempts, "attempt_id", rows)
        if self.touched_runs:
            conn.execute(
                _UPDATE_RUN,
                [
                    {"p_id": run_id, **{f"p_{k}": self.runs[run_id][k] for k in RUN_TOTALS}}
                    for run_id in sorted(self.touched_runs)
                ],
            )
        if self.scores:
            rows = [{"id": run_id, **values} for run_id, values in sorted(self.scores.items())]
            _update_rows(conn, t.runs, "id", rows)
        if self.logs:
            _insert_rows(conn, t.run_logs, self.logs)

    # --- the folds: the rules of regatta_shared.runs on the rows the segment touches -----------------

    def attempt(self, event_type: str, at: str, d: dict[str, Any]) -> None:
        aid = d["attempt_id"]
        if event_type == AttemptScheduled.type_name:
            row = scheduled_row(d, at)
            # A duplicate id stays in `inserts`, so the INSERT fails on the primary key as a stored
            # row's would: a scheduled attempt is never silently scheduled again.
            self.inserts.append(row)
            self.inserted.add(aid)
            self.rows[aid] = row
            return
        row = self.rows.get(aid)
        change = attempt_change(event_type, d, at, row)
        if change is None or row is None:
            return
        row.update(change)
        if aid not in self.inserted:
            self.changes.setdefault(aid, {}).update(change)
        run = self.runs.get(d["run_id"])
        if event_type == AttemptFinished.type_name and run is not None:
            self.runs[d["run_id"]] = with_finished(run, d)
            self.touched_runs.add(d["run_id"])

    def scored(self, d: dict[str, Any]) -> None:
        run_id = d["run_id"]
        if run_id not in self.finals or not keeps_scores(self.finals[run_id], d):
            return
        self.finals[run_id] = d["final"]
        self.scores[run_id] = {"scores": d["agents"], "scores_final": d["final"]}


# --- bulk statements ------------------------------------------------------------------------------
# Postgres inserts: COPY, the server's bulk-load path (faster than json_to_recordset), each
# JSON value serialised here by orjson; the server still checks types and VARCHAR lengths as for INSERT.
# Postgres updates: one statement per column set, the rows sent as ONE JSON document the server unpacks
# (json_to_recordset), far cheaper than psycopg's per-value adaptation; JSON null unpacks as SQL NULL.
# SQLite: the driver's executemany, a C loop over one prepared statement, JSON values serialised here.
# Either way None is SQL NULL, as for a column the per-event INSERT leaves unset.


def _insert_rows(conn: Connection, table: Table, rows: list[dict[str, Any]]) -> None:
    columns = list(rows[0])
    names = ", ".join(f'"{c}"' for c in columns)
    values = _values(table, columns, rows)
    if conn.dialect.name == "postgresql":
        cursor = conn.connection.driver_connection.cursor()  # type: ignore[union-attr]
        with cursor, cursor.copy(f'COPY "{table.name}" ({names}) FROM STDIN') as copy:
            for row in values:
                copy.write_row(row)
        return
    marks = ", ".join("?" for _ in columns)
    conn.exec_driver_sql(f'INSERT INTO "{table.name}" ({names}) VALUES ({marks})', values)


def _update_rows(conn: Connection, table: Table, key: str, rows: list[dict[str, Any]]) -> None:
    """UPDATE table SET <the rows' other columns> WHERE key = row[key], for rows sharing one column set."""
    columns = [c for c in rows[0] if c != key]
    if conn.dialect.name == "postgresql":
        sets = ", ".join(f'"{c}" = u."{c}"' for c in columns)
        conn.exec_driver_sql(
            f'UPDATE "{table.name}" AS t SET {sets} FROM {_pg_recordset(table, [key, *columns])} '
            f'WHERE t."{key}" = u."{key}"',
            {"rows": _json(rows)},
        )
        return
    sets = ", ".join(f'"{c}" = ?' for c in columns)
    conn.exec_driver_sql(
        f'UPDATE "{table.name}" SET {sets} WHERE "{key}" = ?', _values(table, [*columns, key], rows)
    )


def _values(table: Table, columns: list[str], rows: list[dict[str, Any]]) -> list[tuple[Any, ...]]:
    """The rows as value tuples in `columns` order, JSON columns serialised (None stays NULL)."""
    if len(columns) == 1:
        values = [(row[columns[0]],) for row in rows]
    else:
        pick = itemgetter(*columns)
        values = [pick(row) for row in rows]
    json_at = [i for i, c in enumerate(columns) if isinstance(table.c[c].type, JSON)]
    if not json_at:
        return values
    serialised = []
    for value in values:
        changed = list(value)
        for i in json_at:
            changed[i] = _json_or_none(changed[i])
        serialised.append(tuple(changed))
    return serialised


def _json_or_none(value: Any) -> str | None:
    return None if value is None else _json(value)


def _json(value: Any) -> str:
    # orjson: several times the json module's speed on these rows (event payloads, already JSON-shaped,
    # so its stricter types never bite).
    return orjson.dumps(value).decode()


def _pg_recordset(table: Table, columns: list[str]) -> str:
    # Strings unpack as text so that the INSERT/UPDATE itself checks VARCHAR lengths, as it does alone.
    dialect = postgresql.dialect()
    types = [
        "text" if isinstance(table.c[c].type, String) else table.c[c].type.compile(dialect=dialect)
        for c in columns
    ]
    fields = ", ".join(f'"{c}" {type_}' for c, type_ in zip(columns, types, strict=True))
    return f"json_to_recordset(%(rows)s::json) AS u({fields})"


def _chunks(values: Iterable[str]) -> Iterable[list[str]]:
    ordered = sorted(values)
    for start in range(0, len(ordered), _IN_CHUNK):
        yield ordered[start : start + _IN_CHUNK]
