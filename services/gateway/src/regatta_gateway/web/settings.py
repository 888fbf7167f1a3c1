"""The workspace settings pages: workspace (name, budget), members, API tokens, webhooks, audit log.

Reads call the same functions as the API routes; every change is made by the page's script through
`/api/v1` (settings.js), so rules such as "only admins" live in one place. Admin-only parts are not
rendered for members at all: the webhooks section, and the forms that change the workspace or its
members.
"""

from __future__ import annotations

from datetime import date
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Query, Request
from fastapi.responses import RedirectResponse, Response
from regatta_shared.events import EVENT_TYPES

from regatta_gateway.commands import identity
from regatta_gateway.commands.workspace_handlers import run_count
from regatta_gateway.errors import Forbidden, Invalid, NotFound, Refused
from regatta_gateway.notifications import registry
from regatta_gateway.notifications.notices import KINDS
from regatta_gateway.principals import Scope
from regatta_gateway.queries import audit
from regatta_gateway.queries.members import member_list
from regatta_gateway.web.routes import fragments, guarded, render
from regatta_gateway.web.session import web_scope

router = APIRouter(include_in_schema=False)
ScopeDep = Annotated[Scope, Depends(web_scope)]
# (path, label, admins only)
SECTIONS = (
    ("workspace", "Workspace", False),
    ("members", "Members", False),
    ("tokens", "API tokens", False),
    ("webhooks", "Webhooks", True),
    ("audit", "Audit log", False),
)
AUDIT_PAGE = 50
FILTER_LIMIT = 200


def sections(scope: Scope) -> list[tuple[str, str]]:
    return [(path, label) for path, label, admin_only in SECTIONS if scope.is_admin or not admin_only]


def _page(request: Request, scope: Scope, section: str, parts: dict[str, str], **context: Any) -> Response:
    full = {"section": section, "sections": sections(scope), **context}
    partial = fragments(request, parts, {"request": request, "scope": scope, **full})
    return partial or render(request, scope, f"settings_{section}.html", "settings", **full)


@router.get("/settings")
def settings_home() -> RedirectResponse:
    return RedirectResponse("/settings/workspace", status_code=303)


@router.get("/settings/workspace")
def workspace_page(request: Request, scope: ScopeDep) -> Response:
    store = request.app.state.store
    return _page(
        request,
        scope,
        "workspace",
        {"budget": "_settings_budget.html"},
        budget=registry.budget_status(store, scope.workspace_id),
        run_count=run_count(store, scope.workspace_id),
    )


@router.get("/settings/members")
def members_page(request: Request, scope: ScopeDep) -> Response:
    members = member_list(request.app.state.store, scope.workspace_id)
    admins = sum(1 for m in members if m["role"] == "admin")
    return _page(
        request, scope, "members", {"members": "_settings_members.html"}, members=members, admins=admins
    )


@router.get("/settings/tokens")
def tokens_page(request: Request, scope: ScopeDep) -> Response:
    tokens = identity.list_tokens(request.app.state.store, scope.principal)
    return _page(request, scope, "tokens", {"tokens": "_settings_tokens.html"}, tokens=tokens)


@router.get("/settings/webhooks")
def webhooks_page(request: Request, scope: ScopeDep, webhook: str | None = None) -> Response:
    def build() -> Response:
        if not scope.is_admin:
            raise Forbidden("Only workspace admins can see webhooks", code="FORBIDDEN")
        store = request.app.state.store
        hooks = registry.list_webhooks(store, scope)
        chosen = next((h for h in hooks if h["id"] == webhook), None)
        if webhook and chosen is None:
            raise NotFound(f"Webhook {webhook!r} not found", code="NOT_FOUND")
        deliveries = registry.delivery_log(store, scope, webhook) if chosen else []
        return _page(
            request,
            scope,
            "webhooks",
            {"webhooks": "_settings_webhooks.html"},
            webhooks=hooks,
            kinds=KINDS,
            chosen=chosen,
            deliveries=deliveries,
        )

    return guarded(request, scope, build, "settings")


def _day(value: str | None, field: str, end: bool) -> str | None:
    """A date from the filter form as the bound the audit query compares with (UTC, whole days)."""
    if not value:
        return None
    try:
        day = date.fromisoformat(value)
    except ValueError:
        raise Invalid(f"{field} must be a date (YYYY-MM-DD)", field=field, code="VALIDATION") from None
    return f"{day.isoformat()}T23:59:59.999999+00:00" if end else f"{day.isoformat()}T00:00:00+00:00"


@router.get("/settings/audit")
def audit_page(
    request: Request,
    scope: ScopeDep,
    actor: Annotated[str, Query(max_length=FILTER_LIMIT)] = "",
    kind: Annotated[str, Query(max_length=FILTER_LIMIT)] = "",
    since: Annotated[str, Query(max_length=40)] = "",
    until: Annotated[str, Query(max_length=40)] = "",
    before: Annotated[int | None, Query(ge=1, le=2**62)] = None,
) -> Response:
    filters = {"actor": actor.strip(), "kind": kind.strip(), "since": since, "until": until}
    error = None
    try:
        found = audit.list_audit(
            request.app.state.store,
            scope,
            actor=filters["actor"] or None,
            kind=filters["kind"] or None,
            since=_day(since, "since", end=False),
            until=_day(until, "until", end=True),
            limit=AUDIT_PAGE,
            before=before,
        )
    except Refused as refused:
        found, error = {"entries": [], "next_before": None}, refused.message
    query = {k: v for k, v in filters.items() if v}
    return _page(
        request,
        scope,
        "audit",
        {},
        entries=found["entries"],
        next_before=found["next_before"],
        paged=before is not None,
        filters=filters,
        query=query,
        kinds=sorted(EVENT_TYPES),
        error=error,
    )
