"""Issue 7, the web UI: a trajectory read as a conversation; stopping a running run."""

from __future__ import annotations

import re
from pathlib import Path

from playwright.sync_api import Page, expect

from tests.e2e.web_ui_support import (
    ACK_WAIT,
    LONG,
    add_folder_benchmark,
    assert_same_page,
    mark_page,
    phone_shot,
    shot,
    sign_in,
    write_talking_task,
    write_tasks,
)

ORACLE_RUN = (
    '[experiment]\nbenchmark = "{benchmark}"\n[[agents]]\nharness = "oracle"\n'
    '[agents.model]\ntype = "hosted"\nbase_model = "none"\n'
    "[execution]\nmax_concurrent_attempts = 1\nmax_retries = 3\n"
)


def test_a_trajectory_reads_as_a_conversation_and_a_running_run_can_be_stopped(
    shared_stack, api_for, page: Page, tmp_path: Path
) -> None:
    stack = shared_stack(executors=1, **ACK_WAIT)
    api = api_for(stack)
    write_talking_task(tmp_path / "talk")
    add_folder_benchmark(api, tmp_path / "talk", "talk")
    write_tasks(tmp_path / "slow", 6, sleep=4, prefix="slow")
    slow_id = add_folder_benchmark(api, tmp_path / "slow", "slow")
    api.benchmark_ready("talk")
    api.benchmark_ready("slow")
    talk = api.submit_toml(ORACLE_RUN.format(benchmark="talk"))
    assert api.wait_run(talk["id"])["benchmark_run"]["status"] == "finished"
    sign_in(page, stack)

    # The attempt's trajectory.json, read through the downloads route, renders as a conversation.
    page.goto(f"{stack.url}/benchmarks/runs/{talk['id']}?tab=results")
    results = page.get_by_test_id("results-table")
    results.get_by_role("button", name=re.compile(r"Details of talk-000")).click()
    expect(results.get_by_test_id("artifacts")).to_contain_text("agent/trajectory.json")
    results.get_by_test_id("show-conversation").click()
    conversation = results.get_by_test_id("conversation")
    expect(conversation).to_contain_text("Write done to /app/out.txt")
    expect(conversation).to_contain_text("I will write the file.")
    expect(conversation).to_contain_text("→ bash(")
    expect(conversation).to_contain_text("The file is written.")
    expect(conversation.locator(".msg-agent")).to_have_count(2)
    shot(page, "run-trajectory")
    phone_shot(page, "run-trajectory")

    # A slow run: its row on the benchmark page offers Stop; the run page stops it and updates live.
    created = api.submit_toml(ORACLE_RUN.format(benchmark="slow"))
    page.goto(f"{stack.url}/benchmarks/{slow_id}")
    row = page.get_by_test_id("runs-table").locator(f"tr[data-run-id='{created['id']}']")
    expect(row.get_by_role("button", name="Stop")).to_be_visible()
    shot(page, "benchmark-runs-running")

    row.get_by_role("link").first.click()
    expect(page.get_by_test_id("run-status")).to_contain_text("running", timeout=LONG)
    expect(page.get_by_test_id("run-duration")).to_contain_text("so far")
    mark_page(page)
    page.once("dialog", lambda dialog: dialog.accept())
    page.get_by_test_id("stop-run").click()
    expect(page.get_by_test_id("run-status")).to_contain_text("stopped", timeout=LONG)
    expect(page.get_by_test_id("stop-run")).to_have_count(0)
    assert_same_page(page)
    detail = api.get(f"/runs/{created['id']}")
    assert detail["benchmark_run"]["status"] == "stopped"
    assert detail["progress"]["ingested"] < detail["progress"]["expected"]
    shot(page, "run-stopped")
