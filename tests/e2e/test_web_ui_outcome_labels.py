"""Issue 27, finding 5, as a person sees it: an attempt whose sandbox left the verifier without a
verdict is `failed` on the run page, tagged "no verdict" with its reason, its details say why it
failed, and each outcome's badge says what it means; the CLI's results table says what Failed and
Errored count (statistics.md §1)."""

from __future__ import annotations

from pathlib import Path

from playwright.sync_api import Page, expect

from tests.e2e.test_cli import regatta
from tests.e2e.test_executor import add_folder
from tests.e2e.web_ui_support import ACK_WAIT, RUN, shot, sign_in
from tests.support.tasks import run_toml, write_task


def test_a_failure_without_a_verdict_is_labelled_with_its_reason(
    shared_stack, api_for, page: Page, tmp_path: Path
) -> None:
    stack = shared_stack(executors=1, **ACK_WAIT)
    api = api_for(stack)
    root = tmp_path / "tasks"
    write_task(root, "fine")
    endless = write_task(root, "endless-verifier", verifier_timeout=2)
    (endless / "tests" / "test.sh").write_text("#!/bin/bash\nsleep 100\necho 1 > /logs/verifier/reward.txt\n")
    add_folder(api, root, "verdicts")
    run_id = api.submit_toml(run_toml("verdicts"))["id"]
    detail = api.wait_run(run_id, timeout=RUN / 1000)
    totals = detail["totals"]
    assert (totals["passed"], totals["failed"], totals["errored"]) == (1, 1, 0), totals

    sign_in(page, stack)
    page.goto(f"{stack.url}/benchmarks/runs/{run_id}")
    page.get_by_role("tab", name="Task Results").click()
    row = page.locator("tr[data-attempt-id]", has_text="endless-verifier")
    expect(row).to_contain_text("failed")
    tag = row.get_by_test_id("no-verdict-tag")
    expect(tag).to_have_text("no verdict")
    expect(tag).to_have_attribute("title", "Verifier execution timed out after 2.0 seconds")
    expect(row.locator(".badge")).to_have_attribute("title", OUTCOME_FAILED)
    fine = page.locator("tr[data-attempt-id]", has_text="fine")
    expect(fine.get_by_test_id("no-verdict-tag")).to_have_count(0)
    expect(fine.locator(".badge")).to_have_attribute(
        "title", "Scored: the primary reward reached the run's pass threshold."
    )
    row.get_by_role("button").first.click()
    reason = page.locator("tr.detail")
    expect(reason.get_by_role("heading", name="Why it failed")).to_be_visible()
    expect(reason).to_contain_text("VerifierTimeoutError: Verifier execution timed out after 2.0 seconds")
    shot(page, "run-no-verdict")

    shown = regatta(stack, "run", "show", run_id, COLUMNS="400")
    assert shown.returncode == 0, shown.stderr
    text = " ".join(shown.stdout.split())
    assert "Failed includes attempts whose sandbox the agent left unfit for a verdict." in text, shown.stdout
    assert "Errored: not scored, a fault outside the sandbox" in text, shown.stdout


OUTCOME_FAILED = (
    "Scored as a failure: the reward is below the threshold, or the agent left its sandbox in a state "
    "in which the verifier could give no verdict (the reason is in the details)."
)
