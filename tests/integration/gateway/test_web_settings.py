"""The settings pages as rendered for an admin and for a member (no browser: the HTML itself).

What members must not be offered is not in their page at all; the API refuses it anyway
(test_workspace_admin.py).
"""

from __future__ import annotations

import re

from .conftest import ADMIN_TOKEN, Gateway


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
