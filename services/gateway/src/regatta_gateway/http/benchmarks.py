"""`/api/v1/benchmarks` and the default registry's datasets. Thin: decode, call one function, return."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Body, Query, Request, Response
from regatta_shared.rules.benchmark_status import PENDING
from regatta_shared.rules.ceilings import TaskFileBounds
from regatta_shared.security.source_policy import SourcePolicy
from starlette.concurrency import run_in_threadpool

from regatta_gateway.admission.default_registry import DefaultRegistry, browse
from regatta_gateway.commands import benchmarks as benchmark_commands
from regatta_gateway.commands.task_uploads import upload_tasks
from regatta_gateway.http.dependencies import Limit, Offset, ScopeDep, settle
from regatta_gateway.http.responses import JSONBytes
from regatta_gateway.queries import benchmarks as benchmark_queries
from regatta_gateway.queries import leaderboards as leaderboard_queries
from regatta_gateway.queries.grading import object_fetcher
from regatta_gateway.queries.task_browser import task_detail, task_list
from regatta_gateway.queries.task_history import task_history

router = APIRouter(prefix="/api/v1", tags=["v1"])


@router.get("/benchmarks")
def list_benchmarks(request: Request, s: ScopeDep, limit: Limit = 50, offset: Offset = 0) -> dict[str, Any]:
    return benchmark_queries.list_benchmarks(request.app.state.store, s, limit, offset)


@router.post("/benchmarks", status_code=201)
def add_benchmark(request: Request, s: ScopeDep, body: Annotated[dict[str, Any], Body()]) -> dict[str, Any]:
    policy = SourcePolicy.from_settings(request.app.state.settings)
    benchmark_id = benchmark_commands.add_benchmark(
        request.app.state.store, s, body, policy, default_registry=default_registry(request)
    )
    settle(request)
    return {"id": benchmark_id, "sync_status": PENDING}


@router.post("/benchmarks/uploads", status_code=201)
async def upload_benchmark(
    request: Request, s: ScopeDep, name: Annotated[str | None, Query(max_length=200)] = None
) -> dict[str, Any]:
    """A tar.gz of a task folder (or a folder of tasks) as the body: a scratch benchmark of the workspace."""
    state = request.app.state
    bounds = TaskFileBounds.from_settings(state.settings)
    uploaded = await upload_tasks(
        state.store,
        state.tasks,
        s,
        request.stream(),
        bounds,
        name,
        request.headers.get("content-type"),
        request.headers.get("content-length"),
        state.settings.data_dir / "uploads",
    )
    await run_in_threadpool(settle, request)
    return {**uploaded, "sync_status": PENDING}


@router.get("/registry/datasets")
def registry_datasets(
    request: Request,
    s: ScopeDep,
    q: Annotated[str, Query(max_length=200)] = "",
    limit: Limit = 50,
    offset: Offset = 0,
) -> dict[str, Any]:
    return browse(default_registry(request), q, limit, offset)


def default_registry(request: Request) -> DefaultRegistry:
    """One per app, made on first use: its cached dataset list is shared by every request."""
    state = request.app.state
    if getattr(state, "default_registry", None) is None:
        state.default_registry = DefaultRegistry.from_settings(state.settings)
    return state.default_registry


@router.get("/benchmarks/{key}")
def show_benchmark(request: Request, s: ScopeDep, key: str) -> dict[str, Any]:
    return benchmark_queries.benchmark_detail(request.app.state.store, s, key)


@router.post("/benchmarks/{key}/sync", status_code=202)
def sync_benchmark(request: Request, s: ScopeDep, key: str) -> dict[str, Any]:
    sync_id = benchmark_commands.request_sync(request.app.state.store, s, key)
    settle(request)
    return {"sync_id": sync_id, "sync_status": PENDING}


@router.delete("/benchmarks/{key}", status_code=204)
def remove_benchmark(request: Request, s: ScopeDep, key: str) -> Response:
    benchmark_commands.remove_benchmark(request.app.state.store, s, key)
    settle(request)
    return Response(status_code=204)


@router.post("/benchmarks/{key}/exclusions", status_code=201)
def exclude_task(
    request: Request, s: ScopeDep, key: str, body: Annotated[dict[str, Any], Body()]
) -> dict[str, Any]:
    """Exclude a broken task from a benchmark version, with a reason (workspace admins; 403 otherwise)."""
    excluded = benchmark_commands.exclude_task(request.app.state.store, s, key, body)
    settle(request)
    return excluded


@router.get("/benchmarks/{key}/task-history")
def show_task_history(
    request: Request,
    s: ScopeDep,
    key: str,
    task: Annotated[str, Query(max_length=1000)] = "",
    limit: Limit = 50,
    offset: Offset = 0,
) -> dict[str, Any]:
    return task_history(request.app.state.store, s, key, task, limit, offset)


@router.get("/benchmarks/{key}/tasks")
def list_tasks(
    request: Request,
    s: ScopeDep,
    key: str,
    search: Annotated[str, Query(max_length=1000)] = "",
    limit: Limit = 50,
    offset: Offset = 0,
) -> dict[str, Any]:
    return task_list(request.app.state.store, s, key, search, limit, offset)


@router.get("/benchmarks/{key}/tasks/{name:path}")
async def show_task(request: Request, s: ScopeDep, key: str, name: str) -> dict[str, Any]:
    state = request.app.state
    bounds = TaskFileBounds.from_settings(state.settings)
    return await task_detail(state.store, object_fetcher(state.tasks), bounds, s, key, name)


@router.get("/benchmarks/{key}/leaderboard", response_class=JSONBytes)
def leaderboard(request: Request, s: ScopeDep, key: str, sort: str = "pass_at_1") -> JSONBytes:
    store = request.app.state.store
    benchmark = benchmark_queries.find_benchmark(store, s, key)
    return JSONBytes(leaderboard_queries.leaderboard_body(store, benchmark["id"], sort))
