"""Issue 38 in the web UI: Try Your Tasks uploads a task archive as a scratch benchmark, follows its sync
and offers to start a run of it; a hostile archive is refused in the dialog, naming the entry, and
nothing is added. Screenshots at 1280/1400/1440/1600 px and a phone's 390 px (web_ui_layout.py)."""

from __future__ import annotations

import io
import re
import tarfile
from pathlib import Path

from playwright.sync_api import Page, expect

from tests.e2e.web_ui_layout import assert_readable
from tests.e2e.web_ui_support import ACK_WAIT, LONG, phone_shot, shot, sign_in
from tests.support.tasks import run_toml, write_task


def _archive(folder: Path, target: Path) -> Path:
    with tarfile.open(target, "w:gz") as archive:
        archive.add(folder, arcname=folder.name)
    return target


def _linked_out(target: Path) -> Path:
    """A task archive whose tests/ holds a link to the host's /etc/passwd."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as archive:
        for name, data in (("t/task.toml", b""), ("t/instruction.md", b"Do it.\n")):
            member = tarfile.TarInfo(name)
            member.size = len(data)
            archive.addfile(member, io.BytesIO(data))
        link = tarfile.TarInfo("t/tests/passwd")
        link.type = tarfile.SYMTYPE
        link.linkname = "/etc/passwd"
        archive.addfile(link)
    target.write_bytes(buffer.getvalue())
    return target


def test_try_your_tasks_uploads_an_archive_and_offers_a_run(
    shared_stack, api_for, page: Page, tmp_path: Path
) -> None:
    stack = shared_stack(executors=1, **ACK_WAIT)
    api = api_for(stack)
    write_task(tmp_path / "src", "my-ui-task")
    archive = _archive(tmp_path / "src" / "my-ui-task", tmp_path / "my-ui-task.tar.gz")
    sign_in(page, stack)
    before = api.get("/benchmarks")["benchmarks"]

    page.get_by_role("button", name="Try Your Tasks").click()
    dialog = page.get_by_role("dialog", name="Try Your Tasks")
    expect(dialog).to_be_visible()
    assert_readable(
        page,
        "upload-tasks-dialog",
        ["Task archive", "regatta task try ./my-task", "scratch benchmark"],
        selector="#upload-tasks",
    )

    # Hostile first: refused in the dialog with the entry named; nothing is added.
    dialog.get_by_label("Task archive").set_input_files(_linked_out(tmp_path / "evil.tar.gz"))
    dialog.get_by_role("button", name="Upload").click()
    alert = dialog.get_by_role("alert")
    expect(alert).to_contain_text("t/tests/passwd")
    expect(dialog.get_by_label("Task archive")).to_have_attribute("aria-invalid", "true")
    shot(page, "upload-tasks-refused")
    assert api.get("/benchmarks")["benchmarks"] == before

    dialog.get_by_label("Task archive").set_input_files(archive)
    dialog.get_by_label("Name").fill("ui-try")
    dialog.get_by_role("button", name="Upload").click()
    expect(alert).to_be_hidden()
    status = dialog.get_by_role("status")
    expect(status).to_contain_text("Scratch benchmark “ui-try” is ready: 1 task.", timeout=LONG)
    start = dialog.get_by_role("link", name="Start a run")
    expect(start).to_be_visible()
    page.set_viewport_size({"width": 1400, "height": 900})
    shot(page, "upload-tasks-ready-1400")
    phone_shot(page, "upload-tasks-ready")
    page.set_viewport_size({"width": 1280, "height": 900})

    [row] = [b for b in api.get("/benchmarks")["benchmarks"] if b["name"] == "ui-try"]
    assert row["source_type"] == "upload" and row["task_count"] == 1
    listed = page.locator("tr[data-name='ui-try']")
    expect(listed.locator(".tag")).to_have_text("scratch")

    start.click()
    expect(page).to_have_url(re.compile(rf"/benchmarks/{row['id']}/runs/new$"))
    expect(page.locator("main")).to_contain_text("ui-try")


def test_try_your_tasks_packs_a_chosen_folder_in_the_browser(
    shared_stack, api_for, page: Page, tmp_path: Path
) -> None:
    stack = shared_stack(executors=1, **ACK_WAIT)
    api = api_for(stack)
    task = write_task(tmp_path, "folder-task", solve="echo done > /app/out.txt")
    sign_in(page, stack)

    page.get_by_role("button", name="Try Your Tasks").click()
    dialog = page.get_by_role("dialog", name="Try Your Tasks")
    dialog.get_by_label("Or a task folder").set_input_files(task)
    dialog.get_by_role("button", name="Upload").click()
    expect(dialog.get_by_role("status")).to_contain_text(
        "Scratch benchmark “folder-task” is ready: 1 task.", timeout=LONG
    )
    expect(dialog.get_by_role("alert")).to_be_hidden()
    shot(page, "upload-tasks-folder")

    # What the browser packed is a task that runs: its solution passes its test.
    [row] = [b for b in api.get("/benchmarks")["benchmarks"] if b["name"] == "folder-task"]
    run = api.submit_toml(run_toml(row["id"]))
    finished = api.wait_run(run["id"])
    assert finished["benchmark_run"]["status"] == "finished", finished
    attempts = api.get(f"/runs/{run['id']}/attempts")["attempts"]
    assert [(a["task"], a["outcome"]) for a in attempts] == [("folder-task", "passed")], attempts
