"""Pages of comparison: two participants task by task (`/compare`, picked by ticking two rows of the runs
table or the leaderboard), one task of it side by side (`/compare/task`), and one task: its files, results by
agent and history across the workspace's runs (`/benchmarks/{key}/task`). Thin: decode, call one function,
render."""

from __future__ import annotations

from typing import Annotated
from urllib.parse import urlencode

from fastapi import APIRouter, Query, Request
from fastapi.responses import RedirectResponse, Response
from regatta_shared.rules.ceilings import TaskFileBounds

from regatta_gateway.errors import Refused
from regatta_gateway.http import errors
from regatta_gateway.queries import compare as compare_queries
from regatta_gateway.queries.grading import object_fetcher
from regatta_gateway.web import compare_views, task_views
from regatta_gateway.web.routes import ScopeDep, guarded, render

router = APIRouter(include_in_schema=False)
Text = Annotated[str, Query(max_length=1000)]
# Ticked rows: any count is let through to `picked`, which refuses all but two with the reason.
Picks = Annotated[list[str] | None, Query()]


@router.get("/compare")
def compare_page(
    request: Request,
    scope: ScopeDep,
    a: str = "",
    b: str = "",
    verdict: str = "",
    category: str = "",
    run: Picks = None,
    p: Picks = None,
) -> Response:
    def build() -> Response:
        store = request.app.state.store
        if run or p:
            pair = compare_views.picked(store, scope, run or [], p or [])
            return RedirectResponse(f"/compare?{urlencode({'a': pair[0], 'b': pair[1]})}", status_code=303)
        page = compare_views.compare_page(store, scope, a, b, verdict, category)
        return render(request, scope, "compare.html", "benchmarks", **page)

    return guarded(request, scope, build)


@router.get("/compare.csv")
def compare_csv(request: Request, scope: ScopeDep, a: str = "", b: str = "") -> Response:
    def build() -> Response:
        page = compare_views.compare_page(request.app.state.store, scope, a, b, "", "")
        return Response(
            compare_queries.rows_csv(page),
            media_type="text/csv; charset=utf-8",
            headers={"Content-Disposition": 'attachment; filename="compare.csv"'},
        )

    return guarded(request, scope, build)


@router.get("/compare/task")
async def compare_task_page(
    request: Request,
    scope: ScopeDep,
    a: str = "",
    b: str = "",
    task: Text = "",
    a_attempt: Text = "",
    b_attempt: Text = "",
) -> Response:
    state = request.app.state
    try:
        page = await compare_views.task_page(
            state.store,
            object_fetcher(state.artifacts),
            scope,
            a,
            b,
            task,
            {"a": a_attempt, "b": b_attempt},
        )
    except Refused as error:
        status = errors.status_of(error)
        return render(request, scope, "error.html", "benchmarks", status, error=error, error_status=status)
    return render(request, scope, "compare_task.html", "benchmarks", **page)


@router.get("/benchmarks/{key}/task")
async def task_page(
    request: Request,
    scope: ScopeDep,
    key: str,
    name: Text = "",
    page: Annotated[int, Query(ge=1, le=1_000_000)] = 1,
) -> Response:
    state = request.app.state
    try:
        bounds = TaskFileBounds.from_settings(state.settings)
        shown = await task_views.task_page(
            state.store, object_fetcher(state.tasks), bounds, scope, key, name, page
        )
    except Refused as error:
        status = errors.status_of(error)
        return render(request, scope, "error.html", "benchmarks", status, error=error, error_status=status)
    return render(request, scope, "task.html", "benchmarks", **shown)
