"""Webhook registration and budgets: validate, decide on the workspace's stream (workspaces/records.py)
and append at the version read; reads from the ops read models."""

from __future__ import annotations

from typing import Any
from urllib.parse import urlparse

from regatta_shared.events import WebhookRegistered
from regatta_shared.eventstore import EventStore
from regatta_shared.ids import new_id
from regatta_shared.security.outbound import OutboundPolicy, OutboundRefused, check_url
from regatta_shared.security.sealing import derive_key
from sqlalchemy import func, select

from regatta_gateway.errors import Forbidden, Invalid, NotFound
from regatta_gateway.notifications.notices import KINDS
from regatta_gateway.principals import Scope
from regatta_gateway.readmodels import tables as t
from regatta_gateway.readmodels.operations import budgets, deliveries, webhooks
from regatta_gateway.workspaces import aggregate as ws
from regatta_gateway.workspaces import records
from regatta_gateway.workspaces.appends import execute


def _admin(scope: Scope) -> None:
    if not scope.is_admin:
        raise Forbidden("Only workspace admins can change this", code="FORBIDDEN")


def signing_key(master: bytes, webhook_id: str) -> bytes:
    """Derived, never stored: the master key and the webhook id give the same key on every gateway."""
    return derive_key(master, f"regatta/webhooks/v1/{webhook_id}")


def register_webhook(
    store: EventStore, scope: Scope, body: dict[str, Any], master: bytes, outbound: OutboundPolicy
) -> dict[str, Any]:
    _admin(scope)
    url = body.get("url")
    parsed = urlparse(url) if isinstance(url, str) else None
    if parsed is None or parsed.scheme not in ("http", "https") or not parsed.netloc or len(url) > 2000:
        raise Invalid("url must be an absolute http(s) URL", field="url", code="VALIDATION")
    try:
        check_url(url, "url", outbound)
    except OutboundRefused as error:
        # Nothing was fetched: the address is refused as it stands (the reason names REGATTA_OUTBOUND_ALLOW).
        raise Invalid(f"url: {error.reason}", field="url", code="VALIDATION") from None
    kinds = body.get("kinds") or list(KINDS)
    if not isinstance(kinds, list) or any(k not in KINDS for k in kinds):
        raise Invalid(f"kinds must be a list of {', '.join(KINDS)}", field="kinds", code="VALIDATION")
    webhook_id = new_id("wh")
    registered = WebhookRegistered(
        webhook_id=webhook_id, workspace_id=scope.workspace_id, url=url, kinds=kinds
    )
    actor = scope.principal.user_id
    execute(
        store,
        scope.workspace_id,
        actor,
        lambda state: records.decide_register_webhook(state, actor, registered),
        reads=ws.standing(actor),
    )
    return {
        "id": webhook_id,
        "url": url,
        "kinds": kinds,
        "signing_secret": signing_key(master, webhook_id).hex(),
    }


def remove_webhook(store: EventStore, scope: Scope, webhook_id: str) -> None:
    _admin(scope)
    actor = scope.principal.user_id
    execute(
        store,
        scope.workspace_id,
        actor,
        lambda state: records.decide_remove_webhook(state, actor, webhook_id),
        reads=records.webhook_reads(actor, webhook_id),
    )


def find_webhook(store: EventStore, scope: Scope, webhook_id: str) -> dict[str, Any]:
    with store.read_engine.connect() as conn:
        row = (
            conn.execute(
                select(webhooks).where(
                    webhooks.c.id == webhook_id,
                    webhooks.c.workspace_id == scope.workspace_id,
                    webhooks.c.active.is_(True),
                )
            )
            .mappings()
            .first()
        )
    if row is None:
        raise NotFound(f"Webhook {webhook_id!r} not found", code="NOT_FOUND")
    return dict(row)


def list_webhooks(store: EventStore, scope: Scope) -> list[dict[str, Any]]:
    with store.read_engine.connect() as conn:
        rows = (
            conn.execute(
                select(webhooks)
                .where(webhooks.c.workspace_id == scope.workspace_id, webhooks.c.active.is_(True))
                .order_by(webhooks.c.created_at)
            )
            .mappings()
            .all()
        )
    return [
        {"id": r["id"], "url": r["url"], "kinds": r["kinds"], "created_at": r["created_at"]} for r in rows
    ]


def delivery_log(store: EventStore, scope: Scope, webhook_id: str, limit: int = 100) -> list[dict[str, Any]]:
    find_webhook(store, scope, webhook_id)
    with store.read_engine.connect() as conn:
        rows = (
            conn.execute(
                select(deliveries)
                .where(deliveries.c.webhook_id == webhook_id)
                .order_by(deliveries.c.position.desc())
                .limit(limit)
            )
            .mappings()
            .all()
        )
    return [
        {
            k: r[k]
            for k in (
                "notification_id",
                "kind",
                "attempt",
                "delivered",
                "status_code",
                "error",
                "retry_in_seconds",
                "at",
            )
        }
        for r in rows
    ]


def set_budget(store: EventStore, scope: Scope, body: dict[str, Any]) -> dict[str, Any]:
    _admin(scope)
    value = body.get("budget_usd")
    if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0):
        raise Invalid(
            "budget_usd must be a number ≥ 0, or null for no budget",
            field="budget_usd",
            code="VALIDATION",
        )
    actor = scope.principal.user_id
    execute(
        store,
        scope.workspace_id,
        actor,
        lambda state: records.decide_set_budget(state, actor, value),
        reads=records.budget_reads(actor),
    )
    return {"budget_usd": value}


def budget_status(store: EventStore, workspace_id: str) -> dict[str, Any]:
    with store.read_engine.connect() as conn:
        budget = conn.execute(
            select(budgets.c.budget_usd).where(budgets.c.workspace_id == workspace_id)
        ).first()
        spent = conn.execute(
            select(func.coalesce(func.sum(t.runs.c.cost_usd), 0.0)).where(
                t.runs.c.workspace_id == workspace_id
            )
        ).scalar_one()
    limit = budget[0] if budget else None
    remaining = None if limit is None else max(0.0, limit - float(spent))
    return {
        "budget_usd": limit,
        "spent_usd": float(spent),
        "remaining_usd": remaining,
        "exhausted": limit is not None and spent >= limit,
    }


def check_budget(store: EventStore, scope: Scope) -> None:
    """Billing is checked at submission: a workspace whose budget is spent learns it here (403)."""
    status = budget_status(store, scope.workspace_id)
    if status["exhausted"]:
        raise Forbidden(
            f"Workspace budget of ${status['budget_usd']:.2f} is spent "
            f"(${status['spent_usd']:.2f}); raise the budget to submit runs",
            code="BILLING_REQUIRED",
            **{k: status[k] for k in ("budget_usd", "spent_usd")},
        )
