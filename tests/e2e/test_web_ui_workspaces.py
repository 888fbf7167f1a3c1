"""The web UI's workspace switcher, driven by a real browser against the running stack."""

from __future__ import annotations

import httpx
from playwright.sync_api import Page, expect

from tests.e2e.web_ui_layout import assert_readable
from tests.e2e.web_ui_support import sign_in


def test_switching_workspace_changes_what_every_page_and_its_scripts_show(make_stack, page: Page) -> None:
    stack = make_stack(executors=1)
    admin = {"Authorization": f"Bearer {stack.token}"}
    with httpx.Client(base_url=f"{stack.url}/api/v1", headers=admin, timeout=30) as api:
        created = api.post("/workspaces", json={"name": "team-b"})
        assert created.status_code == 201, created.text
        team_b = created.json()["id"]
        secret = {"name": "TEAM_B_KEY", "value": "v-team-b", "scope": "workspace"}
        saved = api.post("/secrets", json=secret, headers={"X-Regatta-Workspace": "team-b"})
        assert saved.status_code in (200, 201), saved.text
        default = next(w for w in api.get("/workspaces").json()["workspaces"] if w["current"])

    sign_in(page, stack)
    switcher = page.get_by_label("Workspace")
    expect(switcher).to_have_value(default["id"])
    hosted = page.get_by_role("link", name="regatta-examples")
    expect(hosted).to_be_visible()
    default_copy = hosted.get_attribute("href")

    switcher.select_option(label="team-b")  # submits on change: no button to press with scripts on
    expect(page.get_by_label("Workspace")).to_have_value(team_b)
    # Hosted benchmarks are in every workspace, each workspace with its own copy (its own runs).
    expect(hosted).to_be_visible()
    assert hosted.get_attribute("href") != default_copy
    expect(page.get_by_role("button", name="Switch")).to_be_hidden()
    assert_readable(page, "workspace-switched", ["Workspace", "regatta-examples", "Add Benchmark"])

    # The secrets page writes through /api/v1 from the browser, with the cookies only: into the
    # workspace the page shows.
    page.goto(f"{stack.url}/secrets")
    expect(page.locator("#secrets-body tr[data-name='TEAM_B_KEY']")).to_contain_text("Workspace")
    page.get_by_label("Name").fill("ADDED_IN_UI")
    page.get_by_label("Scope").select_option("workspace")
    page.get_by_label("Value").fill("v-added")
    page.get_by_role("button", name="Save secret").click()
    expect(page.locator("#secrets-body tr[data-name='ADDED_IN_UI']")).to_contain_text("Workspace")
    with httpx.Client(base_url=f"{stack.url}/api/v1", headers=admin, timeout=30) as api:
        for workspace, expected in (("team-b", {"ADDED_IN_UI", "TEAM_B_KEY"}), (default["name"], set())):
            listed = api.get(
                "/secrets", params={"scope": "workspace"}, headers={"X-Regatta-Workspace": workspace}
            )
            assert {s["name"] for s in listed.json()["environment_secrets"]} == expected, workspace

    page.get_by_label("Workspace").select_option(default["id"])
    expect(page).to_have_url(f"{stack.url}/benchmarks")
    expect(page.get_by_role("link", name="regatta-examples")).to_be_visible()
    page.goto(f"{stack.url}/secrets")
    expect(page.locator("#secrets-body tr[data-name='ADDED_IN_UI']")).to_have_count(0)
