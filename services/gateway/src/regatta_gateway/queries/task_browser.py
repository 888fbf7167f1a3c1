"""The task browser's reads: a benchmark's tasks (searched, paged, each with what it asks for and whether it
can count), and one task: its metadata, its files from the task object store, and its results by agent.
`GET /api/v1/benchmarks/{key}/tasks[/{name}]`, the benchmark page's task list and the task page read them.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

from regatta_shared.eventstore import EventStore
from regatta_shared.rules.ceilings import TaskFileBounds
from sqlalchemy import Connection, func, or_, select

from regatta_gateway.errors import Invalid, NotFound
from regatta_gateway.principals import Scope
from regatta_gateway.queries.benchmarks import CONTROL, find_benchmark, page
from regatta_gateway.queries.task_files import TaskFilesUnreadable, read_task_files
from regatta_gateway.queries.task_history import check_task_name
from regatta_gateway.queries.task_results import results_by_agent
from regatta_gateway.readmodels import tables as t

SEARCH_MAX = 200
Fetch = Callable[[str], Awaitable[bytes | None]]


def check_search(search: str) -> str:
    if len(search) > SEARCH_MAX or CONTROL.search(search):
        raise Invalid(
            f"search must be at most {SEARCH_MAX} characters without control characters",
            code="VALIDATION",
            field="search",
        )
    return search.strip()


def task_list(
    store: EventStore, scope: Scope, key: str, search: str, limit: int, offset: int
) -> dict[str, Any]:
    """The ready version's tasks in the benchmark's order; `search` matches name or category, any case."""
    benchmark = find_benchmark(store, scope, key)
    search = check_search(search)
    c = t.benchmark_tasks.c
    where = [c.benchmark_id == benchmark["id"], c.sync_id == benchmark["ready_sync_id"]]
    if search:
        pattern = "%" + search.lower().replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "%"
        where.append(
            or_(
                func.lower(c.name).like(pattern, escape="\\"),
                func.lower(c.category).like(pattern, escape="\\"),
            )
        )
    with store.read_engine.connect() as conn:
        total = conn.execute(select(func.count()).select_from(t.benchmark_tasks).where(*where)).scalar_one()
        rows = (
            conn.execute(
                select(t.benchmark_tasks).where(*where).order_by(c.ordinal).limit(limit).offset(offset)
            )
            .mappings()
            .all()
        )
        excluded = _exclusions(conn, benchmark, [r["name"] for r in rows])
    tasks = [_task(row, excluded.get(row["name"])) for row in rows]
    return {
        "benchmark_id": benchmark["id"],
        "benchmark_name": benchmark["name"],
        "version": benchmark["version"],
        "search": search,
        **page("tasks", tasks, total, limit, offset),
    }


async def task_detail(
    store: EventStore, fetch: Fetch, bounds: TaskFileBounds, scope: Scope, key: str, name: str
) -> dict[str, Any]:
    """One task of the ready version: metadata, validity, files (solution/ left out for a member when the
    benchmark hides solutions) and its results by agent across the workspace's runs. The reads and the
    unpacking run in worker threads: a task's archive may take a while to walk."""
    body, digest = await asyncio.to_thread(_task_body, store, scope, key, name)
    data = await fetch(digest) if digest else None
    if data is None:
        body["files_error"] = "the task's archive is not in the task store"
        return body
    try:
        files = await asyncio.to_thread(read_task_files, data, bounds, name)
    except TaskFilesUnreadable as error:
        body["files_error"] = str(error)
        return body
    shown = [f for f in files if not (body["solutions_hidden"] and f.section == "solution")]
    body["files"] = [f.as_dict() for f in shown]
    instruction = next((f for f in shown if f.section == "instruction"), None)
    body["instruction"] = instruction.text if instruction else None
    return body


def _task_body(store: EventStore, scope: Scope, key: str, name: str) -> tuple[dict[str, Any], str | None]:
    benchmark = find_benchmark(store, scope, key)
    check_task_name(name, "name")
    c = t.benchmark_tasks.c
    with store.read_engine.connect() as conn:
        row = (
            conn.execute(
                select(t.benchmark_tasks).where(
                    c.benchmark_id == benchmark["id"], c.sync_id == benchmark["ready_sync_id"], c.name == name
                )
            )
            .mappings()
            .first()
        )
        excluded = _exclusions(conn, benchmark, [name]) if row else {}
    if row is None:
        raise NotFound(
            f"Benchmark {benchmark['name']!r} has no task {name[:100]!r}", code="NOT_FOUND", field="name"
        )
    hidden = not (benchmark["metadata"] or {}).get("show_solutions", True)
    body: dict[str, Any] = {
        "benchmark_id": benchmark["id"],
        "benchmark_name": benchmark["name"],
        "version": benchmark["version"],
        "task": _task(row, excluded.get(name)),
        "solutions_hidden": hidden and not scope.is_admin,
        "files_error": None,
        "instruction": None,
        "files": [],
        "results_by_agent": results_by_agent(store, scope, benchmark["id"], name),
    }
    return body, row["digest"]


def _exclusions(conn: Connection, benchmark: dict[str, Any], names: list[str]) -> dict[str, str]:
    e = t.benchmark_exclusions.c
    rows = conn.execute(
        select(e.task, e.reason).where(
            e.benchmark_id == benchmark["id"], e.version == benchmark["version"], e.task.in_(names)
        )
    )
    return {task: reason or "" for task, reason in rows}


def _task(row: Any, excluded_reason: str | None) -> dict[str, Any]:
    resources = row["resources"] or {}
    if row["invalid_reason"]:
        validity, reason = "invalid", row["invalid_reason"]
    elif excluded_reason is not None:
        validity, reason = "excluded", excluded_reason
    else:
        validity, reason = "valid", None
    return {
        "name": row["name"],
        "category": row["category"],
        "difficulty": row["difficulty"],
        "tags": row["tags"] or [],
        "digest": row["digest"],
        "resources": {
            "cpus": resources.get("cpus"),
            "memory_mb": resources.get("memory_mb"),
            "storage_mb": resources.get("storage_mb"),
            "agent_timeout_sec": resources.get("agent_timeout_sec"),
            "verifier_timeout_sec": resources.get("verifier_timeout_sec"),
        },
        "validity": validity,
        "validity_reason": reason,
    }
