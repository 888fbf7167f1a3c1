"""`/api/v1/secrets`: names and metadata only; values are write-only. Thin routes."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Body, Request, Response

from regatta_gateway.http.dependencies import Limit, Offset, ScopeDep, settle
from regatta_gateway.secrets import store as secret_store

router = APIRouter(prefix="/api/v1", tags=["v1"])


@router.get("/secrets")
def list_secrets(
    request: Request, s: ScopeDep, scope: str = "all", limit: Limit = 50, offset: Offset = 0
) -> dict[str, Any]:
    return secret_store.list_secrets(request.app.state.store, s, scope, limit, offset)


@router.post("/secrets", status_code=201)
def set_secret(request: Request, s: ScopeDep, body: Annotated[dict[str, Any], Body()]) -> dict[str, Any]:
    name, value, kind = secret_store.validate_secret(
        body.get("name"), body.get("value"), body.get("scope", "user")
    )
    secret_id = secret_store.set_secret(request.app.state.vault, s, name, value, kind)
    settle(request)
    return secret_store.find_secret(request.app.state.store, s, secret_id)


@router.delete("/secrets", status_code=204)
def delete_secret(
    request: Request,
    s: ScopeDep,
    body: Annotated[dict[str, Any] | None, Body()] = None,
    name: str | None = None,
    scope: str | None = None,
) -> Response:
    """The target comes from a JSON body, as the CLI sends it, or from `?name=&scope=`."""
    body = body or {}
    checked, _, kind = secret_store.validate_secret(
        body.get("name", name), None, body.get("scope", scope or "user"), with_value=False
    )
    secret_store.delete_secret(request.app.state.vault, s, checked, kind)
    settle(request)
    return Response(status_code=204)
