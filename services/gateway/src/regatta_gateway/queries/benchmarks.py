"""Benchmark reads, shaped as the API returns them (names from the Osmosis contract): the workspace's
benchmarks, one benchmark in full, and the lookups by key of a benchmark or a run that other reads share."""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from regatta_shared.eventstore import EventStore
from regatta_shared.rules import execution_defaults as defaults
from regatta_shared.rules.conditions import benchmark_standard
from regatta_shared.runs.status import RUNNING
from sqlalchemy import ColumnElement, Connection, and_, func, or_, select

from regatta_gateway.benchmark_keys import benchmark_key, key_forms
from regatta_gateway.errors import Invalid, NotFound
from regatta_gateway.principals import Scope
from regatta_gateway.queries.leaderboards import leaderboard_rows
from regatta_gateway.readmodels import tables as t

CONTROL = re.compile(r"[\x00-\x1f\x7f]")


def run_key_shape(key: str) -> bool:
    """Whether `key` could name a run at all (run names are checked the same way at submission)."""
    return bool(key) and not (
        key.startswith("/")
        or "\\" in key
        or CONTROL.search(key)
        or any(part in (".", "..") for part in key.split("/"))
    )


def find_benchmark(store: EventStore, scope: Scope, key: str, field: str | None = None) -> dict[str, Any]:
    with store.read_engine.connect() as conn:
        rows = (
            conn.execute(
                select(t.benchmarks)
                .where(
                    t.benchmarks.c.workspace_id == scope.workspace_id,
                    t.benchmarks.c.removed.is_(False),
                    or_(
                        t.benchmarks.c.id == key,
                        t.benchmarks.c.source_ref.in_(key_forms(key)),
                        t.benchmarks.c.name == key,
                    ),
                )
                .order_by(t.benchmarks.c.added_at.desc())
            )
            .mappings()
            .all()
        )
    if not rows:
        raise NotFound(f"Benchmark {key!r} not found", code="NOT_FOUND", field=field)
    exact = [r for r in rows if r["id"] == key] or rows
    return dict(exact[0])


# What makes two sources the same tasks: metadata and the trusted mark say nothing about which tasks.
SOURCE_IDENTITY = (
    "type",
    "ref",
    "registry_path",
    "registry_url",
    "dataset",
    "version",
    "git_url",
    "git_ref",
    "subdir",
)


def benchmark_with_source(store: EventStore, scope: Scope, source: dict[str, Any]) -> dict[str, Any] | None:
    """The workspace's (not removed) benchmark whose source names the same tasks as `source`, if any."""
    wanted = {key: source.get(key) for key in SOURCE_IDENTITY}
    with store.read_engine.connect() as conn:
        rows = conn.execute(
            select(t.benchmarks.c.id, t.benchmarks.c.name, t.benchmarks.c.source).where(
                t.benchmarks.c.workspace_id == scope.workspace_id,
                t.benchmarks.c.removed.is_(False),
                t.benchmarks.c.source_type == source.get("type"),
                t.benchmarks.c.source_ref.in_([form[:1000] for form in key_forms(benchmark_key(source))]),
            )
        ).mappings()
        for row in rows:
            if {key: (row["source"] or {}).get(key) for key in SOURCE_IDENTITY} == wanted:
                return dict(row)
    return None


def find_run(
    store: EventStore, scope: Scope, key: str, columns: Sequence[ColumnElement[Any]] | None = None
) -> dict[str, Any]:
    """The run named by `key` (id or name; the newest of a name). `columns` limits what is read: a big
    run's row holds hundreds of KB of JSON that most reads do not need."""
    if not run_key_shape(key):
        raise Invalid(
            "A run key is a run id or name: no leading '/', '.' or '..' segments, backslashes or control "
            "characters",
            code="VALIDATION",
            field="key",
        )
    query = (
        (select(*columns) if columns else select(t.runs))
        .where(t.runs.c.workspace_id == scope.workspace_id, or_(t.runs.c.id == key, t.runs.c.name == key))
        .order_by(t.runs.c.seq.desc())
        .limit(1)
    )
    with store.read_engine.connect() as conn:
        row = conn.execute(query).mappings().first()
    if row is None:
        raise NotFound(f"Benchmark run {key!r} not found", code="NOT_FOUND")
    return dict(row)


def _categories(conn: Connection, benchmark: dict[str, Any]) -> list[dict[str, Any]]:
    rows = conn.execute(
        select(t.benchmark_tasks.c.category, func.count())
        .where(
            t.benchmark_tasks.c.benchmark_id == benchmark["id"],
            t.benchmark_tasks.c.sync_id == benchmark["ready_sync_id"],
            t.benchmark_tasks.c.category.is_not(None),
        )
        .group_by(t.benchmark_tasks.c.category)
        .order_by(t.benchmark_tasks.c.category)
    ).all()
    return [{"name": name, "task_count": count} for name, count in rows]


def _task_sets(benchmark: dict[str, Any]) -> list[dict[str, Any]]:
    metadata = benchmark["metadata"] or {}
    recommended = metadata.get("recommended_task_set")
    return [
        {"name": name, "task_count": len(names), "recommended": name == recommended}
        for name, names in sorted((metadata.get("task_sets") or {}).items())
    ]


def benchmark_summary(conn: Connection, row: dict[str, Any]) -> dict[str, Any]:
    last = (
        conn.execute(
            select(t.runs.c.name, t.runs.c.status, t.runs.c.created_at)
            .where(t.runs.c.benchmark_id == row["id"])
            .order_by(t.runs.c.seq.desc())
            .limit(1)
        )
        .mappings()
        .first()
    )
    counts = conn.execute(
        select(func.count(), func.count().filter(t.runs.c.status == RUNNING)).where(
            t.runs.c.benchmark_id == row["id"]
        )
    ).one()
    ready = row["status"] == "ready"
    body: dict[str, Any] = {
        "id": row["id"],
        "name": row["name"],
        "source_type": row["source_type"],
        "source_ref": row["source_ref"],
        "task_count": int(row["task_count"] or 0) if ready else int(row["total"] or 0),
        "category_count": len(_categories(conn, row)) if ready else 0,
        "task_sets": _task_sets(row) if ready else [],
        "description": (row["metadata"] or {}).get("description") or "",
        "sync_status": row["status"],
        "synced_task_count": int(row["synced"] or 0),
        "hosted": bool(row["hosted"]),
        "version": row["version"],
        "digest": row["digest"],
        "source_commit": (row["source"] or {}).get("resolved_commit"),
        "run_count": int(counts[0]),
        "running_count": int(counts[1]),
        "created_at": row["added_at"],
        "creator_name": row["added_by"],
    }
    if row["sync_error"]:
        body["sync_error"] = row["sync_error"]
    if last:
        body.update(
            last_run_at=last["created_at"], last_run_status=last["status"], last_run_name=last["name"]
        )
    return body


def list_benchmarks(store: EventStore, scope: Scope, limit: int, offset: int) -> dict[str, Any]:
    where = and_(t.benchmarks.c.workspace_id == scope.workspace_id, t.benchmarks.c.removed.is_(False))
    with store.read_engine.connect() as conn:
        total = conn.execute(select(func.count()).select_from(t.benchmarks).where(where)).scalar_one()
        rows = (
            conn.execute(
                select(t.benchmarks)
                .where(where)
                .order_by(t.benchmarks.c.added_at, t.benchmarks.c.id)
                .limit(limit)
                .offset(offset)
            )
            .mappings()
            .all()
        )
        items = [benchmark_summary(conn, dict(r)) for r in rows]
    return page("benchmarks", items, total, limit, offset)


def page(key: str, items: list[Any], total: int, limit: int, offset: int) -> dict[str, Any]:
    more = offset + len(items) < total
    return {
        key: items,
        "total_count": total,
        "has_more": more,
        "next_offset": offset + len(items) if more else None,
    }


def benchmark_detail(store: EventStore, scope: Scope, key: str) -> dict[str, Any]:
    row = find_benchmark(store, scope, key)
    metadata = row["metadata"] or {}
    with store.read_engine.connect() as conn:
        body = benchmark_summary(conn, row)
        body["categories"] = _categories(conn, row) if row["status"] == "ready" else []
        tasks = (
            conn.execute(
                select(t.benchmark_tasks)
                .where(
                    t.benchmark_tasks.c.benchmark_id == row["id"],
                    t.benchmark_tasks.c.sync_id == row["ready_sync_id"],
                )
                .order_by(t.benchmark_tasks.c.ordinal)
            )
            .mappings()
            .all()
        )
        exclusions = (
            conn.execute(
                select(t.benchmark_exclusions)
                .where(t.benchmark_exclusions.c.benchmark_id == row["id"])
                .order_by(t.benchmark_exclusions.c.excluded_at)
            )
            .mappings()
            .all()
        )
    excluded_now = {r["task"]: r["reason"] for r in exclusions if r["version"] == row["version"]}
    body["tasks"] = [
        {
            "name": r["name"],
            "category": r["category"],
            "difficulty": r["difficulty"],
            "tags": r["tags"] or [],
            "digest": r["digest"],
            # A task that cannot run (its reason names the file, field or ceiling); never scheduled.
            "invalid_reason": r["invalid_reason"],
            # Taken out of this version by a workspace admin: its attempts do not count for ranking.
            "excluded_reason": excluded_now.get(r["name"]),
        }
        for r in tasks
    ]
    body["excluded_tasks"] = [
        {
            "task": r["task"],
            "version": r["version"],
            "reason": r["reason"],
            "excluded_by": r["excluded_by"],
            "excluded_at": r["excluded_at"],
        }
        for r in exclusions
    ]
    body["invalid_task_count"] = sum(1 for r in tasks if r["invalid_reason"])
    body.update(
        runner_family="harbor",
        supports_harness=bool(metadata.get("supports_harness", True)),
        requires_harness=bool(metadata.get("requires_harness", False)),
        requires_judge_model=bool(metadata.get("requires_judge_model", False)),
        requires_judge_api_key=bool(metadata.get("requires_judge_api_key", False)),
        pass_threshold=float(metadata.get("pass_threshold", defaults.PASS_THRESHOLD)),
        verifier_integrity=metadata.get("verifier_integrity") or defaults.VERIFIER_INTEGRITY,
        scoring_conditions=benchmark_standard(metadata).model_dump(),
    )
    for key_name in ("judge_model_default", "default_harness"):
        if metadata.get(key_name):
            body[key_name] = metadata[key_name]
    return {"benchmark": body, "leaderboard": leaderboard_rows(store, row["id"])}
