"""`/api/v1` identity routes: API tokens, workspaces, members. Thin: decode, call one function, return."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Body, Header, Request, Response

from . import identity
from .api_v1 import ScopeDep, settle
from .auth import authenticate, member_list, resolve_scope, user_workspaces

router = APIRouter(prefix="/api/v1", tags=["v1"])
JsonBody = Annotated[dict[str, Any], Body()]


@router.get("/tokens")
def list_tokens(request: Request, s: ScopeDep) -> dict[str, Any]:
    return {"tokens": identity.list_tokens(request.app.state.store, s.principal)}


@router.post("/tokens", status_code=201)
def create_token(request: Request, s: ScopeDep, body: JsonBody) -> dict[str, Any]:
    created = identity.create_token(request.app.state.store, s, body)
    settle(request)
    return created


@router.delete("/tokens/{token_id}", status_code=204)
def revoke_token(request: Request, s: ScopeDep, token_id: str) -> Response:
    identity.revoke_token(request.app.state.store, s, token_id)
    settle(request)
    return Response(status_code=204)


@router.get("/workspaces")
def list_workspaces(request: Request, s: ScopeDep) -> dict[str, Any]:
    mine = user_workspaces(request.app.state.store, s.principal.user_id)
    return {"workspaces": [{**w, "current": w["id"] == s.workspace_id} for w in mine]}


@router.post("/workspaces", status_code=201)
def create_workspace(request: Request, s: ScopeDep, body: JsonBody) -> dict[str, Any]:
    created = identity.create_workspace(request.app.state.store, s, body)
    settle(request)
    return created


@router.get("/platform/admins")
def list_platform_admins(request: Request, s: ScopeDep) -> dict[str, Any]:
    return {"admins": identity.list_platform_admins(request.app.state.store, s)}


@router.post("/platform/admins", status_code=201)
def grant_platform_admin(request: Request, s: ScopeDep, body: JsonBody) -> dict[str, Any]:
    granted = identity.grant_platform_admin(request.app.state.store, s, body)
    settle(request)
    return granted


@router.get("/workspaces/{key}/members")
def list_members(
    request: Request, key: str, authorization: Annotated[str | None, Header()] = None
) -> dict[str, Any]:
    store = request.app.state.store
    scope = resolve_scope(store, authenticate(store, authorization), key)
    return {"workspace_id": scope.workspace_id, "members": member_list(store, scope.workspace_id)}


@router.post("/workspaces/{key}/members", status_code=201)
def add_member(
    request: Request, key: str, body: JsonBody, authorization: Annotated[str | None, Header()] = None
) -> dict[str, Any]:
    store = request.app.state.store
    scope = resolve_scope(store, authenticate(store, authorization), key)
    added = identity.add_member(store, scope, body)
    settle(request)
    return added
