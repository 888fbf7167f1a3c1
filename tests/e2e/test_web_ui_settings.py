"""The settings pages, driven by a real browser against the running stack: an admin sets the budget,
creates and revokes a token, changes a role and removes a member; a member sees none of the admin parts.
Each page is photographed at desktop and phone widths and checked as a person would look at it."""

from __future__ import annotations

import re
from typing import Any

import httpx
from playwright.sync_api import Page, expect

from tests.e2e.web_ui_layout import assert_readable
from tests.e2e.web_ui_support import sign_in


def sign_in_as(page: Page, stack: Any, token: str) -> None:
    page.context.clear_cookies()
    page.goto(f"{stack.url}/signin?next=%2Fsettings")
    page.get_by_label("API token").fill(token)
    page.get_by_role("button", name="Sign in").click()
    expect(page).to_have_url(f"{stack.url}/settings/workspace")


def test_an_admin_manages_the_workspace_and_a_member_sees_no_admin_parts(make_stack, page: Page) -> None:
    # Webhooks may target 127.0.0.1:9 only, where nothing listens: registered, never delivered anywhere.
    stack = make_stack(executors=0, REGATTA_OUTBOUND_ALLOW="127.0.0.1:9")
    admin = {"Authorization": f"Bearer {stack.token}"}
    with httpx.Client(base_url=f"{stack.url}/api/v1", headers=admin, timeout=30) as api:
        workspace = next(w for w in api.get("/workspaces").json()["workspaces"] if w["current"])
        members = f"/workspaces/{workspace['id']}/members"
        bob = api.post(members, json={"email": "bob@example.com", "name": "Bob", "issue_token": True}).json()
        carol = api.post(members, json={"email": "carol@example.com", "name": "Carol"}).json()
        assert bob["token"] and carol["user_id"]

    sign_in(page, stack)
    page.get_by_role("link", name="Settings").click()
    expect(page).to_have_url(f"{stack.url}/settings/workspace")

    # Budget: set, then shown with what is spent and what remains.
    budget = page.get_by_test_id("budget")
    expect(budget.locator("[data-budget=limit]")).to_have_text("No budget")
    page.get_by_label("Budget (USD)").fill("25")
    page.get_by_role("button", name="Save budget").click()
    expect(budget.locator("[data-budget=limit]")).to_have_text("$25.00")
    expect(budget.locator("[data-budget=spent]")).to_have_text("$0.00")
    expect(budget.locator("[data-budget=remaining]")).to_have_text("$25.00")
    with httpx.Client(base_url=f"{stack.url}/api/v1", headers=admin, timeout=30) as api:
        assert api.get("/workspace/budget").json()["budget_usd"] == 25
    assert_readable(
        page, "settings-workspace", ["Budget", "$25.00", "Remaining", "Delete workspace…", "Rename"]
    )

    # A token: created (shown once, and it works), then revoked (and it no longer does).
    page.get_by_role("link", name="API tokens").click()
    page.get_by_label("Token name").fill("ci-laptop")
    page.get_by_role("button", name="Create token").click()
    shown = page.locator("#new-token [data-secret-value]")
    expect(shown).to_have_text(re.compile(r"^rg_\S{20,}$"))
    token = shown.inner_text()
    row = page.locator("tr[data-token-name='ci-laptop']")
    expect(row).to_contain_text("active")
    assert (
        httpx.get(f"{stack.url}/api/v1/benchmarks", headers={"Authorization": f"Bearer {token}"}).status_code
        == 200
    )
    assert_readable(page, "settings-tokens", ["ci-laptop", "Copy the token now", "this session"])
    page.once("dialog", lambda dialog: dialog.accept())
    row.get_by_role("button", name="Revoke ci-laptop").click()
    expect(row).to_contain_text("revoked")
    expect(row.get_by_role("button")).to_have_count(0)
    refused = httpx.get(f"{stack.url}/api/v1/benchmarks", headers={"Authorization": f"Bearer {token}"})
    assert refused.status_code == 401 and refused.json()["code"] == "TOKEN_REVOKED"

    # Members: bob becomes an admin and back; carol is removed.
    page.get_by_role("link", name="Members").click()
    page.get_by_label("Role of bob@example.com").select_option("admin")
    expect(page.get_by_text("bob@example.com is now an admin")).to_be_visible()
    page.get_by_label("Role of bob@example.com").select_option("member")
    expect(page.get_by_text("bob@example.com is now a member")).to_be_visible()
    carol_row = page.locator("tr[data-email='carol@example.com']")
    page.once("dialog", lambda dialog: dialog.accept())
    carol_row.get_by_role("button", name="Remove carol@example.com").click()
    expect(carol_row).to_have_count(0)
    expect(page.get_by_text("carol@example.com removed")).to_be_visible()
    with httpx.Client(base_url=f"{stack.url}/api/v1", headers=admin, timeout=30) as api:
        listed = {m["email"]: m["role"] for m in api.get(members).json()["members"]}
    assert listed == {"admin@localhost": "admin", "bob@example.com": "member"}
    assert_readable(page, "settings-members", ["Add a member", "bob@example.com", "admin@localhost"])

    # A webhook: added (its signing secret shown once), its delivery log opened, removed.
    page.get_by_role("link", name="Webhooks").click()
    expect(page.get_by_text("No webhooks yet.")).to_be_visible()
    page.get_by_label("URL").fill("http://127.0.0.1:9/hook")
    page.get_by_label("budget.reached").uncheck()
    page.get_by_role("button", name="Add webhook").click()
    expect(page.locator("#new-secret [data-secret-value]")).to_have_text(re.compile(r"^[0-9a-f]{64}$"))
    hook = page.get_by_test_id("webhooks-table").locator("tbody tr")
    expect(hook).to_have_count(1)
    expect(hook).to_contain_text("http://127.0.0.1:9/hook")
    expect(hook).not_to_contain_text("budget.reached")
    assert_readable(page, "settings-webhooks", ["Add a webhook", "http://127.0.0.1:9/hook", "Signing secret"])
    hook.get_by_role("link", name="Deliveries").click()
    expect(page.get_by_text("No deliveries yet.")).to_be_visible()
    page.once("dialog", lambda dialog: dialog.accept())
    page.get_by_role("button", name="Remove http://127.0.0.1:9/hook").click()
    expect(page.get_by_text("No webhooks yet.")).to_be_visible()
    with httpx.Client(base_url=f"{stack.url}/api/v1", headers=admin, timeout=30) as api:
        assert api.get("/webhooks").json()["webhooks"] == []

    # The audit log shows what was just done, filtered by event.
    page.get_by_role("link", name="Audit log").click()
    expect(page.locator("tr[data-kind='WorkspaceBudgetSet']")).to_have_count(1)
    page.get_by_label("Event").fill("MemberRemoved")
    page.get_by_role("button", name="Filter").click()
    expect(page).to_have_url(re.compile(r"kind=MemberRemoved"))
    rows = page.get_by_test_id("audit-table").locator("tbody tr")
    expect(rows).to_have_count(1)
    expect(rows.first).to_contain_text("admin")
    assert_readable(page, "settings-audit", ["Audit log", "MemberRemoved", "Filter"])

    # A workspace without runs is deleted after a plain confirmation; the UI lands back in the default one.
    with httpx.Client(base_url=f"{stack.url}/api/v1", headers=admin, timeout=30) as api:
        assert api.post("/workspaces", json={"name": "scratch"}).status_code == 201
    page.goto(f"{stack.url}/benchmarks")
    page.get_by_label("Workspace").select_option(label="scratch")
    page.get_by_role("link", name="Settings").click()
    expect(page.get_by_role("heading", name="scratch")).to_be_visible()
    page.once("dialog", lambda dialog: dialog.accept())
    page.get_by_role("button", name="Delete workspace…").click()
    expect(page).to_have_url(f"{stack.url}/benchmarks")
    expect(page.get_by_label("Workspace")).to_have_count(0)  # one workspace left: no switcher
    with httpx.Client(base_url=f"{stack.url}/api/v1", headers=admin, timeout=30) as api:
        assert [w["name"] for w in api.get("/workspaces").json()["workspaces"]] == [workspace["name"]]

    # Bob, a member: figures yes, forms no, no webhooks section.
    sign_in_as(page, stack, bob["token"])
    expect(page.get_by_test_id("budget").locator("[data-budget=limit]")).to_have_text("$25.00")
    expect(page.get_by_role("button", name="Save budget")).to_have_count(0)
    expect(page.get_by_role("button", name="Delete workspace…")).to_have_count(0)
    expect(page.get_by_label("Workspace name")).to_have_count(0)
    expect(page.get_by_role("link", name="Webhooks")).to_have_count(0)
    assert_readable(page, "settings-workspace-member", ["Budget", "$25.00", "You are a member"])
    page.get_by_role("link", name="Members").click()
    expect(page.get_by_role("button", name="Add member")).to_have_count(0)
    expect(page.get_by_label("Role of admin@localhost")).to_have_count(0)
    expect(page.get_by_role("button", name="Leave workspace")).to_be_visible()
    assert_readable(page, "settings-members-member", ["bob@example.com", "Member", "Leave"])
