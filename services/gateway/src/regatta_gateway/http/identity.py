"""`/api/v1` identity routes: API tokens, workspaces, members. Thin: decode, call one function, return."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Body, Header, Query, Request, Response

from regatta_gateway.authentication import authenticate, resolve_scope
from regatta_gateway.commands import identity
from regatta_gateway.commands import workspace_handlers as workspaces
from regatta_gateway.http.benchmarks import default_registry
from regatta_gateway.http.dependencies import ScopeDep, settle
from regatta_gateway.principals import Scope
from regatta_gateway.queries.members import member_list, user_workspaces

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
    state = request.app.state
    created = workspaces.create_workspace(state.store, state.settings, s, body, default_registry(request))
    settle(request)
    return created


def _scope_of(request: Request, key: str, authorization: str | None) -> Scope:
    store = request.app.state.store
    return resolve_scope(store, authenticate(store, authorization), key)


@router.patch("/workspaces/{key}")
def rename_workspace(
    request: Request, key: str, body: JsonBody, authorization: Annotated[str | None, Header()] = None
) -> dict[str, Any]:
    renamed = workspaces.rename_workspace(
        request.app.state.store, _scope_of(request, key, authorization), body
    )
    settle(request)
    return renamed


@router.delete("/workspaces/{key}")
def delete_workspace(
    request: Request,
    key: str,
    confirm: Annotated[str | None, Query(max_length=200)] = None,
    authorization: Annotated[str | None, Header()] = None,
) -> dict[str, Any]:
    scope = _scope_of(request, key, authorization)
    deleted = workspaces.delete_workspace(request.app.state.store, scope, confirm)
    settle(request)
    return deleted


@router.delete("/workspaces/{key}/members/{user_id}", status_code=204)
def remove_member(
    request: Request, key: str, user_id: str, authorization: Annotated[str | None, Header()] = None
) -> Response:
    workspaces.remove_member(request.app.state.store, _scope_of(request, key, authorization), user_id)
    settle(request)
    return Response(status_code=204)


@router.patch("/workspaces/{key}/members/{user_id}")
def change_role(
    request: Request,
    key: str,
    user_id: str,
    body: JsonBody,
    authorization: Annotated[str | None, Header()] = None,
) -> dict[str, Any]:
    scope = _scope_of(request, key, authorization)
    changed = workspaces.change_role(request.app.state.store, scope, user_id, body)
    settle(request)
    return changed


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
    scope = _scope_of(request, key, authorization)
    return {
        "workspace_id": scope.workspace_id,
        "members": member_list(request.app.state.store, scope.workspace_id),
    }


@router.post("/workspaces/{key}/members", status_code=201)
def add_member(
    request: Request, key: str, body: JsonBody, authorization: Annotated[str | None, Header()] = None
) -> dict[str, Any]:
    store = request.app.state.store
    scope = resolve_scope(store, authenticate(store, authorization), key)
    added = identity.add_member(store, scope, body)
    settle(request)
    return added
