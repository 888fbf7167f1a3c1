"""Issue 7, the web UI's benchmarks list: sign-in, Add Benchmark, the live sync, a failure, retry, remove."""

from __future__ import annotations

import re
from pathlib import Path

from playwright.sync_api import Page, expect

from tests.e2e.web_ui_support import (
    ACK_WAIT,
    LONG,
    WAIT,
    assert_same_page,
    mark_page,
    phone_shot,
    shot,
    sign_in,
    write_tasks,
)


def test_sign_in_add_benchmark_and_watch_the_sync_live(
    shared_stack, api_for, page: Page, tmp_path: Path
) -> None:
    stack = shared_stack(executors=1, **ACK_WAIT)
    api = api_for(stack)
    api.benchmark_ready("regatta-examples")

    page.set_default_timeout(WAIT)
    page.goto(f"{stack.url}/signin")
    page.get_by_label("API token").fill("rg_not-a-token")
    page.get_by_role("button", name="Sign in").click()
    expect(page.get_by_role("alert")).to_contain_text("Invalid token")
    shot(page, "signin")
    sign_in(page, stack)

    # Enough tasks that the registry-sync takes a few seconds, so the progress is visible.
    folder = tmp_path / "ui-tasks"
    write_tasks(folder, 500)
    mark_page(page)
    page.get_by_role("button", name="Add Benchmark").click()
    dialog = page.get_by_role("dialog", name="Add Benchmark")
    expect(dialog).to_be_visible()
    dialog.get_by_label("Local folder").check()
    dialog.get_by_label("Folder path").fill(str(folder))
    dialog.get_by_label("Name").fill("ui-local")
    row = page.locator("tr[data-name='ui-local']")
    # Record every text the row's Last Run cell shows, to prove it moved through the sync live.
    page.evaluate(
        """() => { window.__lastRun = []; new MutationObserver(() => {
             const cell = document.querySelector("tr[data-name='ui-local'] .cell-lastrun");
             if (cell) window.__lastRun.push(cell.innerText.trim().replace(/\\s+/g, ' '));
           }).observe(document.querySelector('[data-region=rows]'), {childList: true, subtree: true}); }"""
    )
    dialog.get_by_role("button", name="Add", exact=True).click()
    expect(dialog).to_be_hidden()
    expect(row).to_be_visible()
    expect(row.get_by_test_id("task-count")).to_have_text("500", timeout=LONG)
    assert_same_page(page)
    seen = page.evaluate("window.__lastRun")
    assert any(re.match(r"(Sync queued|Syncing)", text) for text in seen), seen
    progress = [text for text in seen if re.search(r"Syncing \d+/500 tasks", text)]
    print("sync states shown:", seen)
    assert progress, f"no synced/total progress was shown: {seen}"
    shot(page, "benchmarks")
    phone_shot(page, "benchmarks")

    # A folder that does not exist: the sync fails, the row says why, Tasks says `unavailable`.
    page.get_by_role("button", name="Add Benchmark").click()
    dialog.get_by_label("Local folder").check()
    dialog.get_by_label("Folder path").fill(str(tmp_path / "missing"))
    dialog.get_by_label("Name").fill("ui-broken")
    dialog.get_by_role("button", name="Add", exact=True).click()
    broken = page.locator("tr[data-name='ui-broken']")
    expect(broken.get_by_test_id("sync-error")).to_contain_text("Sync failed", timeout=LONG)
    expect(broken.get_by_test_id("task-count")).to_have_text("unavailable")
    shot(page, "benchmarks-sync-failed")

    # Its page offers Retry sync and Remove in the actions menu.
    broken.get_by_role("link", name="ui-broken").click()
    expect(page.get_by_role("heading", level=1)).to_contain_text("ui-broken")
    expect(page.get_by_test_id("sync-line")).to_contain_text("Sync failed")
    page.get_by_test_id("actions-menu").click()
    page.get_by_role("menuitem", name="Retry sync").click()
    expect(page.get_by_test_id("sync-line")).to_contain_text(re.compile("Sync queued|Syncing|Sync failed"))
    expect(page.get_by_test_id("sync-line")).to_contain_text("Sync failed", timeout=LONG)
    page.once("dialog", lambda d: d.accept())
    page.get_by_test_id("actions-menu").click()
    page.get_by_role("menuitem", name="Remove").click()
    expect(page).to_have_url(f"{stack.url}/benchmarks")
    expect(page.locator("tr[data-name='ui-broken']")).to_have_count(0)
    expect(page.locator("tr[data-name='ui-local']")).to_have_count(1)

    # The synced benchmark's page: task-count badge and a source reference that copies on click.
    page.get_by_role("link", name="ui-local").click()
    expect(page.get_by_test_id("task-count-badge")).to_have_text("500 tasks")
    page.context.grant_permissions(["clipboard-read", "clipboard-write"])
    page.get_by_test_id("source-ref").click()
    expect(page.locator("#toast")).to_have_text("Copied to the clipboard")
    assert page.evaluate("navigator.clipboard.readText()") == str(folder)
    page.get_by_test_id("actions-menu").click()
    page.get_by_role("menuitem", name="View source").click()
    expect(page.get_by_role("dialog")).to_contain_text(str(folder))
    page.keyboard.press("Escape")

    # Signing out forgets the cookie: pages go back to sign-in.
    page.get_by_role("button", name="Sign out").click()
    expect(page).to_have_url(f"{stack.url}/signin")
    page.goto(f"{stack.url}/secrets")
    expect(page).to_have_url(re.compile(r"/signin\?next=%2Fsecrets$"))
