"""`/api/cli`: the REST contract of the Osmosis CLI 0.3.8 (docs: osmosis-cli-contract.md §2-§4).

Routes are thin: decode, call one function, return. Path parameters arrive percent-encoded (see
cli_scope.RawCliPaths) and are decoded with `segment`. Every error is a flat body (errors.Refused).
"""

from __future__ import annotations

import json
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Header, Request, Response
from starlette.concurrency import run_in_threadpool

from regatta_gateway.authentication import authenticate
from regatta_gateway.commands import runs as run_commands
from regatta_gateway.errors import Invalid, NotFound
from regatta_gateway.http.dependencies import settle
from regatta_gateway.http.osmosis import shapes as cli_shapes
from regatta_gateway.http.osmosis.scope import cli_scope, segment, verify
from regatta_gateway.principals import Scope
from regatta_gateway.queries import benchmarks as benchmark_queries
from regatta_gateway.queries import downloads, run_activity
from regatta_gateway.queries import runs as run_queries
from regatta_gateway.queries.run_detail import run_detail
from regatta_gateway.secrets import store as secret_store

router = APIRouter(prefix="/api/cli", tags=["osmosis-cli"])


def scope(
    request: Request,
    authorization: Annotated[str | None, Header()] = None,
    x_osmosis_workspace: Annotated[str | None, Header()] = None,
    x_osmosis_git: Annotated[str | None, Header()] = None,
) -> Scope:
    return cli_scope(request.app.state.store, authorization, x_osmosis_workspace, x_osmosis_git)


CliScope = Annotated[Scope, Depends(scope)]


def number(raw: str | None, name: str, default: int, low: int, high: int | None = None) -> int:
    if raw is None or raw == "":
        return default
    try:
        value = int(raw)
    except ValueError:
        value = low - 1
    if value < low or (high is not None and value > high):
        bounds = f"{low}..{high}" if high is not None else f">= {low}"
        raise Invalid(f"{name} must be an integer in {bounds}", code="VALIDATION", field=name)
    return value


def json_object(raw: bytes) -> dict[str, Any]:
    try:
        body = json.loads(raw or b"{}")
    except (json.JSONDecodeError, UnicodeDecodeError):
        body = None
    if not isinstance(body, dict):
        raise Invalid("The request body must be a JSON object", code="VALIDATION", field="(body)")
    return body


def base_url(request: Request) -> str:
    return request.app.state.settings.public_url or str(request.base_url)


@router.get("/verify")
def whoami(
    request: Request,
    authorization: Annotated[str | None, Header()] = None,
    x_osmosis_git: Annotated[str | None, Header()] = None,
) -> dict[str, Any]:
    return verify(request.app.state.store, authorization, x_osmosis_git)


@router.get("/benchmarks")
def list_benchmarks(
    request: Request, s: CliScope, limit: str | None = None, offset: str | None = None
) -> dict[str, Any]:
    page = benchmark_queries.list_benchmarks(
        request.app.state.store, s, number(limit, "limit", 50, 1, 50), number(offset, "offset", 0, 0)
    )
    return cli_shapes.benchmark_page(page)


@router.get("/benchmarks/{key}")
def show_benchmark(request: Request, s: CliScope, key: str) -> dict[str, Any]:
    return cli_shapes.benchmark_detail(
        benchmark_queries.benchmark_detail(request.app.state.store, s, segment(key))
    )


@router.get("/benchmark-runs")
def list_runs(
    request: Request,
    s: CliScope,
    limit: str | None = None,
    offset: str | None = None,
    benchmark: str | None = None,
) -> dict[str, Any]:
    page = run_queries.list_runs(
        request.app.state.store,
        s,
        number(limit, "limit", 50, 1, 50),
        number(offset, "offset", 0, 0),
        benchmark or None,
    )
    return cli_shapes.run_page(page)


@router.post("/benchmark-runs", status_code=201)
async def submit_run(request: Request, s: CliScope) -> dict[str, Any]:
    raw = await request.body()

    def submit() -> dict[str, Any]:
        parsed = run_commands.parse_submission(raw, "application/json")
        state = request.app.state
        created = run_commands.submit_run(state.store, s, parsed, state.vault, state.hosted_models)
        settle(request)
        return created

    return await run_in_threadpool(submit)


@router.get("/benchmark-runs/{key}")
def show_run(request: Request, s: CliScope, key: str) -> dict[str, Any]:
    store = request.app.state.store
    return cli_shapes.run_detail(store, run_detail(store, s, segment(key)))


@router.get("/benchmark-runs/{key}/logs")
def run_logs(
    request: Request,
    s: CliScope,
    key: str,
    limit: str | None = None,
    direction: str | None = None,
    cursor: str | None = None,
) -> dict[str, Any]:
    if direction not in (None, "", "older"):
        raise Invalid("direction must be 'older'", code="VALIDATION", field="direction")
    size = number(limit, "limit", 50, 1, 200)
    return run_activity.run_logs(request.app.state.store, s, segment(key), size, cursor or None)


@router.post("/benchmark-runs/{key}/stop", status_code=202)
def stop_run(request: Request, s: CliScope, key: str) -> dict[str, Any]:
    run = benchmark_queries.find_run(request.app.state.store, s, segment(key))
    run_commands.stop_run(request.app.state.store, s, run["id"])
    settle(request)
    return {"id": run["id"], "status": "stopping"}


@router.get("/benchmark-runs/{key}/outputs/manifest")
def output_manifest(request: Request, s: CliScope, key: str, types: str | None = None) -> dict[str, Any]:
    body, _version = downloads.manifest(
        request.app.state.store, s, segment(key), downloads.parse_types(types)
    )
    return body


@router.post("/benchmark-runs/{key}/outputs/download-urls")
async def output_urls(request: Request, s: CliScope, key: str) -> dict[str, Any]:
    body = json_object(await request.body())
    items = body.get("items", body.get("files"))
    return await run_in_threadpool(
        downloads.signed_urls,
        request.app.state.store,
        s,
        segment(key),
        items,
        base_url(request),
        request.app.state.keys.url_signing,
    )


@router.get("/environment-secrets")
def list_secrets(
    request: Request,
    s: CliScope,
    limit: str | None = None,
    offset: str | None = None,
    scope: str | None = None,
) -> dict[str, Any]:
    return secret_store.list_secrets(
        request.app.state.store,
        s,
        scope or "all",
        number(limit, "limit", 50, 1, 50),
        number(offset, "offset", 0, 0),
    )


@router.post("/environment-secrets")
async def set_secret(request: Request, s: CliScope) -> dict[str, Any]:
    body = json_object(await request.body())
    name, value, kind = secret_store.validate_secret(
        body.get("name"), body.get("value"), body.get("scope", "user")
    )

    def write() -> dict[str, Any]:
        secret_id = secret_store.set_secret(request.app.state.vault, s, name, value, kind)
        settle(request)
        return secret_store.find_secret(request.app.state.store, s, secret_id)

    return await run_in_threadpool(write)


@router.delete("/environment-secrets", status_code=204)
async def delete_secret(request: Request, s: CliScope) -> Response:
    body = json_object(await request.body())
    name, _, kind = secret_store.validate_secret(
        body.get("name"), None, body.get("scope", "user"), with_value=False
    )

    def remove() -> None:
        secret_store.delete_secret(request.app.state.vault, s, name, kind)
        settle(request)

    await run_in_threadpool(remove)
    return Response(status_code=204)


@router.api_route("/{rest:path}", methods=["GET", "POST", "PUT", "PATCH", "DELETE"], include_in_schema=False)
def unknown_route(request: Request, rest: str, authorization: Annotated[str | None, Header()] = None) -> None:
    # Authenticated like every other route: a revoked token learns nothing, not even which routes exist.
    authenticate(request.app.state.store, authorization)
    raise NotFound(f"No such route: /api/cli/{rest}", code="NOT_FOUND")
