"""Benchmark of the event store's append path and of the gateway projection's rebuild.

Run: .venv/bin/python bench/eventstore.py [--quick] [--profile]

Append throughput on Postgres and SQLite, single events (one per append call, so one per transaction)
and batches (`--batch` events per append call), next to the raw driver measured in the same run on an
identical table with the same indexes (a second database / file made by `EventStore.create_schema`):
psycopg `executemany` and COPY, sqlite3 `executemany`, each in transactions of the same size and each
serialising the same JSON payloads inside the timed loop. Methods alternate round by round and each
figure is the median over rounds, so load drifting on a shared machine hits both sides alike.
Budget: batched append >= 0.5x the raw executemany rate.

Projection rebuild: a realistic generated log (runs with RunSubmitted, AttemptScheduled/Started/
Finished, retries, provisional and final RunScored, RunFinished, a LeaderboardComputed), appended as
concurrent runs interleave, then `ProjectionRunner.rebuild()` of the gateway's read models, timed with
the projection's batched path and with one `apply` per event (the pre-batching path), alternating.
Both must produce identical read models (checked). Budget: >= 20k events/s.

Creates its own Postgres databases (dropped at the end; REGATTA_BENCH_POSTGRES overrides the admin
URL) and SQLite files in a temporary directory.
"""

from __future__ import annotations

import argparse
import json
import random
import sqlite3
import tempfile
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import psycopg
from _common import (
    RunLog,
    RunPlan,
    libpq_url,
    machine_state,
    make_tasks,
    median,
    postgres_database,
    say,
    table,
)
from _rebuild import profiled, rebuild_bench
from psycopg.types.json import Jsonb
from regatta_shared.eventstore import EventStore, NewEvent, StoredEvent, schema
from sqlalchemy import func, insert, select, text

APPEND_BUDGET = 0.5  # batched append / raw executemany
COLUMNS = "event_id, stream_id, version, type, data, metadata, recorded_at"


@dataclass(frozen=True)
class Sizes:
    rounds: int
    single: int  # events per round, one per append call
    batched: int  # events per round, in appends of `batch`
    batch: int
    log_runs: int
    log_tasks: int
    log_agents: int
    log_attempts: int
    per_event_prefix: int  # events rebuilt one `apply` at a time (that path is ~20-40x slower)

    @property
    def log_attempt_total(self) -> int:
        return self.log_runs * self.log_tasks * self.log_agents * self.log_attempts


FULL = Sizes(
    rounds=5,
    single=1_000,
    batched=50_000,
    batch=500,
    log_runs=6,
    log_tasks=250,
    log_agents=4,
    log_attempts=10,
    per_event_prefix=5_000,
)
QUICK = Sizes(
    rounds=3,
    single=300,
    batched=10_000,
    batch=500,
    log_runs=3,
    log_tasks=100,
    log_agents=3,
    log_attempts=5,
    per_event_prefix=3_000,
)


# --- payloads -------------------------------------------------------------------------------------


def sample_payloads(count: int) -> list[NewEvent]:
    """Realistic payloads (mostly attempt events of one run) to append again and again under new ids."""
    tasks = make_tasks(max(1, count // 6), random.Random(1))
    plan = RunPlan("run_sample", "sample", "ws_bench", "bench", tasks, agents=2, attempts_per_task=1)
    events = list(RunLog(plan, seed=2))
    return [events[i % len(events)] for i in range(count)]


def fresh(payloads: Sequence[NewEvent]) -> list[NewEvent]:
    """The same payloads under new event ids (every append must really insert)."""
    return [replace(e, event_id=str(uuid.uuid4())) for e in payloads]


def batches(events: list[NewEvent], size: int) -> list[list[NewEvent]]:
    return [events[i : i + size] for i in range(0, len(events), size)]


class Streams:
    """A new stream name per transaction, so raw inserts start at version 1 like the store's appends."""

    def __init__(self) -> None:
        self.prefix = uuid.uuid4().hex[:6]
        self.count = 0

    def new(self) -> str:
        self.count += 1
        return f"run-{self.prefix}{self.count}"


# --- one transaction of each method ---------------------------------------------------------------
# Every function below writes `events` in ONE transaction, serialising the JSON payloads itself.

INSERT_PG = f"INSERT INTO events ({COLUMNS}) VALUES (%s, %s, %s, %s, %s, %s, %s)"
INSERT_SQLITE = f"INSERT INTO events ({COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?)"


def pg_insert(conn: psycopg.Connection[Any], events: list[NewEvent], streams: Streams) -> None:
    stream = streams.new()
    with conn.cursor() as cur:
        for version, e in enumerate(events, start=1):
            cur.execute(INSERT_PG, _row(e, stream, version))
    conn.commit()


def pg_executemany(conn: psycopg.Connection[Any], events: list[NewEvent], streams: Streams) -> None:
    stream = streams.new()
    with conn.cursor() as cur:
        cur.executemany(INSERT_PG, [_row(e, stream, v) for v, e in enumerate(events, start=1)])
    conn.commit()


def pg_copy(conn: psycopg.Connection[Any], events: list[NewEvent], streams: Streams) -> None:
    stream = streams.new()
    with conn.cursor() as cur, cur.copy(f"COPY events ({COLUMNS}) FROM STDIN") as copy:
        for v, e in enumerate(events, start=1):
            copy.write_row(_row(e, stream, v))
    conn.commit()


def _row(e: NewEvent, stream: str, version: int) -> tuple[Any, ...]:
    return (e.event_id, stream, version, e.type, Jsonb(e.data), Jsonb(e.metadata), datetime.now(UTC))


def sqlite_connect(path: Path) -> sqlite3.Connection:
    """The store's own settings (WAL, synchronous=NORMAL), transactions begun explicitly."""
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("PRAGMA synchronous=NORMAL")
    return conn


def sqlite_insert(conn: sqlite3.Connection, events: list[NewEvent], streams: Streams) -> None:
    stream = streams.new()
    conn.execute("BEGIN IMMEDIATE")
    for v, e in enumerate(events, start=1):
        conn.execute(INSERT_SQLITE, _sqlite_row(e, stream, v))
    conn.execute("COMMIT")


def sqlite_executemany(conn: sqlite3.Connection, events: list[NewEvent], streams: Streams) -> None:
    stream = streams.new()
    rows = [_sqlite_row(e, stream, v) for v, e in enumerate(events, start=1)]
    conn.execute("BEGIN IMMEDIATE")
    conn.executemany(INSERT_SQLITE, rows)
    conn.execute("COMMIT")


def _sqlite_row(e: NewEvent, stream: str, version: int) -> tuple[Any, ...]:
    # SQLAlchemy stores SQLite datetimes in this text form.
    at = datetime.now(UTC).strftime("%Y-%m-%d %H:%M:%S.%f")
    return (e.event_id, stream, version, e.type, json.dumps(e.data), json.dumps(e.metadata), at)


def store_append(store: EventStore, events: list[NewEvent], streams: Streams) -> None:
    store.append(streams.new(), events, expected_version=0)


def previous_append(store: EventStore, events: list[NewEvent], streams: Streams) -> None:
    """The store's append path before this bench's optimisation, kept as the before-figure: the lock, a
    SELECT for idempotency, a SELECT of the stream version, then SQLAlchemy's INSERT ... RETURNING, whose
    VALUES list of 7 x N placeholders psycopg parses anew for every batch."""
    stream = streams.new()
    table = schema.events
    with store.engine.begin() as conn:
        if not store.is_sqlite:
            conn.execute(text("SELECT pg_advisory_xact_lock(:key)"), {"key": 0x52454741})
        ids = [e.event_id for e in events]
        if conn.execute(select(table.c.event_id).where(table.c.event_id.in_(ids)).limit(1)).first():
            return
        current = conn.execute(
            select(func.coalesce(func.max(table.c.version), 0)).where(table.c.stream_id == stream)
        ).scalar_one()
        recorded_at = datetime.now(UTC)
        rows = [
            {
                "event_id": e.event_id,
                "stream_id": stream,
                "version": current + i,
                "type": e.type,
                "data": e.data,
                "metadata": e.metadata,
                "recorded_at": recorded_at,
            }
            for i, e in enumerate(events, start=1)
        ]
        result = conn.execute(insert(table).returning(table.c.position, table.c.event_id), rows)
        positions = {event_id: position for position, event_id in result.all()}
        [StoredEvent(position=positions[r["event_id"]], **r) for r in rows]


# --- timing ---------------------------------------------------------------------------------------


@dataclass
class Method:
    name: str
    txn: Callable[[list[NewEvent]], None]
    rates: list[float] = field(default_factory=list)  # events/s, one per round


def race(methods: list[Method], payloads: list[NewEvent], per_txn: int, rounds: int) -> None:
    """Methods take turns transaction by transaction (the order rotating each time), so a load spike on
    this shared machine slows all of them alike; each round yields one rate per method."""
    for _ in range(rounds):
        chunks = {m.name: batches(fresh(payloads), per_txn) for m in methods}
        spent = dict.fromkeys(chunks, 0.0)
        for k in range(len(payloads) // per_txn):
            for m in methods[k % len(methods) :] + methods[: k % len(methods)]:
                started = time.perf_counter()
                m.txn(chunks[m.name][k])
                spent[m.name] += time.perf_counter() - started
        for m in methods:
            m.rates.append(len(payloads) / spent[m.name])


def ratio_rows(backend: str, kind: str, methods: list[Method], budget: float | None) -> list[list[Any]]:
    base = methods[0]
    rows = []
    for m in methods:
        ratio = median([a / b for a, b in zip(m.rates, base.rates, strict=True)])
        verdict = ""
        if budget is not None and m.name.startswith("EventStore"):
            verdict = ("MET" if ratio >= budget else "NOT MET") + f" (>= {budget}x)"
        rows.append([backend, kind, m.name, median(m.rates), f"{ratio:.2f}x", verdict])
    return rows


def append_bench(backend: str, sizes: Sizes, store: EventStore, raw: Any, profile: bool) -> list[list[Any]]:
    """Single and batched appends of the store next to the raw driver, on one backend."""
    streams = Streams()
    single_payloads = sample_payloads(sizes.single)
    batch_payloads = sample_payloads(sizes.batched)
    ours_single = Method("EventStore.append, 1 event", lambda ev: store_append(store, ev, streams))
    ours_many = Method(
        f"EventStore.append, {sizes.batch} events", lambda ev: store_append(store, ev, streams)
    )
    before_single = Method("before: previous append, 1 event", lambda ev: previous_append(store, ev, streams))
    before_many = Method(
        f"before: previous append, {sizes.batch} events", lambda ev: previous_append(store, ev, streams)
    )
    if backend == "postgres":
        raw_single = Method("psycopg INSERT + COMMIT", lambda ev: pg_insert(raw, ev, streams))
        raw_many = [
            Method("psycopg executemany", lambda ev: pg_executemany(raw, ev, streams)),
            Method("psycopg COPY", lambda ev: pg_copy(raw, ev, streams)),
        ]
    else:
        raw_single = Method("sqlite3 execute + COMMIT", lambda ev: sqlite_insert(raw, ev, streams))
        raw_many = [Method("sqlite3 executemany", lambda ev: sqlite_executemany(raw, ev, streams))]
    # Warm up connections, statement caches and lazy imports outside the timings.
    for m in [raw_single, ours_single, before_single, *raw_many, ours_many, before_many]:
        m.txn(fresh(batch_payloads[: sizes.batch]))
    say(f"{backend}: single appends, {sizes.rounds} rounds of {sizes.single} events")
    race([raw_single, ours_single, before_single], single_payloads, 1, sizes.rounds)
    say(f"{backend}: batched appends, {sizes.rounds} rounds of {sizes.batched} events")
    race([*raw_many, ours_many, before_many], batch_payloads, sizes.batch, sizes.rounds)
    if profile:
        chunks = batches(fresh(batch_payloads), sizes.batch)
        profiled(f"{backend} batched append", lambda: [store_append(store, c, streams) for c in chunks])
    return ratio_rows(backend, "1 per txn", [raw_single, ours_single, before_single], None) + ratio_rows(
        backend, f"{sizes.batch} per txn", [*raw_many, ours_many, before_many], APPEND_BUDGET
    )


def raw_executemany(txn: Callable[[list[NewEvent], Streams], None], sizes: Sizes) -> Callable[[], float]:
    """The raw driver's executemany rate right now: 20 transactions of `sizes.batch` events."""
    payloads = sample_payloads(20 * sizes.batch)
    streams = Streams()

    def rate() -> float:
        chunks = batches(fresh(payloads), sizes.batch)
        started = time.perf_counter()
        for chunk in chunks:
            txn(chunk, streams)
        return len(payloads) / (time.perf_counter() - started)

    return rate


# --- main -----------------------------------------------------------------------------------------


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--quick", action="store_true", help="smaller sizes (about a minute)")
    parser.add_argument("--profile", action="store_true", help="cProfile the batched append and a rebuild")
    parser.add_argument("--only", choices=["append", "rebuild"], help="run one half only")
    args = parser.parse_args()
    sizes = QUICK if args.quick else FULL
    print(f"machine: {machine_state()}")
    started = time.perf_counter()
    append_rows: list[list[Any]] = []
    rebuild_rows: list[list[Any]] = []
    with tempfile.TemporaryDirectory(prefix="regatta-bench-") as tmp:
        with (
            postgres_database("regatta_bench_store") as store_url,
            postgres_database("regatta_bench_raw") as raw_url,
            psycopg.connect(libpq_url(raw_url)) as pg_raw,
        ):
            raw_store = EventStore(raw_url)
            raw_store.create_schema()  # the identical table, indexes included
            raw_store.dispose()
            if args.only != "rebuild":
                store = EventStore(store_url)
                store.create_schema()
                append_rows += append_bench("postgres", sizes, store, pg_raw, args.profile)
                store.dispose()
            if args.only != "append":
                with postgres_database("regatta_bench_log") as log_url:
                    store = EventStore(log_url)
                    store.create_schema()
                    yardstick = raw_executemany(
                        lambda ev, streams: pg_executemany(pg_raw, ev, streams), sizes
                    )
                    rebuild_rows += rebuild_bench("postgres", store, sizes, yardstick, args.profile)
                    store.dispose()
        raw_store = EventStore(f"sqlite:///{tmp}/raw.db")
        raw_store.create_schema()
        raw_store.dispose()
        sqlite_raw = sqlite_connect(Path(tmp) / "raw.db")
        if args.only != "rebuild":
            store = EventStore(f"sqlite:///{tmp}/store.db")
            store.create_schema()
            append_rows += append_bench("sqlite", sizes, store, sqlite_raw, args.profile)
            store.dispose()
        if args.only != "append":
            store = EventStore(f"sqlite:///{tmp}/log.db")
            store.create_schema()
            yardstick = raw_executemany(
                lambda ev, streams: sqlite_executemany(sqlite_raw, ev, streams), sizes
            )
            rebuild_rows += rebuild_bench("sqlite", store, sizes, yardstick, args.profile)
            store.dispose()
        sqlite_raw.close()
    if append_rows:
        print("\nAppend throughput (median over rounds; ratio = median of per-round ratios to the first row)")
        print(table(["backend", "events per txn", "method", "events/s", "ratio", "budget"], append_rows))
    if rebuild_rows:
        print(
            "\nProjection rebuild of the gateway read models (ProjectionRunner.rebuild; median over rounds). "
            "vs raw = rebuild events/s / raw executemany rows/s, alternating in the same run"
        )
        print(table(["backend", "log", "path", "events/s", "vs raw", "budget / speed-up"], rebuild_rows))
    print(f"\nmachine after: {machine_state()}; total wall {time.perf_counter() - started:.0f} s")


if __name__ == "__main__":
    main()
