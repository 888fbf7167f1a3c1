"""Regatta's own REST API, `/api/v1`. Routes are thin: authenticate, call one function, return."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from fastapi import APIRouter, Body, Depends, Header, Query, Request, Response
from regatta_shared.harnesses import HARNESSES
from regatta_shared.source_policy import SourcePolicy
from starlette.concurrency import run_in_threadpool

from . import commands, queries, run_queries
from .admission.default_registry import DefaultRegistry, browse
from .auth import Scope, authorize
from .cached_reads import JSONBytes, to_json

router = APIRouter(prefix="/api/v1", tags=["v1"])


def scope(
    request: Request,
    authorization: Annotated[str | None, Header()] = None,
    x_regatta_workspace: Annotated[str | None, Header()] = None,
) -> Scope:
    return authorize(request.app.state.store, authorization, x_regatta_workspace)


def settle(request: Request) -> None:
    """Read-your-writes: fold the events a command just appended before answering it."""
    request.app.state.projections.catch_up()
    ops = getattr(request.app.state, "ops_projections", None)
    if ops is not None:
        ops.catch_up()


ScopeDep = Annotated[Scope, Depends(scope)]
Limit = Annotated[int, Query(ge=1, le=200)]
# Bounded: a larger offset can only be a mistake and would overflow the database's integer.
Offset = Annotated[int, Query(ge=0, le=1_000_000_000)]


@router.get("/benchmarks")
def list_benchmarks(request: Request, s: ScopeDep, limit: Limit = 50, offset: Offset = 0) -> dict[str, Any]:
    return queries.list_benchmarks(request.app.state.store, s, limit, offset)


@router.post("/benchmarks", status_code=201)
def add_benchmark(request: Request, s: ScopeDep, body: Annotated[dict[str, Any], Body()]) -> dict[str, Any]:
    policy = SourcePolicy.from_settings(request.app.state.settings)
    benchmark_id = commands.add_benchmark(
        request.app.state.store, s, body, policy, default_registry=default_registry(request)
    )
    settle(request)
    return {"id": benchmark_id, "sync_status": "pending"}


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
        settings = state.settings
        state.default_registry = DefaultRegistry(
            settings.default_registry,
            SourcePolicy.from_settings(settings).outbound,
            settings.default_registry_cache_seconds,
        )
    return state.default_registry


@router.get("/benchmarks/{key}")
def show_benchmark(request: Request, s: ScopeDep, key: str) -> dict[str, Any]:
    return queries.benchmark_detail(request.app.state.store, s, key)


@router.post("/benchmarks/{key}/sync", status_code=202)
def sync_benchmark(request: Request, s: ScopeDep, key: str) -> dict[str, Any]:
    sync_id = commands.request_sync(request.app.state.store, s, key)
    settle(request)
    return {"sync_id": sync_id, "sync_status": "pending"}


@router.delete("/benchmarks/{key}", status_code=204)
def remove_benchmark(request: Request, s: ScopeDep, key: str) -> Response:
    commands.remove_benchmark(request.app.state.store, s, key)
    settle(request)
    return Response(status_code=204)


@router.get("/benchmarks/{key}/leaderboard", response_class=JSONBytes)
def leaderboard(request: Request, s: ScopeDep, key: str, sort: str = "pass_at_1") -> JSONBytes:
    store = request.app.state.store
    benchmark = queries.find_benchmark(store, s, key)
    return JSONBytes(queries.leaderboard_body(store, benchmark["id"], sort))


@router.get("/harnesses")
def harnesses(_s: ScopeDep) -> dict[str, Any]:
    return {"harnesses": [{"name": name, **info} for name, info in sorted(HARNESSES.items())]}


@router.get("/hosted-models")
def hosted_models(request: Request, _s: ScopeDep) -> dict[str, Any]:
    """The deployment's hosted models by name, with their LoRA adapters; never a key."""
    return {"hosted_models": [model.public() for model in request.app.state.hosted_models]}


@router.get("/runs")
def list_runs(
    request: Request,
    s: ScopeDep,
    limit: Limit = 50,
    offset: Offset = 0,
    benchmark: str | None = None,
    status: Literal["pending", "queued", "running", "finished", "failed", "stopped"] | None = None,
    submitter: Annotated[str | None, Query(min_length=1, max_length=300)] = None,
) -> dict[str, Any]:
    return run_queries.list_runs(
        request.app.state.store,
        s,
        limit,
        offset,
        benchmark,
        request.app.state.settings.gateway_url,
        status=status,
        submitter=submitter,
    )


@router.post(
    "/runs",
    status_code=201,
    openapi_extra={
        "requestBody": {
            "content": {
                "application/json": {"schema": {"type": "object"}},
                "application/toml": {"schema": {"type": "string"}},
            }
        }
    },
)
async def submit_run(request: Request, s: ScopeDep) -> dict[str, Any]:
    raw = await request.body()
    content_type = request.headers.get("content-type", "application/json")

    def submit() -> dict[str, Any]:
        state = request.app.state
        parsed = commands.parse_submission(raw, content_type)
        created = commands.submit_run(state.store, s, parsed, state.vault, state.hosted_models)
        settle(request)
        return created

    return await run_in_threadpool(submit)


# The run page's reads answer with orjson's bytes: FastAPI would walk the nested dict twice more
# (validation against `dict[str, Any]`, then pydantic's serialiser), a fifth of such a read's CPU.
@router.get("/runs/{key}", response_class=JSONBytes)
def show_run(request: Request, s: ScopeDep, key: str) -> JSONBytes:
    store, base_url = request.app.state.store, request.app.state.settings.gateway_url
    return JSONBytes(to_json(run_queries.run_detail(store, s, key, base_url)))


@router.get("/runs/{key}/attempts", response_class=JSONBytes)
def run_attempts(
    request: Request,
    s: ScopeDep,
    key: str,
    limit: Annotated[int | None, Query(ge=1, le=1000)] = None,
    offset: Offset = 0,
    task: str | None = None,
    agent_index: Annotated[int | None, Query(ge=0)] = None,
    outcome: Literal["passed", "failed", "errored", "cancelled"] | None = None,
) -> JSONBytes:
    """Every attempt by default; `limit`/`offset` page (adding `next_offset`), the others filter."""
    page = run_queries.attempts_page(
        request.app.state.store,
        s,
        key,
        limit=limit,
        offset=offset,
        task=task,
        agent_index=agent_index,
        outcome=outcome,
    )
    return JSONBytes(to_json(page))


@router.get("/runs/{key}/logs", response_class=JSONBytes)
def run_logs(
    request: Request, s: ScopeDep, key: str, limit: Limit = 50, cursor: str | None = None
) -> JSONBytes:
    return JSONBytes(to_json(run_queries.run_logs(request.app.state.store, s, key, limit, cursor)))


@router.post("/runs/{key}/stop", status_code=202)
def stop_run(request: Request, s: ScopeDep, key: str) -> dict[str, Any]:
    commands.stop_run(request.app.state.store, s, key)
    settle(request)
    return {"status": "stopping"}
