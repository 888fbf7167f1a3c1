"""Issue 38, the web UI's rough edges, in a real browser: a running run's row (Compare and Stop) and its
Agent Results fit a desktop's width, 1400 px included; Pass@1 is on a phone's screen on the leaderboard and
the run page; "Unlimited" is never broken inside the word. Screenshots of each page at 1280, 1400, 1440, 1600
and 390 px land in test-artifacts/screenshots/."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from playwright.sync_api import Locator, Page, expect

from tests.e2e.web_ui_layout import assert_readable
from tests.e2e.web_ui_support import ACK_WAIT, PHONE, add_folder_benchmark, sign_in
from tests.support.gates import Gate
from tests.support.tasks import write_task

AT_1400 = {"width": 1400, "height": 900}
ORACLE = {"harness": "oracle", "model": {"type": "hosted", "base_model": "none"}}
NOP = {"harness": "nop", "model": {"type": "hosted", "base_model": "none"}}


def submit(api: Any, benchmark: str, name: str, agents: list[dict[str, Any]]) -> str:
    body = {
        "name": name,
        "experiment_config": {"benchmark": benchmark},
        "agents": agents,
        "execution_config": {"attempts_per_task": 1, "max_concurrent_attempts": 1},
    }
    created = api.http.post("/api/v1/runs", json=body)
    assert created.status_code == 201, created.text
    return created.json()["id"]


def assert_on_screen(page: Page, cells: Locator, what: str) -> None:
    """Each of `cells` drawn wholly inside the screen and its table's box: seen without scrolling sideways.
    Measured in one pass, as the page may redraw a live region between two reads."""
    expect(cells.first).to_be_visible()
    ends = cells.evaluate_all(
        """(cells) => cells.map((cell) => [cell.getBoundingClientRect().right,
             Math.min(innerWidth, cell.closest('.table-wrap').getBoundingClientRect().right)])"""
    )
    assert ends, f"{what}: nothing found"
    cut = [(round(right), round(room)) for right, room in ends if right > room + 1]
    assert not cut, f"{what}: cells end past their room (end, room in px): {cut}"


def test_a_running_runs_row_and_results_fit_and_pass_at_1_is_on_a_phones_screen(
    shared_stack, api_for, page: Page, tmp_path: Path, host_gate: Gate
) -> None:
    stack = shared_stack(executors=1, **ACK_WAIT)
    api = api_for(stack)
    tasks = tmp_path / "edges"
    write_task(tasks, "edge-000")
    # The oracle's attempt of this task waits on the gate: shut, it keeps the second run running.
    write_task(tasks, "edge-001", solve=host_gate.wait(300) + "echo done > /app/out.txt", agent_timeout=400)
    host_gate.open()
    add_folder_benchmark(api, tasks, "edges")
    api.benchmark_ready("edges")
    finished = submit(api, "edges", "edges-finished", [ORACLE, NOP])
    assert api.wait_run(finished)["benchmark_run"]["status"] == "finished"
    host_gate.path.unlink()
    running_name = "a-running-run-of-four-agents-whose-name-is-longer-than-its-column"
    running = submit(api, "edges", running_name, [ORACLE, NOP, NOP, NOP])
    api.wait_for(lambda: api.get(f"/runs/{running}")["benchmark_run"]["status"] == "running")

    benchmark_id = api.benchmark_ready("edges")["id"]
    api.wait_for(lambda: api.get(f"/benchmarks/{benchmark_id}/leaderboard")["leaderboard"])
    sign_in(page, stack)
    page.goto(f"{stack.url}/benchmarks/{benchmark_id}")
    row = page.locator(f"tr[data-run-id='{running}']")
    # The running run's row offers both Compare (with the finished run below it) and Stop.
    expect(row.get_by_test_id("compare-previous")).to_be_visible()
    expect(row.get_by_role("button", name="Stop")).to_be_visible()
    for width in (1280, 1400, 1440, 1600):
        page.set_viewport_size({"width": width, "height": 900})
        assert_on_screen(page, row.locator(".cell-actions .btn"), f"Compare and Stop at {width}px")
    assert_readable(page, "edges-benchmark-running", ["Pass@1", "Benchmark Runs"], also=[AT_1400])

    page.set_viewport_size(PHONE)
    board = page.get_by_test_id("leaderboard-table")
    assert_on_screen(page, board.locator("thead th.num").first, "the leaderboard's Pass@1 heading")
    assert_on_screen(page, board.locator("tbody tr td.num:nth-child(5)"), "the leaderboard's Pass@1 cells")
    # The task set and version, out of their columns on a phone, are said under the agent.
    expect(board.get_by_test_id("row-where").first).to_contain_text("Full list")

    page.set_viewport_size({"width": 1280, "height": 900})
    page.goto(f"{stack.url}/benchmarks/runs/{running}")
    results = page.get_by_test_id("agent-results")
    expect(results.locator("tbody tr")).to_have_count(4)
    expect(results).to_contain_text("running")
    for width in (1280, 1400, 1440, 1600):
        page.set_viewport_size({"width": width, "height": 900})
        assert_on_screen(page, results.locator("thead th"), f"Agent Results' headings at {width}px")
        assert_on_screen(page, results.locator("tbody td"), f"Agent Results' cells at {width}px")
    assert_readable(page, "edges-run-running", ["Agent Results", "Pass@1"], also=[AT_1400])
    page.set_viewport_size(PHONE)
    assert_on_screen(page, results.locator("thead th:nth-child(4)"), "Agent Results' Pass@1 heading")
    assert_on_screen(page, results.locator("tbody td:nth-child(4)"), "Agent Results' Pass@1 cells")
    page.goto(f"{stack.url}/benchmarks/runs/{finished}")
    assert_on_screen(page, results.locator("tbody td:nth-child(4)"), "a finished run's Pass@1 cells")
    expect(results.locator("tbody td:nth-child(4)").first).to_contain_text("%")

    # A workspace without a budget: "Unlimited" remains, whole, at every width.
    page.set_viewport_size({"width": 1280, "height": 900})
    page.goto(f"{stack.url}/settings/workspace")
    expect(page.get_by_test_id("budget").locator("[data-budget=remaining]")).to_have_text("Unlimited")
    assert_readable(page, "edges-settings-unlimited", ["No budget", "Unlimited"], also=[AT_1400])


def test_source_selection_search_grading_and_logs_read_as_the_product_says(
    shared_stack, api_for, page: Page, tmp_path: Path
) -> None:
    stack = shared_stack(executors=1, **ACK_WAIT)
    api = api_for(stack)
    tasks = tmp_path / "plain"
    for index in range(2):
        write_task(tasks, f"plain-{index:03d}", category="odd" if index % 2 else "even")
    benchmark_id = add_folder_benchmark(api, tasks, "plain")
    api.benchmark_ready("plain")
    run_id = submit(api, "plain", "plain-run", [ORACLE])
    assert api.wait_run(run_id)["benchmark_run"]["status"] == "finished"
    sign_in(page, stack)

    # View source: the admin's folder is a trusted source, said in words, never as a Python value.
    page.goto(f"{stack.url}/benchmarks/{benchmark_id}")
    page.get_by_test_id("actions-menu").click()
    page.get_by_role("menuitem", name="View source").click()
    source = page.get_by_role("dialog")
    expect(source).to_contain_text("trusted: added by a platform administrator")
    expect(source).not_to_contain_text(re.compile(r"\b(True|False)\b"))
    assert_readable(page, "edges-view-source", ["Source of plain", "trusted"], selector="dialog[open]")
    page.keyboard.press("Escape")

    # New Run: a refused setting leaves the task selection said as it is, not "none".
    page.goto(f"{stack.url}/benchmarks/{benchmark_id}/runs/new")
    summary = page.get_by_test_id("summary-tasks")
    expect(summary).to_have_text("2 tasks (all tasks)")
    page.get_by_role("tab", name="Run settings").click()
    page.get_by_label("Attempts per task").fill("0")
    expect(page.get_by_test_id("summary-total")).to_contain_text("No attempts")
    expect(summary).to_have_text("all tasks (not counted: a setting has an issue)")
    page.get_by_label("Attempts per task").fill("1")
    page.get_by_role("tab", name="Tasks").click()
    page.locator("input[name=task_mode][value=categories]").check()
    expect(summary).not_to_contain_text("none")
    expect(summary).to_contain_text("no category chosen")
    page.locator("input[name=category][value=odd]").check()
    expect(summary).to_have_text("1 task (category odd)")
    assert_readable(page, "edges-new-run-selection", ["1 task (category odd)"])

    # Task Results: the search is kept in the address, so a reload (or the link, shared) shows it again.
    page.goto(f"{stack.url}/benchmarks/runs/{run_id}?tab=results")
    results = page.get_by_test_id("results-table")
    expect(results.locator("tbody tr")).to_have_count(2)
    page.get_by_placeholder(re.compile("Search task")).fill("plain-001")
    expect(results.locator("tbody tr")).to_have_count(1)
    expect(page).to_have_url(re.compile(r"[?&]q=plain-001(&|$)"))
    page.reload()
    expect(page.get_by_placeholder(re.compile("Search task"))).to_have_value("plain-001")
    expect(results.locator("tbody tr")).to_have_count(1)
    expect(results.locator("tbody tr")).to_contain_text("plain-001")

    # Grading of a task whose verifier writes one reward: its key once, marked primary.
    results.get_by_role("button", name=re.compile(r"Details of plain-001")).click()
    grading = page.get_by_test_id("grading-block")
    expect(grading).to_contain_text("reward1 (primary)")
    assert grading.inner_text().count("reward") == 1, grading.inner_text()
    assert_readable(page, "edges-run-results", ["Grading", "1 (primary)"])

    # Logs: a short run's tab opens at its beginning: the submission first, no "Load older".
    page.get_by_role("tab", name="Logs").click()
    rows = page.get_by_test_id("logs-table").locator("tbody tr")
    expect(rows.first).to_contain_text("Run submitted")
    expect(page.get_by_test_id("logs-table")).to_contain_text("Run finished")
    expect(page.get_by_role("button", name="Load older")).to_be_hidden()
    assert_readable(page, "edges-run-logs", ["Lifecycle events from submission to cleanup"])
