"""The settings pages as rendered for an admin and for a member (no browser: the HTML itself).

What members must not be offered is not in their page at all; the API refuses it anyway
(test_workspace_admin.py).
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from regatta_gateway.app import create_app
from regatta_shared.events import WebhookDeliveryRecorded
from regatta_shared.events.envelope import new_event

from .conftest import ADMIN_TOKEN, Gateway, make_settings


def page(gw: Gateway, token: str, path: str) -> tuple[int, str]:
    gw.client.cookies.set("regatta_token", token)
    response = gw.client.get(path, follow_redirects=False)
    return response.status_code, response.text


def test_members_see_no_admin_parts_and_admins_see_them_all(pg_gateway: Gateway) -> None:
    gw = pg_gateway
    bob = gw.member("default", "bob@example.com")
    admin_parts = ['data-form="budget"', 'data-form="rename"', "data-delete-workspace"]
    status, html = page(gw, ADMIN_TOKEN, "/settings/workspace")
    assert status == 200 and all(part in html for part in admin_parts)
    assert 'href="/settings/webhooks"' in html

    status, html = page(gw, bob, "/settings/workspace")
    assert status == 200 and not any(part in html for part in admin_parts)
    assert 'href="/settings/webhooks"' not in html and 'data-budget="spent"' in html
    status, html = page(gw, bob, "/settings/members")
    assert 'data-form="add-member"' not in html and "data-member-role" not in html
    # A member's only action on the members page is leaving.
    assert re.findall(r">(Remove|Leave)</button>", html) == ["Leave"]
    status, html = page(gw, bob, "/settings/webhooks")
    assert status == 403 and "data-form" not in html
    status, html = page(gw, bob, "/settings/tokens")
    assert status == 200 and 'data-form="token"' in html


def test_budget_shows_spent_and_remaining(pg_gateway: Gateway) -> None:
    gw = pg_gateway
    gw.ok(gw.v1("PUT", "/workspace/budget", json={"budget_usd": 12.5}))
    _, html = page(gw, ADMIN_TOKEN, "/settings/workspace")
    assert 'data-budget="limit">$12.50<' in html and 'data-budget="remaining">$12.50<' in html
    assert gw.ok(gw.v1("GET", "/workspace/budget"))["remaining_usd"] == 12.5


def test_the_audit_log_filters_and_pages(pg_gateway: Gateway) -> None:
    gw = pg_gateway
    for index in range(60):
        gw.ok(gw.v1("PUT", "/workspace/budget", json={"budget_usd": index}))
    gw.member("default", "carol@example.com")
    status, html = page(gw, ADMIN_TOKEN, "/settings/audit?kind=WorkspaceBudgetSet")
    assert status == 200
    assert html.count('data-kind="WorkspaceBudgetSet"') == 50 and 'data-kind="MemberAdded"' not in html
    older = re.search(r'href="(/settings/audit\?[^"]*before=\d+)" rel="next"', html)
    assert older, "no link to older entries"
    _, html = page(gw, ADMIN_TOKEN, older.group(1).replace("&amp;", "&"))
    assert html.count('data-kind="WorkspaceBudgetSet"') == 10 and 'rel="next"' not in html
    _, html = page(gw, ADMIN_TOKEN, "/settings/audit?actor=nobody@example.com")
    assert "No entries match these filters." in html
    status, html = page(gw, ADMIN_TOKEN, "/settings/audit?since=yesterday")
    assert status == 200 and "since must be a date (YYYY-MM-DD)" in html


@pytest.fixture
def hook_gateway(postgres_url: str, nats_url: str, tmp_path: Path) -> Iterator[Gateway]:
    """Webhooks allowed to 127.0.0.1:9 only (nothing listens there): registered, never delivered."""
    settings = make_settings(postgres_url, nats_url, tmp_path / "data")
    settings = settings.model_copy(update={"outbound_allow": "127.0.0.1:9"})
    with TestClient(create_app(settings)) as client:
        yield Gateway(client, settings)


def test_a_webhook_page_shows_its_deliveries(hook_gateway: Gateway) -> None:
    gw = hook_gateway
    hook = gw.ok(gw.v1("POST", "/webhooks", json={"url": "http://127.0.0.1:9/hook"}), 201)
    workspace_id = next(w["id"] for w in gw.ok(gw.v1("GET", "/workspaces"))["workspaces"] if w["current"])
    # Two attempts as the delivery worker records them: refused, then accepted.
    for attempt, delivered, status in ((1, False, 503), (2, True, 204)):
        recorded = WebhookDeliveryRecorded(
            webhook_id=hook["id"],
            workspace_id=workspace_id,
            notification_id="ntf_1",
            kind="run.finished",
            attempt=attempt,
            delivered=delivered,
            status_code=status,
            error=None if delivered else "HTTP 503",
            retry_in_seconds=None if delivered else 2.0,
        )
        gw.store.append(
            f"webhook-{hook['id']}", [new_event(recorded, actor="webhooks", workspace_id=workspace_id)]
        )
    gw.client.app.state.ops_projections.catch_up()  # type: ignore[attr-defined]
    _, listing = page(gw, ADMIN_TOKEN, "/settings/webhooks")
    assert "http://127.0.0.1:9/hook" in listing and 'data-testid="deliveries-table"' not in listing
    status, html = page(gw, ADMIN_TOKEN, f"/settings/webhooks?webhook={hook['id']}")
    assert status == 200
    table = html[html.index('data-testid="deliveries-table"') :]
    assert "delivered · 204" in table and "HTTP 503 · retry in 2.0 s" in table
    assert table.index("delivered · 204") < table.index("HTTP 503")  # newest first
    status, _ = page(gw, ADMIN_TOKEN, "/settings/webhooks?webhook=wh_unknown")
    assert status == 404
