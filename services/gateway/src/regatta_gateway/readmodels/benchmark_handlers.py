"""The projection's handlers for benchmarks: added, synced (requested, started, tasks, completed, failed),
removed, tasks excluded, and their leaderboards."""

from __future__ import annotations

from typing import Any

from regatta_shared.events import (
    BenchmarkAdded,
    BenchmarkRemoved,
    BenchmarkSyncCompleted,
    BenchmarkSyncFailed,
    BenchmarkSyncRequested,
    BenchmarkSyncStarted,
    BenchmarkTaskExcluded,
    BenchmarkTasksSynced,
    LeaderboardComputed,
)
from regatta_shared.eventstore import StoredEvent
from regatta_shared.rules.benchmark_status import PENDING, READY, SYNCING
from sqlalchemy import Connection, delete, insert, select, update

from regatta_gateway.benchmark_keys import benchmark_key
from regatta_gateway.readmodels import tables as t
from regatta_gateway.readmodels.handling import Handler, recorded_at, registrar, user_name

HANDLERS: dict[str, Handler] = {}
handles = registrar(HANDLERS)


def _benchmark(conn: Connection, benchmark_id: str, **values: Any) -> None:
    conn.execute(update(t.benchmarks).where(t.benchmarks.c.id == benchmark_id).values(**values))


@handles(BenchmarkAdded)
def _benchmark_added(conn: Connection, e: StoredEvent, d: dict[str, Any]) -> None:
    source = d["source"]
    conn.execute(
        insert(t.benchmarks).values(
            id=d["benchmark_id"],
            workspace_id=d["workspace_id"],
            # Clamped to the columns: the gateway bounds both, but an event written past it must not
            # stop this projection (and with it every read-your-writes answer) for good.
            name=str(d["name"])[:300],
            source_type=source["type"],
            source_ref=benchmark_key(source)[:1000],
            source=source,
            hosted=d.get("hosted", False),
            status=PENDING,
            synced=0,
            total=0,
            metadata={},
            added_at=recorded_at(e),
            added_by=user_name(conn, e.actor) or "system",
            added_by_id=e.actor[:200] if e.actor else None,
            removed=False,
        )
    )


@handles(BenchmarkSyncRequested)
def _sync_requested(conn: Connection, _e: StoredEvent, d: dict[str, Any]) -> None:
    _benchmark(conn, d["benchmark_id"], status=PENDING, sync_id=d["sync_id"], synced=0, sync_error=None)


@handles(BenchmarkSyncStarted)
def _sync_started(conn: Connection, _e: StoredEvent, d: dict[str, Any]) -> None:
    _benchmark(
        conn,
        d["benchmark_id"],
        status=SYNCING,
        sync_id=d["sync_id"],
        synced=0,
        total=d["total"],
        sync_error=None,
    )


@handles(BenchmarkTasksSynced)
def _tasks_synced(conn: Connection, _e: StoredEvent, d: dict[str, Any]) -> None:
    row = conn.execute(select(t.benchmarks.c.synced).where(t.benchmarks.c.id == d["benchmark_id"])).first()
    synced = (row[0] or 0) if row else 0
    rows = [
        {
            "benchmark_id": d["benchmark_id"],
            "sync_id": d["sync_id"],
            "name": task["name"],
            "ordinal": synced + i,
            "category": task.get("category"),
            "difficulty": task.get("difficulty"),
            "tags": task.get("tags") or [],
            "digest": task["digest"],
            "resources": task.get("resources"),
            "invalid_reason": None,
        }
        for i, task in enumerate(d["tasks"])
    ]
    rows += [
        {
            "benchmark_id": d["benchmark_id"],
            "sync_id": d["sync_id"],
            "name": str(task["name"])[:500],
            "ordinal": synced + len(rows) + i,
            "category": None,
            "difficulty": None,
            "tags": [],
            "digest": None,
            "resources": None,
            # Clamped like a name: the reason may quote a task's own text.
            "invalid_reason": str(task["reason"])[:2000],
        }
        for i, task in enumerate(d.get("invalid") or [])
    ]
    if rows:
        conn.execute(insert(t.benchmark_tasks), rows)
    _benchmark(conn, d["benchmark_id"], synced=synced + len(rows))


@handles(BenchmarkSyncCompleted)
def _sync_completed(conn: Connection, _e: StoredEvent, d: dict[str, Any]) -> None:
    if d.get("source_commit"):
        where = t.benchmarks.c.id == d["benchmark_id"]
        row = conn.execute(select(t.benchmarks.c.source).where(where)).first()
        source = {**((row[0] if row else None) or {}), "resolved_commit": d["source_commit"]}
        _benchmark(conn, d["benchmark_id"], source=source)
    _benchmark(
        conn,
        d["benchmark_id"],
        status=READY,
        ready_sync_id=d["sync_id"],
        task_count=d["task_count"],
        version=d["version"],
        digest=d["digest"],
        metadata=d.get("metadata") or {},
        sync_error=None,
    )


@handles(BenchmarkSyncFailed)
def _sync_failed(conn: Connection, _e: StoredEvent, d: dict[str, Any]) -> None:
    _benchmark(conn, d["benchmark_id"], status="failed", sync_error=d["reason"])


@handles(BenchmarkRemoved)
def _benchmark_removed(conn: Connection, _e: StoredEvent, d: dict[str, Any]) -> None:
    _benchmark(conn, d["benchmark_id"], removed=True)


@handles(BenchmarkTaskExcluded)
def _task_excluded(conn: Connection, e: StoredEvent, d: dict[str, Any]) -> None:
    conn.execute(
        insert(t.benchmark_exclusions).values(
            benchmark_id=d["benchmark_id"],
            version=str(d["version"])[:200],
            task=str(d["task"])[:500],
            reason=str(d["reason"])[:2000],
            excluded_by=user_name(conn, e.actor) or e.actor or "system",
            excluded_at=recorded_at(e),
        )
    )


@handles(LeaderboardComputed)
def _leaderboard(conn: Connection, e: StoredEvent, d: dict[str, Any]) -> None:
    conn.execute(delete(t.leaderboards).where(t.leaderboards.c.benchmark_id == d["benchmark_id"]))
    conn.execute(
        insert(t.leaderboards).values(benchmark_id=d["benchmark_id"], rows=d["rows"], position=e.position)
    )
