"""Batched writes of the gateway projection: the attempt events of a batch in a handful of statements.

A run's log is almost all AttemptScheduled/Started/Retried/Finished, and one event at a time they cost
2–4 statements each (attempt row, run counters, log line). Here a run of such events (a segment) is
folded in memory over the rows it touches, read once up front, and written back with one statement
per table and column set. Every other event ends the segment: what was folded is written first, then
the event goes through the projection's own `apply`, so it sees exactly the tables it would have seen
one event at a time. The result is the same rows as `apply` on each event in order (invariant 7);
tests/integration/test_projection_batching.py and bench/eventstore.py compare the two.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable, Sequence
from datetime import datetime
from operator import itemgetter
from typing import Any

import orjson
from regatta_shared.clock import isoformat
from regatta_shared.events import AttemptFinished, AttemptRetried, AttemptScheduled, AttemptStarted, RunScored
from regatta_shared.eventstore import StoredEvent
from sqlalchemy import JSON, Connection, String, Table, bindparam, select, update
from sqlalchemy.dialects import postgresql

from . import tables as t
from .logs import log_entry

ATTEMPT_EVENTS = frozenset(
    e.type_name for e in (AttemptScheduled, AttemptStarted, AttemptRetried, AttemptFinished)
)
# RunScored only sets a run's scores, which no attempt event reads: folding it keeps a busy run's
# segments whole (scoring publishes provisional scores every few seconds) and writes each run's last
# scores once per batch instead of every large provisional document.
BATCHED = ATTEMPT_EVENTS | {RunScored.type_name}
_IN_CHUNK = 500  # ids per IN (...) list: well inside SQLite's and Postgres's parameter limits

_RUN_COUNTERS = ("ingested", "input_tokens", "output_tokens", "cost_usd", "environments")
_UPDATE_RUN = (
    update(t.runs)
    .where(t.runs.c.id == bindparam("p_id"))
    .values({name: bindparam(f"p_{name}", type_=t.runs.c[name].type) for name in _RUN_COUNTERS})
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


def count_environment(counts: dict[str, Any] | None, d: dict[str, Any]) -> dict[str, Any] | None:
    """A run's environment counts (rm_runs.environments) with one more finished attempt `d` (a new dict:
    the stored one is never changed in place)."""
    name = d.get("environment")
    if not name:
        return counts
    counts = dict(counts or {})
    entry = dict(counts.get(name) or {"attempts": 0, "not_built": 0})
    entry["attempts"] += 1
    entry["not_built"] += d.get("environment_built") is False
    counts[name] = entry
    return counts


def trial_start(d: dict[str, Any]) -> str | None:
    """When a finished attempt's trial started, written as the read models write times. An attempt
    shorter than the executors' started-report delay has no AttemptStarted to take it from."""
    try:
        return isoformat(datetime.fromisoformat(d["started_at"])) if d.get("started_at") else None
    except (TypeError, ValueError):
        return None


class _Segment:
    def __init__(self, conn: Connection, events: list[StoredEvent]) -> None:
        self.conn = conn
        self.events = events
        self.inserts: list[dict[str, Any]] = []  # attempts scheduled in this segment, full rows
        self.inserted: dict[str, dict[str, Any]] = {}
        self.changes: dict[str, dict[str, Any]] = {}  # stored attempts: column -> new value
        self.outcomes: dict[str, str | None] = {}  # stored attempts: current outcome (Started's guard)
        self.started_ats: dict[str, str | None] = {}  # stored attempts: started_at as stored
        self.runs: dict[str, dict[str, Any]] = {}  # run id -> counters, as stored then folded
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
                self.outcomes[aid] = outcome
                self.started_ats[aid] = started_at
        run_ids = {e.data["run_id"] for e in self.events if e.type == AttemptFinished.type_name}
        for chunk in _chunks(run_ids):
            query = select(t.runs.c.id, *(t.runs.c[name] for name in _RUN_COUNTERS)).where(
                t.runs.c.id.in_(chunk)
            )
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
        # As projection._user_name: the user's name, else the id itself.
        if not user_id:
            return None
        return self.names.get(user_id, user_id)

    def write(self) -> None:
        for event in self.events:
            at = _at(event)
            fold = _FOLDS.get(event.type)
            if fold is not None:
                fold(self, at, event.data)
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
                    {"p_id": run_id, **{f"p_{k}": self.runs[run_id][k] for k in _RUN_COUNTERS}}
                    for run_id in sorted(self.touched_runs)
                ],
            )
        if self.scores:
            rows = [{"id": run_id, **values} for run_id, values in sorted(self.scores.items())]
            _update_rows(conn, t.runs, "id", rows)
        if self.logs:
            _insert_rows(conn, t.run_logs, self.logs)

    # --- the folds: each does to the in-memory rows what its handler in projection.py does in SQL ------

    def _set(self, aid: str, guard_unfinished: bool, **values: Any) -> None:
        """UPDATE rm_attempts SET values WHERE attempt_id = aid [AND outcome IS NULL]."""
        row = self.inserted.get(aid)
        if row is not None:
            if not (guard_unfinished and row["outcome"] is not None):
                row.update(values)
        elif aid in self.outcomes and not (guard_unfinished and self.outcomes[aid] is not None):
            self.changes.setdefault(aid, {}).update(values)
            if "outcome" in values:
                self.outcomes[aid] = values["outcome"]

    def _started_at(self, aid: str) -> str | None:
        row = self.inserted.get(aid)
        if row is not None:
            return row["started_at"]
        return self.changes.get(aid, {}).get("started_at", self.started_ats.get(aid))

    def scheduled(self, at: str, d: dict[str, Any]) -> None:
        row = {
            "attempt_id": d["attempt_id"],
            "run_id": d["run_id"],
            "agent_index": d["agent_index"],
            "task": d["task"],
            "attempt_index": d["attempt_index"],
            "status": "scheduled",
            "outcome": None,
            "try_number": d.get("try_number", 1),
            "scheduled_at": at,
            "started_at": None,
            "finished_at": None,
            "result": None,
        }
        # A duplicate id stays in `inserts`, so the INSERT fails on the primary key as it would alone.
        self.inserts.append(row)
        self.inserted[d["attempt_id"]] = row

    def started(self, at: str, d: dict[str, Any]) -> None:
        self._set(d["attempt_id"], True, status="running", started_at=at, try_number=d["try_number"])

    def retried(self, _at: str, d: dict[str, Any]) -> None:
        self._set(d["attempt_id"], False, status="retrying", try_number=d["try_number"])

    def finished(self, at: str, d: dict[str, Any]) -> None:
        aid = d["attempt_id"]
        values = {"status": "finished", "outcome": d["outcome"], "finished_at": at, "result": d}
        if self._started_at(aid) is None:
            values["started_at"] = trial_start(d)  # as coalesce(started_at, …) in projection.py
        self._set(aid, False, **values, try_number=d["try_number"])
        run = self.runs.get(d["run_id"])
        if run is None:
            return
        usage = d.get("usage") or {}
        cost = run["cost_usd"]
        if usage.get("cost_usd") is not None:
            cost = (cost or 0.0) + usage["cost_usd"]
        run.update(
            ingested=(run["ingested"] or 0) + 1,
            input_tokens=(run["input_tokens"] or 0) + (usage.get("input_tokens") or 0),
            output_tokens=(run["output_tokens"] or 0) + (usage.get("output_tokens") or 0),
            cost_usd=cost,
            environments=count_environment(run["environments"], d),
        )
        self.touched_runs.add(d["run_id"])

    def scored(self, _at: str, d: dict[str, Any]) -> None:
        # As projection._run_scored: final scores are never replaced by provisional ones.
        run_id = d["run_id"]
        if run_id not in self.finals or (self.finals[run_id] and not d["final"]):
            return
        self.finals[run_id] = d["final"]
        self.scores[run_id] = {"scores": d["agents"], "scores_final": d["final"]}


_FOLDS: dict[str, Callable[[_Segment, str, dict[str, Any]], None]] = {
    RunScored.type_name: _Segment.scored,
    AttemptScheduled.type_name: _Segment.scheduled,
    AttemptStarted.type_name: _Segment.started,
    AttemptRetried.type_name: _Segment.retried,
    AttemptFinished.type_name: _Segment.finished,
}


# --- bulk statements ------------------------------------------------------------------------------
# Postgres inserts: COPY, the server's bulk-load path (about twice json_to_recordset's rate here), each
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
