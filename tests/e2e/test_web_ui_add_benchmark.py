"""Issue 19 item 1 in the web UI: the Add Benchmark dialog lists the default registry's datasets (name,
version, description, task count), searches them and adds one with a click; the hub and git sources are
there too; an unreachable registry is said so and a registry URL or path is still accepted. Screenshots at
desktop and phone widths, each checked as a person would read it (web_ui_layout.py)."""

from __future__ import annotations

import socket
from pathlib import Path

from playwright.sync_api import Page, expect

from tests.e2e.default_registry_support import write_default_registry
from tests.e2e.web_ui_layout import assert_readable
from tests.e2e.web_ui_support import ACK_WAIT, LONG, sign_in
from tests.integration.harbor_hub import HarborHub
from tests.integration.registry_sync_support import EXAMPLE_TASKS, commit_all, init_repo, write_task

DIALOG = "#add-benchmark"


def test_browse_search_and_add_from_the_default_registry_the_hub_and_git(
    make_stack, page: Page, tmp_path: Path
) -> None:
    registry = write_default_registry(tmp_path / "registry")
    repo = tmp_path / "repo"
    init_repo(repo)
    for index, name in enumerate(("alpha", "beta")):
        write_task(repo / "tasks" / name, index)
    commit_all(repo, "first")
    hub = HarborHub().start()
    try:
        tasks = [hub.publish_task("acme", EXAMPLE_TASKS / name) for name in ("hello-file", "rot13")]
        hub.publish_dataset("acme", "mini", tasks, ["latest"])
        stack = make_stack(
            executors=1,
            REGATTA_DEFAULT_REGISTRY=str(registry),
            HARBOR_SUPABASE_URL=hub.url,
            HARBOR_SUPABASE_PUBLISHABLE_KEY="sb_publishable_standin",
            REGATTA_OUTBOUND_ALLOW="127.0.0.1",
            **ACK_WAIT,
        )
        sign_in(page, stack)

        page.get_by_role("button", name="Add Benchmark").click()
        dialog = page.get_by_role("dialog", name="Add Benchmark")
        items = dialog.locator("[data-registry-list] li")
        expect(items).to_have_count(4)
        expect(dialog.get_by_role("status")).to_have_text("4 datasets")
        tiny = dialog.locator("li[data-dataset='tiny-bench@1.0']")
        expect(tiny).to_contain_text("tiny-bench")
        expect(tiny).to_contain_text("1.0")
        expect(tiny).to_contain_text("3 tasks")
        expect(tiny).to_contain_text("Three tiny tasks that write a file")
        expect(dialog.locator("li[data-dataset='tiny-bench@0.9']")).to_contain_text("1 task")
        expect(dialog).to_contain_text(f"Datasets of {registry}")
        assert_readable(
            page,
            "add-benchmark-registry",
            [
                "Add Benchmark",
                "Search the default registry",
                "4 datasets",
                "hello-bench",
                "2 tasks",
                "Two greetings, checked by a script",
                "long-description-bench",
            ],
            selector=DIALOG,
        )

        # Searching narrows the list (name or description, every word); nothing found is said so.
        search = dialog.get_by_label("Search the default registry")
        search.fill("greetings")
        expect(items).to_have_count(1)
        expect(items.first).to_contain_text("hello-bench")
        expect(dialog.get_by_role("status")).to_have_text("1 dataset matches “greetings”.")
        search.fill("no such thing")
        expect(dialog.get_by_role("status")).to_have_text("No dataset matches “no such thing”.")
        expect(items).to_have_count(0)
        search.fill("tiny")
        expect(items).to_have_count(2)
        assert_readable(
            page,
            "add-benchmark-search",
            [
                "tiny-bench",
                "3 tasks",
                "Three tiny tasks that write a file",
                "1 task",
                "The first tiny task alone",
            ],
            selector=DIALOG,
        )

        # A name that is not there: the dialog says which names are close, and adds nothing.
        # Add with nothing named: the folded field at fault opens and is marked.
        typed = dialog.get_by_label("Dataset", exact=True)
        expect(typed).to_be_hidden()
        dialog.get_by_role("button", name="Add", exact=True).click()
        expect(dialog.locator("[data-form-error]")).to_have_text("dataset (name[@version]) is required")
        expect(typed).to_be_visible()
        expect(typed).to_have_attribute("aria-invalid", "true")
        typed.fill("tiny-bnch")
        dialog.get_by_role("button", name="Add", exact=True).click()
        error = dialog.locator("[data-form-error]")
        expect(error).to_have_text(
            "dataset 'tiny-bnch' is not in the default registry; close names: tiny-bench"
        )
        expect(dialog.get_by_label("Dataset", exact=True)).to_have_attribute("aria-invalid", "true")
        assert_readable(
            page,
            "add-benchmark-unknown-name",
            ["close names: tiny-bench"],
            selector=DIALOG,
            scroll_to=f"{DIALOG} [data-form-error]",
        )

        # One click adds a listed dataset under the name typed, and it syncs.
        dialog.get_by_label("Name (optional)").fill("tiny-old")
        dialog.get_by_role("button", name="Add tiny-bench@0.9").click()
        expect(dialog).to_be_hidden()
        expect(page.locator("#toast")).to_have_text("Benchmark added; its task list is syncing")
        expect(page.locator("tr[data-name='tiny-old']").get_by_test_id("task-count")).to_have_text(
            "1", timeout=LONG
        )

        # The hub and a git repository are in the dialog too.
        page.get_by_role("button", name="Add Benchmark").click()
        expect(dialog.get_by_label("Name (optional)")).to_have_value("")
        dialog.get_by_label("Harbor hub").check()
        dialog.get_by_label("Hub dataset").fill("acme/mini")
        assert_readable(page, "add-benchmark-hub", ["Hub dataset", "org/name"], selector=DIALOG)
        dialog.get_by_role("button", name="Add", exact=True).click()
        expect(dialog).to_be_hidden()
        expect(page.locator("tr[data-name='acme/mini']").get_by_test_id("task-count")).to_have_text(
            "2", timeout=LONG
        )

        page.get_by_role("button", name="Add Benchmark").click()
        dialog.get_by_label("Git repository").check()
        dialog.get_by_label("Repository", exact=True).fill(str(repo))
        dialog.get_by_label("Ref (optional)").fill("main")
        dialog.get_by_label("Name (optional)").fill("ui-git")
        assert_readable(page, "add-benchmark-git", ["Repository", "Tasks folder"], selector=DIALOG)
        dialog.get_by_role("button", name="Add", exact=True).click()
        expect(dialog).to_be_hidden()
        expect(page.locator("tr[data-name='ui-git']").get_by_test_id("task-count")).to_have_text(
            "2", timeout=LONG
        )
    finally:
        hub.stop()


def test_an_unreachable_registry_is_said_so_and_a_path_is_still_accepted(
    make_stack, page: Page, tmp_path: Path
) -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]  # closed once the probe is: nothing listens there
    url = f"http://127.0.0.1:{port}/registry.json"
    registry = write_default_registry(tmp_path / "registry")
    stack = make_stack(
        executors=1, REGATTA_DEFAULT_REGISTRY=url, REGATTA_OUTBOUND_ALLOW=f"127.0.0.1:{port}", **ACK_WAIT
    )
    sign_in(page, stack)

    page.get_by_role("button", name="Add Benchmark").click()
    dialog = page.get_by_role("dialog", name="Add Benchmark")
    warning = dialog.locator("[data-registry-unreachable]")
    expect(warning).to_have_text(
        f"The default registry cannot be reached: registry {url}: unreachable. You can still give a registry "
        "URL or path below, or use the hub, a git repository or a folder."
    )
    expect(dialog.locator("[data-registry-list]")).to_be_hidden()
    # The fields that need no list are open already.
    expect(dialog.get_by_label("Registry URL or path")).to_be_visible()
    assert_readable(
        page, "add-benchmark-unreachable", ["cannot be reached", "Registry URL or path"], selector=DIALOG
    )

    dialog.get_by_label("Dataset", exact=True).fill("hello-bench@2.0")
    dialog.get_by_label("Registry URL or path").fill(str(registry))
    dialog.get_by_role("button", name="Add", exact=True).click()
    expect(dialog).to_be_hidden()
    row = page.locator("tr[data-name='hello-bench']")
    expect(row.get_by_test_id("task-count")).to_have_text("2", timeout=LONG)
