"""Issue 38 in a real browser on the running stack: an attempt's grading read from what its verifier really
wrote (a CTRF report, coloured test output, a reward.json of two keys) under the `local` environment,
failed tests first, readable at desktop widths and on a phone; and "Run again", which submits the run's
configuration as a new run once the user confirms.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from playwright.sync_api import Page, expect

from tests.e2e.test_executor import add_folder
from tests.e2e.web_ui_layout import assert_readable
from tests.e2e.web_ui_support import ACK_WAIT, LONG, shot, sign_in
from tests.support.tasks import run_toml, write_task

CTRF = {
    "results": {
        "tool": {"name": "pytest"},
        "tests": [
            {"name": "test_file_exists", "status": "passed", "duration": 3},
            {"name": "test_permissions", "status": "passed", "duration": 1},
            {
                "name": "test_content <b>is done</b>",
                "status": "failed",
                "duration": 12,
                "message": "AssertionError: expected 'done', got 'dome'",
                "trace": "tests/test_out.py:7: in test_content\n    assert text == 'done'",
            },
            {"name": "test_network", "status": "skipped"},
        ],
    }
}
# What tests/test.sh runs: a test runner's coloured output (to test-stdout.txt, as Harbor redirects it),
# the CTRF report and a reward of two keys.
GRADED_TEST = f"""#!/bin/bash
printf '\\033[1;31mFAILED\\033[0m tests/test_out.py::test_content\\n'
printf '\\033[32mPASSED\\033[0m tests/test_out.py::test_file_exists\\n'
echo '=== 1 failed, 2 passed, 1 skipped ==='
cat > /logs/verifier/ctrf.json <<'JSON'
{json.dumps(CTRF)}
JSON
echo '{{"reward": 1, "style": 0.5}}' > /logs/verifier/reward.json
"""


def _graded_run(stack: Any, api: Any, tmp_path: Path, name: str) -> tuple[str, dict[str, Any]]:
    tasks = tmp_path / "tasks"
    write_task(tasks, "graded")
    (tasks / "graded" / "tests" / "test.sh").write_text(GRADED_TEST)
    add_folder(api, tasks, name)
    run_id = api.submit_toml(run_toml(name))["id"]
    detail = api.wait_run(run_id)
    assert detail["benchmark_run"]["status"] == "finished", api.artifact_texts(run_id)
    (attempt,) = api.get(f"/runs/{run_id}/attempts")["attempts"]
    assert attempt["outcome"] == "passed", api.artifact_texts(run_id)
    return run_id, attempt


def test_the_attempt_page_shows_failed_tests_first_each_reward_once_and_the_output_as_text(
    shared_stack, api_for, tmp_path: Path, page: Page
) -> None:
    stack = shared_stack(executors=1, **ACK_WAIT)
    api = api_for(stack)
    run_id, attempt = _graded_run(stack, api, tmp_path, "graded-tasks")
    assert attempt["result"]["rewards"] == {"reward": 1.0, "style": 0.5}
    sign_in(page, stack)

    # Task Results: each reward key once, the primary one marked, and the way to the tests.
    page.goto(f"{stack.url}/benchmarks/runs/{run_id}?tab=results")
    page.get_by_role("button", name=re.compile("^Details of graded")).click()
    grading = page.get_by_test_id("grading-block")
    expect(grading).to_contain_text("reward1 (primary)")
    expect(grading).to_contain_text("style0.5")
    expect(grading).not_to_contain_text("reward · ")
    grading.get_by_role("link", name="Tests and verifier output on the attempt page").click()

    expect(page.get_by_test_id("grading")).to_be_visible()
    expect(page.get_by_test_id("reward-key")).to_have_text(["reward", "style"])
    expect(page.get_by_test_id("reward-primary")).to_have_count(1)
    expect(page.get_by_test_id("test-counts")).to_contain_text("1 failed")
    expect(page.get_by_test_id("test-counts")).to_contain_text("of 4 tests")
    rows = page.get_by_test_id("test-row")
    expect(rows).to_have_count(4)
    # Failed first, then skipped, then passed; the name's markup is text.
    statuses = [rows.nth(i).get_attribute("data-status") for i in range(4)]
    assert statuses == ["failed", "skipped", "passed", "passed"], statuses
    expect(rows.first.get_by_test_id("test-name")).to_have_text("test_content <b>is done</b>")
    expect(rows.first.get_by_test_id("test-message")).to_have_text(
        "AssertionError: expected 'done', got 'dome'"
    )
    assert page.locator("[data-testid=grading] b").count() == 0
    output = page.get_by_test_id("verifier-output")
    expect(output).to_contain_text("FAILED tests/test_out.py::test_content")
    expect(output).to_contain_text("=== 1 failed, 2 passed, 1 skipped ===")
    assert "\x1b" not in output.inner_text() and "[1;31m" not in output.inner_text()

    page.set_viewport_size({"width": 1400, "height": 900})
    shot(page, "attempt-grading-1400")
    assert_readable(
        page,
        "attempt-grading",
        ["Grading", "Rewards", "primary", "test_content <b>is done</b>", "1 failed", "Verifier output"],
        selector="[data-testid=grading]",
    )
    page.set_viewport_size({"width": 390, "height": 844})
    shot(page, "attempt-grading-390")


def test_run_again_submits_the_runs_configuration_as_a_new_run_once_confirmed(
    shared_stack, api_for, tmp_path: Path, page: Page
) -> None:
    stack = shared_stack(executors=1, **ACK_WAIT)
    api = api_for(stack)
    run_id, _ = _graded_run(stack, api, tmp_path, "run-again-tasks")
    before = api.get(f"/runs/{run_id}")
    sign_in(page, stack)
    page.goto(f"{stack.url}/benchmarks/runs/{run_id}")

    page.get_by_test_id("run-again").click()
    dialog = page.get_by_test_id("run-again-dialog")
    expect(dialog).to_be_visible()
    expect(dialog).to_contain_text("A new run of run-again-tasks with this run's 1 agent")
    dialog.locator("summary").click()
    expect(dialog.get_by_test_id("run-again-toml")).to_contain_text('benchmark = "run-again-tasks"')
    shot(page, "run-again-dialog")
    # Cancelled, nothing is submitted.
    dialog.get_by_role("button", name="Cancel").click()
    expect(dialog).to_be_hidden()
    assert len(api.get("/runs")["benchmark_runs"]) == 1

    page.get_by_test_id("run-again").click()
    dialog.get_by_test_id("run-again-submit").click()
    expect(page).not_to_have_url(re.compile(re.escape(run_id)), timeout=LONG)
    expect(page).to_have_url(re.compile(r"/benchmarks/runs/run_[0-9a-z]+$"))
    new_id = page.url.rsplit("/", 1)[-1]
    after = api.wait_run(new_id)
    assert after["benchmark_run"]["status"] == "finished"
    assert after["configuration"]["toml"] == before["configuration"]["toml"]
    assert after["configuration"]["config"] == before["configuration"]["config"]
    assert [(a["harness"], a["model_ref"]) for a in after["agents"]] == [
        (a["harness"], a["model_ref"]) for a in before["agents"]
    ]
    expect(page.get_by_test_id("run-status")).to_contain_text("finished", timeout=LONG)
