"""`/api/v1/runs`: submit, list, show, attempts, logs, stop, re-run errored attempts. Thin: decode, call
one function, return."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from fastapi import APIRouter, Query, Request
from fastapi.responses import Response
from regatta_shared.rules.outcomes import Outcome
from regatta_shared.runs import INTEGRITY_FILTERS
from regatta_shared.runs.status import RunStatus
from starlette.concurrency import run_in_threadpool

from regatta_gateway.commands import annotations, run_preview
from regatta_gateway.commands import rerun as rerun_commands
from regatta_gateway.commands import runs as run_commands
from regatta_gateway.http.dependencies import Limit, Offset, ScopeDep, settle
from regatta_gateway.http.responses import JSONBytes
from regatta_gateway.queries import compare as compare_queries
from regatta_gateway.queries import run_activity
from regatta_gateway.queries import runs as run_queries
from regatta_gateway.queries.cached_reads import to_json
from regatta_gateway.queries.run_detail import run_detail

router = APIRouter(prefix="/api/v1", tags=["v1"])


@router.get("/runs")
def list_runs(
    request: Request,
    s: ScopeDep,
    limit: Limit = 50,
    offset: Offset = 0,
    benchmark: str | None = None,
    status: RunStatus | None = None,
    submitter: Annotated[str | None, Query(min_length=1, max_length=300)] = None,
) -> dict[str, Any]:
    return run_queries.list_runs(
        request.app.state.store,
        s,
        limit,
        offset,
        benchmark,
        request.app.state.settings.gateway_url,
        status=status,
        submitter=submitter,
    )


@router.post(
    "/runs",
    status_code=201,
    openapi_extra={
        "requestBody": {
            "content": {
                "application/json": {"schema": {"type": "object"}},
                "application/toml": {"schema": {"type": "string"}},
            }
        }
    },
)
async def submit_run(request: Request, s: ScopeDep) -> dict[str, Any]:
    raw = await request.body()
    content_type = request.headers.get("content-type", "application/json")

    def submit() -> dict[str, Any]:
        state = request.app.state
        parsed = run_commands.parse_submission(raw, content_type)
        created = run_commands.submit_run(state.store, s, parsed, state.vault, state.hosted_models)
        settle(request)
        return created

    return await run_in_threadpool(submit)


@router.post("/runs/preview")
async def preview_run(request: Request, s: ScopeDep) -> dict[str, Any]:
    """What submitting this body would schedule (the attempts it makes), recording nothing."""
    raw = await request.body()
    content_type = request.headers.get("content-type", "application/json")

    def preview() -> dict[str, Any]:
        parsed = run_commands.parse_submission(raw, content_type, run_preview.PreviewRequest)
        return run_preview.preview_run(request.app.state.store, s, parsed)

    return await run_in_threadpool(preview)


# The run page's reads answer with orjson's bytes: FastAPI would walk the nested dict twice more
# (validation against `dict[str, Any]`, then pydantic's serialiser), a large share of such a read's CPU.
@router.get("/runs/{key}", response_class=JSONBytes)
def show_run(request: Request, s: ScopeDep, key: str) -> JSONBytes:
    store, base_url = request.app.state.store, request.app.state.settings.gateway_url
    return JSONBytes(to_json(run_detail(store, s, key, base_url)))


@router.get("/runs/{key}/attempts", response_class=JSONBytes)
def run_attempts(
    request: Request,
    s: ScopeDep,
    key: str,
    limit: Annotated[int | None, Query(ge=1, le=1000)] = None,
    offset: Offset = 0,
    task: str | None = None,
    agent_index: Annotated[int | None, Query(ge=0)] = None,
    outcome: Outcome | None = None,
    label: Annotated[str | None, Query(min_length=1, max_length=annotations.LABEL_MAX)] = None,
    integrity: Annotated[
        str | None, Query(description=f"one of {', '.join(INTEGRITY_FILTERS)}", max_length=40)
    ] = None,
) -> JSONBytes:
    """Every attempt by default; `limit`/`offset` page (adding `next_offset`), the others filter."""
    page = run_activity.attempts_page(
        request.app.state.store,
        s,
        key,
        limit=limit,
        offset=offset,
        task=task,
        agent_index=agent_index,
        outcome=outcome,
        label=label,
        integrity=integrity,
    )
    return JSONBytes(to_json(page))


@router.get("/runs/{key}/attempts/{attempt_id}", response_class=JSONBytes)
def run_attempt(request: Request, s: ScopeDep, key: str, attempt_id: str) -> JSONBytes:
    """One attempt with its result (its integrity evidence under `result.integrity`) and labels."""
    return JSONBytes(to_json(run_activity.attempt_detail(request.app.state.store, s, key, attempt_id)))


@router.get("/runs/{key}/logs", response_class=JSONBytes)
def run_logs(
    request: Request, s: ScopeDep, key: str, limit: Limit = 50, cursor: str | None = None
) -> JSONBytes:
    return JSONBytes(to_json(run_activity.run_logs(request.app.state.store, s, key, limit, cursor)))


@router.post("/runs/{key}/stop", status_code=202)
def stop_run(request: Request, s: ScopeDep, key: str) -> dict[str, Any]:
    run_commands.stop_run(request.app.state.store, s, key)
    settle(request)
    return {"status": "stopping"}


@router.post("/runs/{key}/rerun-errored", status_code=202)
def rerun_errored(request: Request, s: ScopeDep, key: str) -> dict[str, Any]:
    """Run a finished run's errored attempts again (409, nothing recorded, when it has none or is not
    finished)."""
    accepted = rerun_commands.rerun_errored(request.app.state.store, s, key)
    settle(request)
    return accepted


Participant = Annotated[str, Query(min_length=3, max_length=compare_queries.PARTICIPANT_MAX)]


@router.get("/compare", response_model=None)
def compare(
    request: Request, s: ScopeDep, a: Participant, b: Participant, format: Literal["json", "csv"] = "json"
) -> JSONBytes | Response:
    """Participant `b` against `a` (`RUN:AGENT_INDEX` each), task by task; `format=csv` gives the rows."""
    result = compare_queries.compare(
        request.app.state.store,
        s,
        compare_queries.parse_participant(a, "a"),
        compare_queries.parse_participant(b, "b"),
    )
    if format == "csv":
        return Response(
            compare_queries.rows_csv(result),
            media_type="text/csv; charset=utf-8",
            headers={"Content-Disposition": 'attachment; filename="compare.csv"'},
        )
    return JSONBytes(to_json(result))
