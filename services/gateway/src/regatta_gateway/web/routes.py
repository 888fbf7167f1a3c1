"""Page routes of the web UI. URLs are readable and stateful views keep their state in the query string.

A page with live regions also answers `?fragment=a,b` with `{"a": "<html>", "b": "<html>"}`: the page's
JavaScript polls `/api/v1` and, when something changed, swaps those regions in place. Rendering stays in
one place (the templates), so a live update looks exactly like a reload. A name the page has no region
for is 404 (`field: fragment`), on any page.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterable
from functools import cache
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Form, Query, Request
from fastapi.responses import HTMLResponse, JSONResponse, RedirectResponse, Response
from fastapi.templating import Jinja2Templates
from regatta_shared.rules.harnesses import HARNESSES
from starlette.concurrency import run_in_threadpool

from regatta_gateway.errors import NotFound, Refused
from regatta_gateway.http import errors
from regatta_gateway.principals import Scope
from regatta_gateway.queries import benchmarks as benchmark_queries
from regatta_gateway.queries.grading import attempt_grading, object_fetcher
from regatta_gateway.web import (
    benchmark_views,
    integrity_views,
    labels,
    leaderboard_views,
    run_views,
    secret_views,
)
from regatta_gateway.web.features import route_features
from regatta_gateway.web.formatting import FILTERS
from regatta_gateway.web.session import (
    STATIC_DIR,
    TEMPLATE_DIR,
    check_token,
    clear_session,
    safe_next,
    set_session,
    set_workspace,
    web_scope,
)
from regatta_gateway.web.vocabulary import TEMPLATE_GLOBALS

router = APIRouter(include_in_schema=False)
templates = Jinja2Templates(directory=TEMPLATE_DIR)
templates.env.filters.update(FILTERS)
templates.env.globals.update(
    rank_text=leaderboard_views.rank_text,
    same_conditions=leaderboard_views.same_conditions,
    sorts=leaderboard_views.SORTS,
    integrity_policies=integrity_views.POLICIES,
    is_url=labels.is_url,
    page_query=labels.page_query,
    plural=labels.plural,
    **TEMPLATE_GLOBALS,
)
ScopeDep = Annotated[Scope, Depends(web_scope)]


@cache
def _static_version(name: str) -> str:
    """Content hash in static URLs, so a browser never runs yesterday's script against today's page."""
    return hashlib.sha256((STATIC_DIR / name).read_bytes()).hexdigest()[:10]


def static_url(name: str) -> str:
    return f"/static/{name}?v={_static_version(name)}"


templates.env.globals["static"] = static_url


def _base(request: Request, scope: Scope | None, nav: str) -> dict[str, Any]:
    workspaces = getattr(request.state, "workspaces", []) if scope else []  # set by web_scope
    return {"request": request, "scope": scope, "nav": nav, "workspaces": workspaces}


def embedded_token_file(request: Request) -> str | None:
    """Where the embedded stack (`regatta up`) wrote its token, when this gateway runs in one: only then
    does the sign-in page name a host path (a deployed gateway's layout is nobody's business)."""
    token = request.app.state.settings.data_dir / "token"
    return str(token.resolve()) if token.is_file() else None


def render(
    request: Request, scope: Scope | None, name: str, nav: str, status: int = 200, **context: Any
) -> HTMLResponse:
    """The whole page. A page rendered whole has no fragments, so a fragment asked of it is not found."""
    requested_fragments(request, ())
    return templates.TemplateResponse(request, name, {**_base(request, scope, nav), **context}, status)


def requested_fragments(request: Request, known: Iterable[str]) -> list[str]:
    """The names `?fragment=a,b` asks for (none without the parameter), each one of the page's `known`
    regions; any other name is refused as not found."""
    asked = request.query_params.get("fragment")
    if not asked:
        return []
    names = asked.split(",")
    unknown = [name for name in names if name not in known]
    if unknown:
        offered = f"; it has {', '.join(sorted(known))}" if known else ""
        raise NotFound(
            f"This page has no fragment {unknown[0]!r}{offered}", code="NOT_FOUND", field="fragment"
        )
    return names


def fragments(request: Request, parts: dict[str, str], context: dict[str, Any]) -> JSONResponse | None:
    """`?fragment=a,b`: the named regions only, rendered from the same partial templates as the page."""
    wanted = requested_fragments(request, parts)
    if not wanted:
        return None
    body = {name: templates.get_template(parts[name]).render(context) for name in wanted}
    return JSONResponse(body, headers={"Cache-Control": "no-store"})


def guarded(
    request: Request, scope: Scope, build: Callable[[], Response], nav: str = "benchmarks"
) -> Response:
    """A refusal (say, an unknown benchmark) becomes an error page, or a JSON error for fragments."""
    try:
        return build()
    except Refused as error:
        if request.query_params.get("fragment"):
            return errors.response(error)
        status = errors.status_of(error)
        return render(request, scope, "error.html", nav, status, error=error, error_status=status)


# --- sign-in --------------------------------------------------------------------------------------


@router.get("/")
def home() -> RedirectResponse:
    return RedirectResponse("/benchmarks", status_code=303)


@router.get("/signin")
def signin_form(request: Request, next: str | None = None) -> HTMLResponse:
    return render(
        request,
        None,
        "signin.html",
        "signin",
        next=safe_next(next),
        error=None,
        token_file=embedded_token_file(request),
    )


@router.post("/signin")
def signin(
    request: Request, token: Annotated[str, Form()] = "", next: Annotated[str, Form()] = ""
) -> Response:
    target = safe_next(next)
    if not token.strip():
        return render(
            request,
            None,
            "signin.html",
            "signin",
            400,
            next=target,
            error="Enter an API token.",
            token_file=embedded_token_file(request),
        )
    try:
        check_token(request, token)
    except Refused as error:
        return render(
            request,
            None,
            "signin.html",
            "signin",
            401,
            next=target,
            error=error.message,
            token_file=embedded_token_file(request),
        )
    response = RedirectResponse(target, status_code=303)
    set_session(response, request, token)
    return response


@router.post("/signout")
def signout() -> RedirectResponse:
    response = RedirectResponse("/signin", status_code=303)
    clear_session(response)
    return response


@router.post("/workspace")
def switch_workspace(request: Request, scope: ScopeDep, workspace: Annotated[str, Form()] = "") -> Response:
    """Pages and their API calls act in the chosen workspace from now on. Its benchmarks list is where
    to land: the page the user was on belongs to the workspace they left."""
    if workspace not in {w["id"] for w in request.state.workspaces}:
        error = NotFound("Workspace not found or not accessible", field="workspace")
        return render(request, scope, "error.html", "benchmarks", 404, error=error, error_status=404)
    response = RedirectResponse("/benchmarks", status_code=303)
    set_workspace(response, request, workspace)
    return response


# --- benchmarks -----------------------------------------------------------------------------------

# Each page's regions its script refreshes in place (`data-region`), and the partial each is drawn from.
# The run page's Task Results and Logs tabs are drawn by run.js from /api/v1, not from fragments.
BENCHMARKS_FRAGMENTS = {"rows": "_benchmark_rows.html"}
BENCHMARK_FRAGMENTS = {
    "header": "_benchmark_header.html",
    "leaderboard": "_leaderboard.html",
    "runs": "_runs_table.html",
}
RUN_FRAGMENTS = {
    "sidebar": "_run_sidebar.html",
    "actions": "_run_actions.html",
    "overview": "_run_overview.html",
}
NEW_RUN_FRAGMENTS = ("secrets",)  # JSON, not HTML: the secret records' names and scopes


@router.get("/benchmarks")
def benchmarks_page(request: Request, scope: ScopeDep) -> Response:
    store = request.app.state.store
    context = {
        **_base(request, scope, "benchmarks"),
        "benchmarks": benchmark_views.benchmark_rows(store, scope),
    }
    partial = fragments(request, BENCHMARKS_FRAGMENTS, context)
    return partial or templates.TemplateResponse(request, "benchmarks.html", context)


@router.get("/benchmarks/runs/{run_key}")
def run_page(request: Request, scope: ScopeDep, run_key: str, tab: str = "overview") -> Response:
    def build() -> Response:
        state = request.app.state
        page = run_views.run_page(state.store, scope, run_key, state.settings.gateway_url, request.app)
        selected = tab if tab in ("overview", "results", "configuration", "logs") else "overview"
        context = {**_base(request, scope, "benchmarks"), **page, "tab": selected}
        partial = fragments(request, RUN_FRAGMENTS, context)
        return partial or templates.TemplateResponse(request, "run.html", context)

    return guarded(request, scope, build)


@router.get("/benchmarks/runs/{run_key}/attempts/{attempt_id}")
async def attempt_page(request: Request, scope: ScopeDep, run_key: str, attempt_id: str) -> Response:
    """An attempt's own page: while it runs, its output and phase live (attempt.js reads the SSE stream);
    once it ended, its grading (the artifacts read from the object store)."""
    state = request.app.state
    try:
        page = await run_in_threadpool(run_views.attempt_page, state.store, scope, run_key, attempt_id)
    except Refused as error:
        status = errors.status_of(error)
        return render(request, scope, "error.html", "benchmarks", status, error=error, error_status=status)
    grading = await attempt_grading(object_fetcher(state.artifacts), page["attempt"], page["primary_key"])
    page["grading"] = grading
    return guarded(request, scope, lambda: render(request, scope, "attempt.html", "benchmarks", **page))


@router.get("/benchmarks/{key}/runs/new")
def new_run_page(request: Request, scope: ScopeDep, key: str) -> Response:
    def build() -> Response:
        store = request.app.state.store
        detail = benchmark_queries.benchmark_detail(store, scope, key)["benchmark"]
        secrets = secret_views.secret_names(store, scope)
        if requested_fragments(request, NEW_RUN_FRAGMENTS):
            # Names and scopes only, for re-checking the agents' secret records without a reload when
            # GET /api/v1/secrets is not available.
            names = [{"name": s["name"], "scope": s["scope"]} for s in secrets]
            return JSONResponse({"secrets": names}, headers={"Cache-Control": "no-store"})
        data = {
            "benchmark": {
                k: detail.get(k)
                for k in (
                    "id",
                    "name",
                    "sync_status",
                    "task_count",
                    "task_sets",
                    "categories",
                    "requires_judge_model",
                    "requires_judge_api_key",
                    "judge_model_default",
                    "default_harness",
                    "pass_threshold",
                    "verifier_integrity",
                    "requires_harness",
                )
            }
            | {"tasks": [{"name": t["name"], "category": t["category"]} for t in detail["tasks"]]},
            "secrets": [{"name": s["name"], "scope": s["scope"]} for s in secrets],
            # The page asks GET /api/v1/harnesses; this copy only covers a failed request.
            "harnesses": [{"name": n, **info} for n, info in sorted(HARNESSES.items())],
            # The form offers the `hosted` type only when the deployment declares hosted models.
            "hosted_models": [model.public() for model in request.app.state.hosted_models],
            "user": scope.principal.user_name,
        }
        return render(request, scope, "new_run.html", "benchmarks", benchmark=detail, data=data)

    return guarded(request, scope, build)


@router.get("/benchmarks/{key}")
def benchmark_page(
    request: Request,
    scope: ScopeDep,
    key: str,
    sort: str = "pass_at_1",
    page: Annotated[int, Query(ge=1, le=1_000_000)] = 1,
    status: str = "",
    submitter: Annotated[str, Query(max_length=300)] = "",
    task_search: Annotated[str, Query(max_length=1000)] = "",
    task_page: Annotated[int, Query(ge=1, le=1_000_000)] = 1,
) -> Response:
    def build() -> Response:
        state = request.app.state
        store = state.store
        detail = benchmark_queries.benchmark_detail(store, scope, key)["benchmark"]
        tasks = benchmark_views.task_list(store, scope, detail["id"], task_search, task_page)
        chosen = sort if sort in leaderboard_views.SORTS else "pass_at_1"
        rows = leaderboard_views.leaderboard(store, detail, chosen)
        context = {
            **_base(request, scope, "benchmarks"),
            "benchmark": detail,
            "source": benchmark_views.benchmark_source(store, scope, detail["id"]),
            "may_remove": benchmark_views.may_remove(store, scope, detail["id"]),
            # Excluding a broken task from a version is a workspace admin's (commands/benchmarks.py).
            "may_exclude": scope.is_admin,
            "task_list": tasks,
            "sort": chosen,
            "leaderboard": rows,
            "not_ranked": leaderboard_views.not_ranked(store, scope, detail["id"], rows),
            "runs": benchmark_views.runs_of(
                store,
                scope,
                detail["id"],
                state.settings.gateway_url,
                page=page,
                status=status,
                submitter=submitter,
            ),
        }
        partial = fragments(request, BENCHMARK_FRAGMENTS, context)
        return partial or templates.TemplateResponse(request, "benchmark.html", context)

    return guarded(request, scope, build)


# --- secrets --------------------------------------------------------------------------------------


@router.get("/secrets")
def secrets_page(request: Request, scope: ScopeDep, name: str = "") -> Response:
    store = request.app.state.store
    features = route_features(request.app)
    return render(
        request,
        scope,
        "secrets.html",
        "secrets",
        secrets=secret_views.secret_names(store, scope),
        api_available=features["secrets"],
        prefill=name if name.isupper() or not name else "",
    )
