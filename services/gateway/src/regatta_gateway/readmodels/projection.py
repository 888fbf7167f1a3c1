"""The gateway's projection: folds every event into the read-model tables.

Deterministic (invariant 7): timestamps come from the events' recorded_at, never from the clock.
Idempotent per event because the runner applies each position once, in order, with its checkpoint.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from regatta_shared.clock import isoformat
from regatta_shared.events import (
    ApiTokenCreated,
    ApiTokenRevoked,
    BenchmarkAdded,
    BenchmarkRemoved,
    BenchmarkSyncCompleted,
    BenchmarkSyncFailed,
    BenchmarkSyncRequested,
    BenchmarkSyncStarted,
    BenchmarkTasksSynced,
    Event,
    LeaderboardComputed,
    MemberAdded,
    MemberRemoved,
    MemberRoleChanged,
    PlatformAdminGranted,
    RunFailed,
    RunFinished,
    RunQueued,
    RunStarted,
    RunStopped,
    RunStopRequested,
    RunSubmitted,
    SecretDeleted,
    SecretSet,
    UserRegistered,
    WorkspaceCreated,
    WorkspaceDeleted,
    WorkspaceRenamed,
)
from regatta_shared.eventstore import StoredEvent
from regatta_shared.runs import STATUS_BY_EVENT, expected_attempts, public_submission
from sqlalchemy import Connection, and_, delete, insert, select, update

from regatta_gateway.readmodels import tables as t
from regatta_gateway.readmodels.batch import apply_batch
from regatta_gateway.readmodels.logs import log_entry

Handler = Callable[[Connection, StoredEvent, dict[str, Any]], None]
HANDLERS: dict[str, Handler] = {}


def handles(*types: type[Event]) -> Callable[[Handler], Handler]:
    def register(fn: Handler) -> Handler:
        for event_type in types:
            HANDLERS[event_type.type_name] = fn
        return fn

    return register


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
        entry = log_entry(event, _user_name(conn, event.actor))
        if entry is not None:
            conn.execute(insert(t.run_logs).values(**entry))


def _at(event: StoredEvent) -> str:
    return isoformat(event.recorded_at) or ""


def _user_name(conn: Connection, user_id: str | None) -> str | None:
    if not user_id:
        return None
    row = conn.execute(select(t.users.c.name).where(t.users.c.id == user_id)).first()
    return row[0] if row else user_id


# --- identity -------------------------------------------------------------------------------------


@handles(WorkspaceCreated)
def _workspace(conn: Connection, _e: StoredEvent, d: dict[str, Any]) -> None:
    conn.execute(insert(t.workspaces).values(id=d["workspace_id"], name=d["name"]))


@handles(UserRegistered)
def _user(conn: Connection, _e: StoredEvent, d: dict[str, Any]) -> None:
    conn.execute(insert(t.users).values(id=d["user_id"], email=d["email"], name=d["name"]))


@handles(MemberAdded)
def _member(conn: Connection, e: StoredEvent, d: dict[str, Any]) -> None:
    """Adding someone already in the workspace changes only their role: they keep their place."""
    where = and_(t.members.c.workspace_id == d["workspace_id"], t.members.c.user_id == d["user_id"])
    if conn.execute(select(t.members.c.user_id).where(where)).first() is not None:
        conn.execute(update(t.members).where(where).values(role=d["role"]))
        return
    conn.execute(
        insert(t.members).values(
            workspace_id=d["workspace_id"], user_id=d["user_id"], role=d["role"], joined=e.position
        )
    )


@handles(MemberRoleChanged)
def _member_role(conn: Connection, _e: StoredEvent, d: dict[str, Any]) -> None:
    where = and_(t.members.c.workspace_id == d["workspace_id"], t.members.c.user_id == d["user_id"])
    conn.execute(update(t.members).where(where).values(role=d["role"]))


@handles(MemberRemoved)
def _member_removed(conn: Connection, _e: StoredEvent, d: dict[str, Any]) -> None:
    where = and_(t.members.c.workspace_id == d["workspace_id"], t.members.c.user_id == d["user_id"])
    conn.execute(delete(t.members).where(where))


@handles(WorkspaceRenamed)
def _workspace_renamed(conn: Connection, _e: StoredEvent, d: dict[str, Any]) -> None:
    conn.execute(update(t.workspaces).where(t.workspaces.c.id == d["workspace_id"]).values(name=d["name"]))


@handles(WorkspaceDeleted)
def _workspace_deleted(conn: Connection, _e: StoredEvent, d: dict[str, Any]) -> None:
    """Gone from every list and out of reach (no members); its runs' rows stay, as its events do."""
    conn.execute(delete(t.members).where(t.members.c.workspace_id == d["workspace_id"]))
    conn.execute(delete(t.workspaces).where(t.workspaces.c.id == d["workspace_id"]))


@handles(PlatformAdminGranted)
def _platform_admin(conn: Connection, _e: StoredEvent, d: dict[str, Any]) -> None:
    conn.execute(delete(t.platform_admins).where(t.platform_admins.c.user_id == d["user_id"]))
    conn.execute(insert(t.platform_admins).values(user_id=d["user_id"]))


@handles(ApiTokenCreated)
def _token(conn: Connection, e: StoredEvent, d: dict[str, Any]) -> None:
    conn.execute(
        insert(t.tokens).values(
            id=d["token_id"],
            user_id=d["user_id"],
            token_hash=d["token_hash"],
            name=d["name"],
            expires_at=d.get("expires_at"),
            revoked=False,
            created_at=_at(e),
        )
    )


@handles(ApiTokenRevoked)
def _revoke(conn: Connection, _e: StoredEvent, d: dict[str, Any]) -> None:
    conn.execute(update(t.tokens).where(t.tokens.c.id == d["token_id"]).values(revoked=True))


@handles(SecretSet)
def _secret_set(conn: Connection, e: StoredEvent, d: dict[str, Any]) -> None:
    who = _user_name(conn, e.actor)
    existing = conn.execute(select(t.secrets.c.id).where(t.secrets.c.id == d["secret_id"])).first()
    if existing:
        conn.execute(
            update(t.secrets)
            .where(t.secrets.c.id == d["secret_id"])
            .values(updated_at=_at(e), updater_name=who)
        )
    else:
        conn.execute(
            insert(t.secrets).values(
                id=d["secret_id"],
                workspace_id=d["workspace_id"],
                name=d["name"],
                scope=d["scope"],
                owner_user_id=d.get("owner_user_id"),
                created_at=_at(e),
                updated_at=_at(e),
                creator_name=who,
                updater_name=who,
            )
        )


@handles(SecretDeleted)
def _secret_deleted(conn: Connection, _e: StoredEvent, d: dict[str, Any]) -> None:
    conn.execute(delete(t.secrets).where(t.secrets.c.id == d["secret_id"]))


# --- benchmarks -----------------------------------------------------------------------------------


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
            source_ref=str(source["ref"])[:1000],
            source=source,
            hosted=d.get("hosted", False),
            status="pending",
            synced=0,
            total=0,
            metadata={},
            added_at=_at(e),
            added_by=_user_name(conn, e.actor) or "system",
            removed=False,
        )
    )


@handles(BenchmarkSyncRequested)
def _sync_requested(conn: Connection, _e: StoredEvent, d: dict[str, Any]) -> None:
    _benchmark(conn, d["benchmark_id"], status="pending", sync_id=d["sync_id"], synced=0, sync_error=None)


@handles(BenchmarkSyncStarted)
def _sync_started(conn: Connection, _e: StoredEvent, d: dict[str, Any]) -> None:
    _benchmark(
        conn,
        d["benchmark_id"],
        status="syncing",
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
        }
        for i, task in enumerate(d["tasks"])
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
        status="ready",
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


@handles(LeaderboardComputed)
def _leaderboard(conn: Connection, e: StoredEvent, d: dict[str, Any]) -> None:
    conn.execute(delete(t.leaderboards).where(t.leaderboards.c.benchmark_id == d["benchmark_id"]))
    conn.execute(
        insert(t.leaderboards).values(benchmark_id=d["benchmark_id"], rows=d["rows"], position=e.position)
    )


# --- runs -----------------------------------------------------------------------------------------


def _run(conn: Connection, run_id: str, **values: Any) -> None:
    conn.execute(update(t.runs).where(t.runs.c.id == run_id).values(**values))


@handles(RunSubmitted)
def _run_submitted(conn: Connection, e: StoredEvent, d: dict[str, Any]) -> None:
    user = conn.execute(select(t.users).where(t.users.c.id == (e.actor or ""))).mappings().first()
    expected = expected_attempts(d)
    submission = public_submission(d)
    conn.execute(
        insert(t.runs).values(
            id=d["run_id"],
            workspace_id=d["workspace_id"],
            benchmark_id=d["benchmark_id"],
            name=d["name"],
            status=STATUS_BY_EVENT[e.type],
            created_at=_at(e),
            created_by=user["name"] if user else e.actor,
            creator_email=user["email"] if user else None,
            expected=expected,
            ingested=0,
            seq=e.position,
            submission=submission,
            scores=None,
            scores_final=False,
            stop_requested=False,
            input_tokens=0,
            output_tokens=0,
            cost_usd=None,
        )
    )


@handles(RunQueued)
def _run_queued(conn: Connection, e: StoredEvent, d: dict[str, Any]) -> None:
    _run(conn, d["run_id"], status=STATUS_BY_EVENT[e.type], expected=d["expected_attempts"])


@handles(RunStarted)
def _run_started(conn: Connection, e: StoredEvent, d: dict[str, Any]) -> None:
    _run(conn, d["run_id"], status=STATUS_BY_EVENT[e.type], started_at=_at(e))


@handles(RunStopRequested)
def _stop_requested(conn: Connection, _e: StoredEvent, d: dict[str, Any]) -> None:
    _run(conn, d["run_id"], stop_requested=True)


@handles(RunStopped, RunFailed)
def _run_ended(conn: Connection, e: StoredEvent, d: dict[str, Any]) -> None:
    _run(conn, d["run_id"], status=STATUS_BY_EVENT[e.type], completed_at=_at(e), reason=d.get("reason"))


@handles(RunFinished)
def _run_finished(conn: Connection, e: StoredEvent, d: dict[str, Any]) -> None:
    _run(conn, d["run_id"], status=STATUS_BY_EVENT[e.type], completed_at=_at(e))
