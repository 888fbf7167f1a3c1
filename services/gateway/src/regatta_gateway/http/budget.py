"""`/api/v1/workspace/budget`: the workspace's budget, spent and remaining. Thin routes."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Body, Request

from regatta_gateway.http.dependencies import ScopeDep, settle
from regatta_gateway.notifications import registry

router = APIRouter(prefix="/api/v1", tags=["operations"])


@router.get("/workspace/budget")
def get_budget(request: Request, s: ScopeDep) -> dict[str, Any]:
    return registry.budget_status(request.app.state.store, s.workspace_id)


@router.put("/workspace/budget")
def set_budget(request: Request, s: ScopeDep, body: Annotated[dict[str, Any], Body()]) -> dict[str, Any]:
    registry.set_budget(request.app.state.store, s, body)
    settle(request)
    return registry.budget_status(request.app.state.store, s.workspace_id)
