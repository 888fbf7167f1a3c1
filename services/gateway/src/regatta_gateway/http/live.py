"""Server-sent event streams of a run's progress, a running attempt's output and a benchmark's sync.
Thin routes."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import StreamingResponse
from regatta_shared.messaging.live import live_subject, watch_subject

from regatta_gateway.errors import NotFound
from regatta_gateway.http.dependencies import ScopeDep
from regatta_gateway.queries import benchmarks as benchmark_queries
from regatta_gateway.queries.attempt_live import attempt_events
from regatta_gateway.queries.live import TERMINAL_RUN, TERMINAL_SYNC, changes
from regatta_gateway.queries.run_activity import find_attempt
from regatta_gateway.queries.run_detail import run_detail

router = APIRouter(prefix="/api/v1", tags=["operations"])


def _sse(stream: Any) -> StreamingResponse:
    return StreamingResponse(stream, media_type="text/event-stream", headers={"Cache-Control": "no-cache"})


@router.get("/runs/{key}/stream", response_class=StreamingResponse)
def stream_run(request: Request, s: ScopeDep, key: str) -> StreamingResponse:
    store = request.app.state.store
    run_id = benchmark_queries.find_run(store, s, key)["id"]

    def read() -> dict[str, Any]:
        detail = run_detail(store, s, run_id)
        return {
            "status": detail["benchmark_run"]["status"],
            "progress": detail["progress"],
            "totals": detail["totals"],
            "agent_metrics": detail["agent_metrics"],
        }

    return _sse(changes(read, lambda snap: snap["status"] in TERMINAL_RUN, "progress"))


@router.get("/benchmarks/{key}/stream", response_class=StreamingResponse)
def stream_sync(request: Request, s: ScopeDep, key: str) -> StreamingResponse:
    store = request.app.state.store
    benchmark_id = benchmark_queries.find_benchmark(store, s, key)["id"]

    def read() -> dict[str, Any]:
        row = benchmark_queries.find_benchmark(store, s, benchmark_id)
        return {
            "sync_status": row["status"],
            "synced_task_count": int(row["synced"] or 0),
            "total": int(row["total"] or 0),
            "task_count": row["task_count"],
            "sync_error": row["sync_error"],
        }

    return _sse(changes(read, lambda snap: snap["sync_status"] in TERMINAL_SYNC, "sync"))


@router.get("/runs/{key}/attempts/{attempt_id}/live", response_class=StreamingResponse)
def stream_attempt(request: Request, s: ScopeDep, key: str, attempt_id: str) -> StreamingResponse:
    store = request.app.state.store
    attempt = find_attempt(store, s, key, attempt_id)
    try:
        subject = live_subject(attempt["run_id"], attempt["attempt_id"])
    except ValueError as error:
        raise NotFound(f"Attempt {attempt_id[:80]!r} not found", code="NOT_FOUND") from error

    def read() -> dict[str, Any]:
        found = find_attempt(store, s, attempt["run_id"], attempt["attempt_id"])
        return {k: found[k] for k in ("status", "outcome", "started_at", "finished_at", "try_number")}

    watch = watch_subject(attempt["run_id"], attempt["attempt_id"])
    return _sse(attempt_events(request.app.state.nc, subject, read, watch=watch))
