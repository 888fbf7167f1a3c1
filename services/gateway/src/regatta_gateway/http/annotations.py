"""`/api/v1/runs/{key}/attempts/{attempt_id}/labels`: put a label on an attempt, take it off. Thin routes;
the labels themselves are listed with the attempts (GET /runs/{key}/attempts, `?label=` filters)."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Body, Request
from fastapi.responses import Response

from regatta_gateway.commands import annotations
from regatta_gateway.http.dependencies import ScopeDep, settle

router = APIRouter(prefix="/api/v1", tags=["v1"])


@router.post("/runs/{key}/attempts/{attempt_id}/labels", status_code=201)
def label_attempt(
    request: Request, s: ScopeDep, key: str, attempt_id: str, body: Annotated[dict[str, Any], Body()]
) -> dict[str, Any]:
    """Body: `{"label": "flaky task", "note": "why"}`; the note is optional."""
    labelled = annotations.label_attempt(
        request.app.state.store, s, key, attempt_id, body.get("label"), body.get("note")
    )
    settle(request)
    return labelled


@router.delete("/runs/{key}/attempts/{attempt_id}/labels/{label_id}", status_code=204)
def remove_label(request: Request, s: ScopeDep, key: str, attempt_id: str, label_id: str) -> Response:
    annotations.remove_label(request.app.state.store, s, key, attempt_id, label_id)
    settle(request)
    return Response(status_code=204)
