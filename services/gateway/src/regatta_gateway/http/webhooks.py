"""`/api/v1/webhooks`: registration, removal and each webhook's deliveries. Thin routes."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Body, Request, Response
from regatta_shared.security.outbound import OutboundPolicy

from regatta_gateway.http.dependencies import ScopeDep, settle
from regatta_gateway.notifications import registry

router = APIRouter(prefix="/api/v1", tags=["operations"])


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
