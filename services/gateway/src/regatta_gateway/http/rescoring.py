"""`POST /api/v1/benchmarks/{key}/rescore` (platform administrators). Thin: decode, call one function,
return."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Body, Request

from regatta_gateway.commands import rescoring
from regatta_gateway.http.dependencies import ScopeDep, settle

router = APIRouter(prefix="/api/v1", tags=["v1"])


@router.post("/benchmarks/{key}/rescore", status_code=202)
def rescore_benchmark(
    request: Request, s: ScopeDep, key: str, body: Annotated[dict[str, Any] | None, Body()] = None
) -> dict[str, Any]:
    requested = rescoring.request_rescore(request.app.state.store, s, key, body or {})
    settle(request)
    return requested
