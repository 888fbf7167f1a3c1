"""Issue 7, the web UI's New Run form and run page: a missing secret flagged, validation, submit, live
progress, results. Issue 19: the summary's counts, a required judge key, names and labels, the cost axis.
"""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import httpx
import pytest
from playwright.sync_api import Page, expect

from tests.conftest import EXAMPLES
from tests.e2e.web_ui_layout import assert_readable
from tests.e2e.web_ui_support import (
    ACK_WAIT,
    RUN,
    WAIT,
    add_folder_benchmark,
    assert_same_page,
    mark_page,
    phone_shot,
    shot,
    sign_in,
    write_tasks,
)
from tests.support.scripted_llm import ScriptedLLM, terminus_reply


def test_new_run_flags_a_missing_secret_then_submits_and_the_run_page_updates_live(
    make_stack, api_for, page: Page
) -> None:
    # Every attempt reports its start (no started-report delay), so that the run's 20 attempts log
    # more than one page of 50 lines for "Load older" below.
    stack = make_stack(executors=2, REGATTA_STARTED_REPORT_DELAY="0", **ACK_WAIT)
    api = api_for(stack)
    benchmark = api.benchmark_ready("regatta-examples")
    assert benchmark["sync_status"] == "ready"
    sign_in(page, stack)

    page.get_by_role("link", name="regatta-examples").first.click()
    page.get_by_role("link", name="New Run").click()
    expect(page.get_by_role("heading", name="New Run")).to_be_visible()
    expect(page.get_by_test_id("summary-total")).to_have_text("10 tasks × 1 agent × 1 attempt = 10 attempts")

    # Agents: an oracle whose (unused) provider key is a secret record the workspace does not have yet.
    page.get_by_role("tab", name="Agents").click()
    first = page.locator("[data-agent]").nth(0)
    first.get_by_label("Harness", exact=True).select_option("oracle")
    first.get_by_label("Model", exact=True).select_option("provider")
    first.get_by_label("Model name").fill("openai/gpt-4o-mini")
    first.get_by_label("API key secret record").fill("UI_TEST_KEY")
    expect(first.locator("[data-secret-status]").first).to_contain_text("no such secret record")
    flags = page.get_by_test_id("missing-secrets")
    expect(flags).to_contain_text("UI_TEST_KEY")
    page.get_by_role("button", name="Add agent").click()
    second = page.locator("[data-agent]").nth(1)
    second.get_by_label("Harness", exact=True).select_option("nop")
    expect(second.get_by_label("Model", exact=True)).to_have_value("none")
    expect(page.get_by_test_id("summary-total")).to_have_text("10 tasks × 2 agents × 1 attempt = 20 attempts")
    shot(page, "new-run-missing-secret")

    # A bad setting comes back as an issue next to its field, on its tab.
    page.get_by_role("tab", name="Run settings").click()
    page.get_by_label("Attempts per task").fill("0")
    page.get_by_role("button", name="Submit run").click()
    expect(page.locator("[data-error-for='execution.attempts_per_task']")).to_contain_text(
        "greater than or equal to 1"
    )
    expect(page.get_by_label("Attempts per task")).to_have_attribute("aria-invalid", "true")
    expect(page.get_by_test_id("submit-error")).to_be_visible()
    shot(page, "new-run-validation")
    page.get_by_label("Attempts per task").fill("1")
    page.get_by_label("Concurrent attempts").fill("2")
    page.get_by_label("Retries").fill("3")  # infrastructure errors are retried, never scored

    # Submitting while the secret is missing is refused by the server, and said so.
    page.get_by_role("button", name="Submit run").click()
    expect(page.get_by_test_id("submit-error")).to_contain_text("Secret(s) not found: UI_TEST_KEY")

    # Create the secret on the Secrets page (another tab), come back, recheck: the flag clears.
    secrets_page = page.context.new_page()
    secrets_page.set_default_timeout(WAIT)
    secrets_page.goto(f"{stack.url}/secrets?name=UI_TEST_KEY")
    expect(secrets_page.get_by_label("Name")).to_have_value("UI_TEST_KEY")
    secrets_page.get_by_label("Scope").select_option("workspace")
    secrets_page.get_by_label("Value").fill("sk-test-value-never-shown")
    secrets_page.get_by_role("button", name="Save secret").click()
    expect(secrets_page.locator("#secrets-body tr[data-name='UI_TEST_KEY']")).to_contain_text("Workspace")
    assert "sk-test-value-never-shown" not in secrets_page.content()
    expect(secrets_page.get_by_label("Value")).to_have_value("")
    shot(secrets_page, "secrets")
    phone_shot(secrets_page, "secrets")
    secrets_page.close()
    page.bring_to_front()
    page.get_by_role("button", name="Recheck secrets").click()
    expect(flags).to_have_count(0)
    page.get_by_role("tab", name="Agents").click()
    expect(first.locator("[data-secret-status]").first).to_contain_text("found (workspace record)")
    phone_shot(page, "new-run")

    # Billing is checked at submission: a spent workspace budget is refused, and said so plainly.
    response = api.http.put("/api/v1/workspace/budget", json={"budget_usd": 0})
    assert response.status_code == 200, response.text
    page.get_by_role("button", name="Submit run").click()
    refusal = page.get_by_test_id("submit-error")
    expect(refusal).to_contain_text("Budget required")
    expect(refusal).to_contain_text("budget")
    shot(page, "new-run-budget-refused")
    assert api.http.put("/api/v1/workspace/budget", json={"budget_usd": None}).status_code == 200

    page.get_by_role("button", name="Submit run").click()
    expect(page).to_have_url(re.compile(r"/benchmarks/runs/run_"), timeout=WAIT)
    run_id = page.url.rsplit("/", 1)[1].split("?")[0]

    # Live progress: the sidebar's counter moves without a reload until the run finishes.
    mark_page(page)
    progress = page.get_by_test_id("run-progress").locator(".progress-text")
    seen: list[str] = []
    for _ in range(int(RUN / 250)):
        text = progress.inner_text()
        if not seen or seen[-1] != text:
            seen.append(text)
            if len(seen) == 2:
                shot(page, "run-running")
        if page.get_by_test_id("run-status").inner_text().strip().lower() == "finished":
            break
        page.wait_for_timeout(250)
    seen.append(progress.inner_text())
    expect(page.get_by_test_id("run-status")).to_have_text(re.compile("finished", re.I))
    assert seen[-1] == "20/20", seen
    assert len(set(seen)) >= 3, f"progress did not update live: {seen}"
    assert_same_page(page)
    expect(page.get_by_test_id("agent-results")).to_contain_text("oracle")
    expect(page.get_by_test_id("agent-results").locator("tbody tr").first).to_contain_text("100.0%")
    expect(page.get_by_test_id("categories")).to_contain_text("files")
    shot(page, "run-overview")

    # Agent Results sorts on click (client side).
    page.get_by_test_id("agent-results").get_by_role("button", name="Pass@1", exact=True).click()
    expect(page.get_by_test_id("agent-results").locator("tbody tr").first).to_contain_text("oracle")
    page.get_by_test_id("agent-results").get_by_role("button", name="Pass@1", exact=True).click()
    expect(page.get_by_test_id("agent-results").locator("tbody tr").first).to_contain_text("nop")

    # Tabs are keyboard operable: arrows move between them, the URL remembers the tab.
    page.get_by_role("tab", name="Overview").focus()
    page.keyboard.press("ArrowRight")
    expect(page.get_by_role("tab", name="Task Results")).to_be_focused()
    expect(page.get_by_role("tab", name="Task Results")).to_have_attribute("aria-selected", "true")
    expect(page).to_have_url(re.compile(r"tab=results"))

    # Task Results: every task × attempt, filterable by agent and outcome, each result expandable.
    results = page.get_by_test_id("results-table")
    expect(results.locator("tbody tr")).to_have_count(20)
    page.locator("#results-agent").select_option(label="nop")
    expect(results.locator("tbody tr")).to_have_count(10)
    page.locator("#results-outcome").select_option("passed")
    expect(results.locator("tbody tr.empty")).to_contain_text("No result matches")
    page.locator("#results-outcome").select_option("")
    page.locator("#results-agent").select_option("")
    page.get_by_placeholder(re.compile("Search task")).fill("hello-file")
    expect(results.locator("tbody tr")).to_have_count(2)
    results.get_by_role("button", name=re.compile(r"Details of hello-file, attempt 1, oracle")).click()
    detail = results.locator("tr.detail")
    expect(detail).to_contain_text("Grading")
    expect(detail).to_contain_text("1 (primary)")  # each reward key once, the primary one marked
    expect(detail).to_contain_text("Timings")
    artifacts = detail.get_by_test_id("artifacts")
    expect(artifacts).to_contain_text("verifier/reward.txt")
    link = artifacts.get_by_role("link", name="verifier/reward.txt")
    expect(link).to_have_attribute("href", re.compile(r"^/api/downloads/runs/"))
    fetched = page.request.get(f"{stack.url}{link.get_attribute('href')}")
    assert fetched.status == 200 and fetched.text().strip() == "1"
    shot(page, "run-task-results")

    # A trajectory (Harbor ATIF) renders as a conversation.
    rendered = page.evaluate(
        """() => Regatta.renderTrajectory({schema_version: "ATIF-v1.8", agent: {name: "a"}, steps: [
             {step_id: 1, source: "user", message: "Write hello"},
             {step_id: 2, source: "agent", message: "Writing it.", tool_calls: [
               {tool_call_id: "c1", function_name: "bash", arguments: {cmd: "echo hi"}}],
              observation: {results: [{source_call_id: "c1", content: "hi"}]}}]}).innerText"""
    )
    assert "Write hello" in rendered and "bash" in rendered and "← hi" in rendered

    # Configuration: the resolved TOML with the locked version.
    page.get_by_role("tab", name="Configuration").click()
    expect(page.get_by_test_id("config-toml")).to_contain_text('resolved_version = "1.0"')
    expect(page.get_by_test_id("config-toml")).to_contain_text('api_key_secret = "UI_TEST_KEY"')
    shot(page, "run-configuration")

    # Logs: the tab opens at the run's beginning, the submission first, with no "Load older" to press:
    # the 20-attempt run logs more than the API's default page of 50, all of it on the first load.
    assert len(api.all_logs(run_id)) > 50
    page.get_by_role("tab", name="Logs").click()
    logs = page.get_by_test_id("logs-table").locator("tbody tr")
    expect(logs.first).to_contain_text("Run submitted")
    expect(page.get_by_test_id("logs-table")).to_contain_text("Run finished")
    expect(page.get_by_role("button", name="Load older")).to_be_hidden()
    shot(page, "run-logs")

    # Downloads: the menu lists signed links; the metrics file downloads.
    page.get_by_test_id("download-menu").click()
    with page.expect_download(timeout=WAIT) as download:
        page.get_by_role("menuitem", name=re.compile(r"Metrics \(summary\.csv\)")).click()
    content = Path(download.value.path()).read_text()
    assert "oracle" in content and "nop" in content
    page.keyboard.press("Escape")

    page.get_by_role("tab", name="Overview").click()
    phone_shot(page, "run-overview")
    assert httpx.get(f"{stack.url}/api/v1/runs/{run_id}", timeout=5).status_code == 401  # no cookie, no token


# --- issue 19, item 9: the details a new team notices --------------------------------------------------

JUDGE_MANIFEST = """[judge]
requires_model = true
requires_api_key = true
default_model = "openai/gpt-5-mini"
"""


def test_new_run_summary_counts_judge_key_folder_name_and_agent_labels(
    make_stack, api_for, page: Page, tmp_path: Path
) -> None:
    # A declared hosted model with a LoRA adapter (never called: every submission here is refused).
    hosted = [{"name": "alpha", "base_url": "http://127.0.0.1:9/v1", "lora_adapters": ["v1"]}]
    stack = make_stack(executors=1, REGATTA_HOSTED_MODELS=json.dumps(hosted), **ACK_WAIT)
    api = api_for(stack)
    folder = tmp_path / "judged"
    write_tasks(folder, 3)
    (folder / "regatta.toml").write_text(JUDGE_MANIFEST)
    added = api.http.post("/api/v1/benchmarks", json={"source_type": "folder", "path": str(folder)})
    assert added.status_code == 201, added.text
    assert api.benchmark_ready("judged")["sync_status"] == "ready"
    sign_in(page, stack)

    # A folder benchmark is named after its folder; its path is only its source.
    row = page.locator("tr[data-name='judged']")
    expect(row.get_by_role("link", name="judged", exact=True)).to_be_visible()
    assert_readable(page, "benchmarks-folder-name", ["judged"])
    row.get_by_role("link", name="judged", exact=True).click()
    expect(page.get_by_role("heading", level=1)).to_have_text(re.compile(r"^\s*judged\s+3 tasks\s*$"))
    page.get_by_role("link", name="New Run").click()
    summary = page.locator("#summary")

    # The judge needs a key: flagged as soon as the form opens, on its field and on its tab.
    settings_tab = page.get_by_role("tab", name=re.compile("Run settings"))
    expect(settings_tab.locator(".tab-flag")).to_be_visible()
    expect(page.get_by_test_id("summary-total")).to_have_text("3 tasks × 1 agent × 1 attempt = 3 attempts")
    settings_tab.click()
    key_error = page.locator("[data-error-for='execution.judge_api_key_secret']")
    expect(key_error).to_be_visible()
    expect(key_error).to_contain_text("Required")
    expect(page.get_by_label("Judge API key secret")).to_have_attribute("aria-invalid", "true")
    expect(page.get_by_label("Judge model")).to_have_value("openai/gpt-5-mini")
    expect(page.locator("[data-error-for='execution.judge_model']")).to_be_hidden()
    assert_readable(
        page, "new-run-judge-key-required", ["Required: this benchmark's LLM judge needs an API key"]
    )
    page.get_by_label("Judge API key secret").fill("JUDGE_KEY")
    expect(key_error).to_be_hidden()
    expect(settings_tab.locator(".tab-flag")).to_be_hidden()
    page.get_by_label("Judge API key secret").fill("")
    expect(key_error).to_be_visible()
    expect(settings_tab.locator(".tab-flag")).to_be_visible()

    # Agent labels: a hosted LoRA reads `base:lora` in the summary, as on every other page.
    page.get_by_role("tab", name="Agents").click()
    first = page.locator("[data-agent]").nth(0)
    first.get_by_label("Harness", exact=True).select_option("oracle")
    first.get_by_label("Model", exact=True).select_option("hosted")
    first.get_by_label("Hosted model").select_option("alpha")
    first.get_by_label("LoRA adapter").select_option("v1")
    expect(summary).to_contain_text("oracle")

    # The server refuses it too (the form's check is a convenience, not the rule).
    page.get_by_role("tab", name="Run settings").click()
    page.get_by_role("button", name="Submit run").click()
    expect(page.get_by_test_id("submit-error")).to_contain_text("Fix the highlighted fields")
    expect(key_error).to_have_text("this benchmark's LLM judge needs an API key secret")

    # No task named selects every task (the server's count, as a submission would run it); one task
    # counts in the singular, never "null".
    page.get_by_role("tab", name="Tasks").click()
    page.get_by_label("Task names").check()
    expect(page.get_by_test_id("summary-tasks")).to_have_text("3 tasks (no task named, so every task)")
    expect(page.get_by_test_id("summary-total")).to_have_text("3 tasks × 1 agent × 1 attempt = 3 attempts")
    expect(summary).not_to_contain_text("null")
    page.locator("#task-list").get_by_label("task-001").check()
    expect(page.get_by_test_id("summary-tasks")).to_have_text("1 task (task-001)")
    expect(page.get_by_test_id("summary-total")).to_have_text("1 task × 1 agent × 1 attempt = 1 attempt")
    expect(summary).not_to_contain_text("null")
    expect(summary.get_by_role("button", name="Try one task first")).to_have_count(0)
    assert_readable(
        page, "new-run-one-task", ["1 task × 1 agent × 1 attempt = 1 attempt"], selector="#summary"
    )

    # Submitted, the run labels the agent the same way on the run page, the runs list and the leaderboard.
    page.get_by_role("tab", name="Run settings").click()
    page.get_by_label("Judge API key secret").fill("")
    created = api.http.post(
        "/api/v1/secrets", json={"name": "JUDGE_KEY", "value": "sk-judge-unused", "scope": "workspace"}
    )
    assert created.status_code == 201, created.text
    page.get_by_label("Judge API key secret").fill("JUDGE_KEY")
    page.get_by_role("tab", name="Tasks").click()
    page.get_by_label("All tasks").check()
    page.get_by_role("button", name="Submit run").click()
    expect(page).to_have_url(re.compile(r"/benchmarks/runs/run_"))
    run_id = page.url.rsplit("/", 1)[1].split("?")[0]
    assert api.wait_run(run_id, timeout=RUN / 1000)["benchmark_run"]["status"] == "finished"
    page.reload()
    expect(page.get_by_test_id("agent-results")).to_contain_text("oracle")
    expect(page.get_by_test_id("per-task-note")).to_contain_text("mean per attempt of one task")
    benchmark_id = api.get(f"/runs/{run_id}")["benchmark_run"]["benchmark_id"]
    api.wait_for(lambda: api.get(f"/benchmarks/{benchmark_id}/leaderboard")["leaderboard"])
    page.goto(f"{stack.url}/benchmarks/{benchmark_id}")
    expect(page.get_by_test_id("leaderboard").locator("tbody tr")).to_contain_text("oracle")
    expect(page.get_by_test_id("runs-table").locator(f"tr[data-run-id='{run_id}']")).to_contain_text("oracle")


def test_the_cost_chart_axis_of_a_cheap_run_repeats_no_label(
    make_stack, api_for, page: Page, tmp_path
) -> None:
    """A terminus-2 run against a scripted OpenAI-compatible server costs fractions of a cent per task:
    the range where the axis once printed "$0.0001" twice."""
    tasks = tmp_path / "cheap"
    shutil.copytree(EXAMPLES / "tasks" / "hello-file", tasks / "hello-file")
    toml = tasks / "hello-file" / "task.toml"
    toml.write_text(toml.read_text().replace("timeout_sec = 60", "timeout_sec = 300"))
    script = [
        terminus_reply(["printf 'Hello, Regatta!\\n' > /app/hello.txt\n"], duration=2.0),
        terminus_reply(["cat /app/hello.txt\n"], duration=1.0),
        terminus_reply(task_complete=True),
        terminus_reply(task_complete=True),
    ]
    # A stack of its own, at the default ack wait: a redelivered copy of the attempt (the shared stacks'
    # short ack wait, on a loaded host) would take replies from the same scripted model.
    stack = make_stack(executors=1)
    api = api_for(stack)
    cheap_id = add_folder_benchmark(api, tasks, "cheap")
    assert api.benchmark_ready("cheap")["sync_status"] == "ready"
    stored = api.http.post("/api/v1/secrets", json={"name": "SCRIPTED_KEY", "value": "sk-scripted-1"})
    assert stored.status_code == 201, stored.text
    with ScriptedLLM(script, prompt_tokens=300, completion_tokens=20) as llm:
        model = {
            "type": "endpoint",
            "base_url": llm.base_url,
            "model": "gpt-4o-mini",
            "api_key_secret": "SCRIPTED_KEY",
        }
        body = {
            "experiment_config": {"benchmark": "cheap"},
            "agents": [{"harness": "terminus-2", "model": model}],
        }
        created = api.http.post("/api/v1/runs", json=body)
        assert created.status_code == 201, created.text
        run_id = created.json()["id"]
        detail = api.wait_run(run_id, timeout=RUN / 1000)
    assert detail["benchmark_run"]["status"] == "finished"
    attempts = api.get(f"/runs/{run_id}/attempts")
    outcomes = [
        (a["agent_index"], a["outcome"], (a.get("result") or {}).get("exception_message"))
        for a in attempts["attempts"]
    ]
    if {a[1] for a in outcomes} != {"passed"}:
        pytest.fail(f"{outcomes}, {llm.calls} model calls\n{api.artifact_texts(run_id)}")
    metrics = {m["agent_index"]: m for m in detail["agent_metrics"]}
    assert metrics[0]["cost_per_task"] and metrics[0]["cost_per_task"] < 0.01
    sign_in(page, stack)

    page.goto(f"{stack.url}/benchmarks/runs/{run_id}")
    chart = page.get_by_test_id("chart-pareto")
    expect(chart.locator("svg")).to_be_visible()
    labels = chart.locator("svg text.tick[text-anchor='middle']").all_text_contents()
    assert len(labels) >= 3 and len(set(labels)) == len(labels), labels
    assert all(re.fullmatch(r"\$[0-9,]+(\.[0-9]+)?", label) for label in labels), labels
    expect(page.get_by_test_id("agent-results")).to_contain_text("terminus-2 · gpt-4o-mini")
    assert_readable(
        page, "run-cost-chart", ["LLM cost per task (USD)"], selector="[data-testid=chart-pareto]"
    )
    expect(page.get_by_text(re.compile(r"Run of cheap · 1 agent · 1 task × 1 attempt$"))).to_be_visible()

    # A one-task benchmark counts in the singular.
    page.goto(f"{stack.url}/benchmarks/{cheap_id}")
    expect(page.get_by_test_id("task-count-badge")).to_have_text("1 task")
    expect(page.get_by_test_id("runs-table").get_by_test_id("run-selection")).to_have_text("All · 1 task")
