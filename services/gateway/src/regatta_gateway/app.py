"""The gateway process: FastAPI (REST, later the web UI) plus the projection runner of its read models."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from regatta_shared.eventstore import EventTooLarge
from regatta_shared.eventstore.projections import ProjectionRunner
from regatta_shared.messaging.nudge import wake_on_commit
from regatta_shared.rules.hosted_models import HostedModelsError
from regatta_shared.rules.hosted_models import parse as parse_hosted_models
from regatta_shared.settings import Settings, load_settings
from regatta_shared.system.runtime import Service
from regatta_shared.system.service import configure_logging
from sqlalchemy import text

from regatta_gateway.admission.default_registry import DefaultRegistry
from regatta_gateway.commands.bootstrap import bootstrap
from regatta_gateway.commands.hosted import add_hosted_benchmarks, all_workspaces
from regatta_gateway.errors import Invalid, Refused, TooLarge
from regatta_gateway.http.annotations import router as v1_annotations
from regatta_gateway.http.audit import router as v1_audit
from regatta_gateway.http.benchmarks import router as v1_benchmarks
from regatta_gateway.http.budget import router as v1_budget
from regatta_gateway.http.catalogue import router as v1_catalogue
from regatta_gateway.http.contracts import router as contracts
from regatta_gateway.http.downloads import router as v1_downloads
from regatta_gateway.http.errors import request_error, response
from regatta_gateway.http.grading import router as v1_grading
from regatta_gateway.http.guards import RequestGuard
from regatta_gateway.http.identity import router as v1_identity
from regatta_gateway.http.live import router as v1_live
from regatta_gateway.http.osmosis.routes import router as cli
from regatta_gateway.http.osmosis.scope import RawCliPaths
from regatta_gateway.http.osmosis.signed_files import router as files
from regatta_gateway.http.rescoring import router as v1_rescoring
from regatta_gateway.http.runs import router as v1_runs
from regatta_gateway.http.secrets import router as v1_secrets
from regatta_gateway.http.webhooks import router as v1_webhooks
from regatta_gateway.operations import open_operations
from regatta_gateway.readmodels import ReadModels
from regatta_gateway.resources import open_resources
from regatta_gateway.throttle.failures import FailureThrottle
from regatta_gateway.throttle.middleware import AuthThrottle
from regatta_gateway.web import install as install_web_ui

log = logging.getLogger("regatta.gateway")


def create_app(settings: Settings | None = None) -> FastAPI:
    settings = settings or load_settings()
    # Checked before anything starts: a bad declaration stops the gateway, naming the field.
    hosted_models = parse_hosted_models(settings.hosted_models)

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        # The runtime every service runs in: NATS, the streams, the store, the loops and consumers
        # registered by `start_up`, and their stop in reverse order; /health is a route of this app.
        service = Service("gateway", settings, serve_health=False)
        await service.start(lambda service: start_up(app, service))
        try:
            yield
        finally:
            await service.stop()

    app = FastAPI(title="Regatta", version="0.1.0", lifespan=lifespan)
    app.state.hosted_models = hosted_models

    @app.exception_handler(Refused)
    async def _refused(_request: Request, error: Refused) -> JSONResponse:
        return response(error)

    @app.exception_handler(RequestValidationError)
    async def _invalid_request(_request: Request, error: RequestValidationError) -> JSONResponse:
        return response(request_error(error))

    @app.exception_handler(EventTooLarge)
    async def _too_large(_request: Request, error: EventTooLarge) -> JSONResponse:
        refusal = TooLarge(
            f"{error.field} is too large: the {error.event_type} it makes would be {error.size} bytes, "
            f"more than the event bus carries ({error.limit})",
            code="PAYLOAD_TOO_LARGE",
            field=error.field,
            max_bytes=error.limit,
        )
        return response(refusal)

    @app.exception_handler(UnicodeDecodeError)
    async def _undecodable(_request: Request, _error: UnicodeDecodeError) -> JSONResponse:
        return response(Invalid("The request body is not valid UTF-8", field="(body)"))

    @app.get("/health", tags=["ops"])
    def health(request: Request) -> dict[str, Any]:
        with request.app.state.store.read_engine.connect() as conn:
            # Events the relay stepped past (relay.py): no subscriber saw them; an operator should look.
            set_aside = conn.execute(text("SELECT count(*) FROM relay_set_aside")).scalar_one()
        return {"status": "ok", "relay_set_aside": set_aside}

    app.include_router(v1_benchmarks)
    app.include_router(v1_runs)
    app.include_router(v1_annotations)
    app.include_router(v1_catalogue)
    app.include_router(v1_identity)
    app.include_router(v1_secrets)
    app.include_router(v1_downloads)
    app.include_router(v1_grading)
    app.include_router(v1_budget)
    app.include_router(v1_webhooks)
    app.include_router(v1_audit)
    app.include_router(v1_live)
    app.include_router(v1_rescoring)
    app.include_router(contracts)
    app.include_router(cli)
    app.include_router(files)
    app.add_middleware(RawCliPaths)
    install_web_ui(app, settings.public_url)
    # Added last, so it is the outermost layer: hostile input is refused before anything else runs.
    app.add_middleware(RequestGuard, max_body_bytes=settings.max_body_bytes)
    # Outermost: a throttled guesser is refused before anything else, its body unread.
    app.state.auth_throttle = FailureThrottle(
        settings.auth_failure_burst, settings.auth_failures_per_minute / 60.0
    )
    app.add_middleware(AuthThrottle, throttle=app.state.auth_throttle)
    return app


async def start_up(app: FastAPI, service: Service) -> None:
    """Read models up to date before the first request; keys, vault and artifacts on `app.state`; the
    bootstrap admin and hosted benchmarks in place; then the projection loops (started by the service)."""
    store, settings = service.store, service.settings
    runner = ProjectionRunner(store, ReadModels())
    if runner.create_tables():
        await asyncio.to_thread(runner.rebuild)  # a new read-model schema (an upgrade)
    await asyncio.to_thread(runner.catch_up)
    app.state.store = store
    app.state.settings = settings
    app.state.projections = runner
    await open_resources(app, service)
    await open_operations(app, service)
    bootstrap(store, settings)
    await asyncio.to_thread(runner.catch_up)
    # One registry cache for the app: the hosted benchmarks' names and the Add Benchmark dialog share it.
    app.state.default_registry = DefaultRegistry.from_settings(settings)
    add_hosted_benchmarks(store, settings, all_workspaces(store), default_registry=app.state.default_registry)
    wake = asyncio.Event()
    await wake_on_commit(service.nc, wake)
    service.loop("projections", lambda stop: runner.run_forever(stop, max_idle_sleep=1.0, wake=wake))


def main() -> None:
    import uvicorn

    configure_logging("gateway")
    settings = load_settings()
    try:
        app = create_app(settings)
    except HostedModelsError as error:
        log.error("invalid configuration: %s", error)
        raise SystemExit(f"regatta gateway: invalid configuration: {error}") from None
    uvicorn.run(app, host=settings.gateway_host, port=settings.gateway_port, log_level="warning")
