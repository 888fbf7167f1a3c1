"""`/api/v1` routes for operations: audit, budget, webhooks and live (SSE) streams. Thin routes."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Body, Query, Request, Response
from fastapi.responses import StreamingResponse
from regatta_shared.outbound import OutboundPolicy

from . import audit, queries, run_queries
from .api_v1 import ScopeDep, settle
from .live import TERMINAL_RUN, TERMINAL_SYNC, changes
from .notifications import registry

router = APIRouter(prefix="/api/v1", tags=["operations"])


@router.get("/audit")
def list_audit(
    request: Request,
    s: ScopeDep,
    actor: str | None = None,
    kind: str | None = None,
    since: str | None = None,
    until: str | None = None,
    limit: Annotated[int, Query(ge=1, le=500)] = 100,
    before: Annotated[int | None, Query(ge=1, le=2**62)] = None,
) -> dict[str, Any]:
    return audit.list_audit(
        request.app.state.store,
        s,
        actor=actor,
        kind=kind,
        since=since,
        until=until,
        limit=limit,
        before=before,
    )


@router.get("/workspace/budget")
def get_budget(request: Request, s: ScopeDep) -> dict[str, Any]:
    return registry.budget_status(request.app.state.store, s.workspace_id)


@router.put("/workspace/budget")
def set_budget(request: Request, s: ScopeDep, body: Annotated[dict[str, Any], Body()]) -> dict[str, Any]:
    registry.set_budget(request.app.state.store, s, body)
    settle(request)
    return registry.budget_status(request.app.state.store, s.workspace_id)


@router.get("/webhooks")
def list_webhooks(request: Request, s: ScopeDep) -> dict[str, Any]:
    return {"webhooks": registry.list_webhooks(request.app.state.store, s)}


@router.post("/webhooks", status_code=201)
def register_webhook(
    request: Request, s: ScopeDep, body: Annotated[dict[str, Any], Body()]
) -> dict[str, Any]:
    state = request.app.state
    outbound = OutboundPolicy.parse(state.settings.outbound_allow)
    created = registry.register_webhook(state.store, s, body, state.master_key, outbound)
    settle(request)
    return created


@router.delete("/webhooks/{webhook_id}", status_code=204)
def remove_webhook(request: Request, s: ScopeDep, webhook_id: str) -> Response:
    registry.remove_webhook(request.app.state.store, s, webhook_id)
    settle(request)
    return Response(status_code=204)


@router.get("/webhooks/{webhook_id}/deliveries")
def webhook_deliveries(request: Request, s: ScopeDep, webhook_id: str) -> dict[str, Any]:
    return {"deliveries": registry.delivery_log(request.app.state.store, s, webhook_id)}


def _sse(stream: Any) -> StreamingResponse:
    return StreamingResponse(stream, media_type="text/event-stream", headers={"Cache-Control": "no-cache"})


@router.get("/runs/{key}/stream", response_class=StreamingResponse)
def stream_run(request: Request, s: ScopeDep, key: str) -> StreamingResponse:
    store = request.app.state.store
    run_id = queries.find_run(store, s, key)["id"]

    def read() -> dict[str, Any]:
        detail = run_queries.run_detail(store, s, run_id)
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
    benchmark_id = queries.find_benchmark(store, s, key)["id"]

    def read() -> dict[str, Any]:
        row = queries.find_benchmark(store, s, benchmark_id)
        return {
            "sync_status": row["status"],
            "synced_task_count": int(row["synced"] or 0),
            "total": int(row["total"] or 0),
            "task_count": row["task_count"],
            "sync_error": row["sync_error"],
        }

    return _sse(changes(read, lambda snap: snap["sync_status"] in TERMINAL_SYNC, "sync"))
