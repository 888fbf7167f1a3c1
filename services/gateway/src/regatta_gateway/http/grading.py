"""An attempt's grading and a run's artifacts as one zip. Thin routes: queries/grading.py and
queries/artifact_zip.py do the work."""

from __future__ import annotations

from typing import Any
from urllib.parse import quote

from fastapi import APIRouter, Request
from fastapi.responses import StreamingResponse
from starlette.concurrency import run_in_threadpool

from regatta_gateway.http.dependencies import ScopeDep
from regatta_gateway.queries import artifact_zip
from regatta_gateway.queries.grading import attempt_grading, grading_source, object_fetcher

router = APIRouter(prefix="/api/v1", tags=["v1"])


@router.get("/runs/{key}/attempts/{attempt_id}/grading")
async def attempt_grading_route(request: Request, s: ScopeDep, key: str, attempt_id: str) -> dict[str, Any]:
    """Rewards (each key once), the verifier's output as text and per-test results from its report."""
    state = request.app.state
    attempt, primary_key = await run_in_threadpool(grading_source, state.store, s, key, attempt_id)
    grading = await attempt_grading(object_fetcher(state.artifacts), attempt, primary_key)
    return {"run_id": attempt["run_id"], "attempt_id": attempt["attempt_id"], **grading}


@router.get("/runs/{key}/artifacts.zip", response_class=StreamingResponse)
async def artifacts_zip(request: Request, s: ScopeDep, key: str) -> StreamingResponse:
    """Every artifact of the run, streamed as one zip (bounded; 413 past the bounds)."""
    state = request.app.state
    run, files = await run_in_threadpool(artifact_zip.zip_plan, state.store, s, key)
    filename = artifact_zip.zip_name(f"{run['name']}-artifacts.zip").replace("/", "_").replace('"', "_")
    disposition = f'attachment; filename="{filename.encode("ascii", "replace").decode()}"; '
    disposition += f"filename*=UTF-8''{quote(filename, safe='')}"
    return StreamingResponse(
        artifact_zip.stream_zip(files, object_fetcher(state.artifacts)),
        media_type="application/zip",
        headers={"Content-Disposition": disposition, "Cache-Control": "no-store"},
    )
