"""`/api/v1/audit`: the workspace's audit log, filtered and paged. Thin route."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Query, Request

from regatta_gateway.http.dependencies import ScopeDep
from regatta_gateway.queries import audit

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
