"""Issue 7: the web UI, driven by a real browser (Debian chromium + Playwright) against the running stack.

Every wait is bounded. Screenshots of each main page, at 1280 px and at a phone's 390 × 844, land in
test-artifacts/screenshots/ (gitignored) so a person can look at them.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import httpx
from playwright.sync_api import Page, expect

ROOT = Path(__file__).resolve().parents[2]
SHOTS = ROOT / "test-artifacts" / "screenshots"
WAIT = 30_000  # ms, Playwright's default for every action and assertion in these tests
LONG = 150_000  # ms, for waits on real work (a sync, a run)
RUN = 240_000  # ms, for a 20-attempt run to finish on a loaded 2-core machine
PHONE = {"width": 390, "height": 844}
# An attempt that fails inside an executor is redelivered after the ack wait (30 s by default); a
# short one keeps these tests quick when that happens. Live attempts heartbeat, so none is cut short.
ACK_WAIT = {"REGATTA_JOB_ACK_WAIT": "6"}
expect.set_options(timeout=WAIT)


# --- helpers --------------------------------------------------------------------------------------------


def shot(page: Page, name: str) -> None:
    SHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=SHOTS / f"{name}.png", full_page=True)


def phone_shot(page: Page, name: str) -> None:
    """The same page at a phone's size; the page must not scroll sideways (only its tables may)."""
    size = page.viewport_size
    page.set_viewport_size(PHONE)
    page.wait_for_timeout(300)
    width = page.evaluate("document.documentElement.scrollWidth")
    assert width <= PHONE["width"], f"{name}: the page is {width}px wide on a phone"
    shot(page, f"{name}-phone")
    if size:
        page.set_viewport_size(size)


def sign_in(page: Page, stack: Any) -> None:
    page.set_default_timeout(WAIT)
    page.goto(f"{stack.url}/benchmarks")
    expect(page).to_have_url(re.compile(r"/signin\?next=%2Fbenchmarks$"))
    page.get_by_label("API token").fill(stack.token)
    page.get_by_role("button", name="Sign in").click()
    expect(page).to_have_url(f"{stack.url}/benchmarks")


def mark_page(page: Page) -> None:
    """A flag in the page's JS heap: still there later means the page was never reloaded."""
    page.evaluate("window.__sameDocument = true")


def assert_same_page(page: Page) -> None:
    assert page.evaluate("window.__sameDocument === true"), "the page reloaded instead of updating in place"


def write_tasks(root: Path, count: int, *, sleep: float = 0.0, prefix: str = "task") -> None:
    """`count` tiny Harbor tasks whose reference solution passes (after `sleep` seconds)."""
    for index in range(count):
        task = root / f"{prefix}-{index:03d}"
        for folder in ("tests", "solution", "environment"):
            (task / folder).mkdir(parents=True)
        (task / "task.toml").write_text(
            f'[metadata]\ncategory = "{"odd" if index % 2 else "even"}"\n[agent]\ntimeout_sec = 60\n'
            '[verifier]\ntimeout_sec = 60\n[environment]\nnetwork_mode = "no-network"\n'
        )
        (task / "instruction.md").write_text("Write done to /app/out.txt\n")
        (task / "environment" / "Dockerfile").write_text("FROM debian:bookworm-slim\nWORKDIR /app\n")
        (task / "solution" / "solve.sh").write_text(f"#!/bin/bash\nsleep {sleep}\necho done > /app/out.txt\n")
        (task / "tests" / "test.sh").write_text(
            "#!/bin/bash\nif grep -q done /app/out.txt 2>/dev/null; then echo 1; else echo 0; fi"
            " > /logs/verifier/reward.txt\n"
        )


ATIF_TRAJECTORY = """{"schema_version": "ATIF-v1.6", "session_id": "s1",
 "agent": {"name": "oracle", "version": "1"},
 "steps": [
  {"step_id": 1, "source": "user", "message": "Write done to /app/out.txt"},
  {"step_id": 2, "source": "agent", "model_name": "demo-model", "message": "I will write the file.",
   "tool_calls": [{"tool_call_id": "c1", "function_name": "bash", "arguments": {"command": "echo done"}}],
   "observation": {"results": [{"source_call_id": "c1", "content": "(no output)"}]}},
  {"step_id": 3, "source": "agent", "message": "The file is written."}]}"""


def write_talking_task(root: Path) -> None:
    """One task whose reference solution also leaves a Harbor (ATIF) trajectory in /logs/agent."""
    write_tasks(root, 1, prefix="talk")
    solve = root / "talk-000" / "solution" / "solve.sh"
    solve.write_text(
        f"{solve.read_text()}cat > /logs/agent/trajectory.json <<'JSON'\n{ATIF_TRAJECTORY}\nJSON\n"
    )


def add_folder_benchmark(api: Any, path: Path, name: str) -> str:
    response = api.http.post(
        "/api/v1/benchmarks", json={"source_type": "folder", "path": str(path), "name": name}
    )
    assert response.status_code == 201, response.text
    return response.json()["id"]


# --- benchmarks list: sign-in, Add Benchmark, live sync, failure, retry, remove --------------------------


def test_sign_in_add_benchmark_and_watch_the_sync_live(
    make_stack, api_for, page: Page, tmp_path: Path
) -> None:
    stack = make_stack(executors=1, **ACK_WAIT)
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


# --- New Run form → run page: missing secret flagged, validation, submit, live progress, results -------


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
    expect(second.get_by_label("Model", exact=True)).to_have_value("hosted")
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
    expect(page.get_by_test_id("agent-results")).to_contain_text("oracle · openai/gpt-4o-mini")
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
    page.locator("#results-agent").select_option(label="nop · none")
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
    expect(detail).to_contain_text("Primary reward")
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

    # Logs: newest page first; "Load older" follows the cursor.
    page.get_by_role("tab", name="Logs").click()
    logs = page.get_by_test_id("logs-table").locator("tbody tr")
    expect(logs.first).to_be_visible()
    older = page.get_by_role("button", name="Load older")
    expect(older).to_be_visible()  # a 20-attempt run logs more than one page of 50
    for _ in range(20):  # bounded: follow the cursor to the first page
        if not older.is_visible():
            break
        before = logs.count()
        older.click()
        expect(logs).not_to_have_count(before)
    expect(page.get_by_test_id("logs-table")).to_contain_text("Run finished")
    expect(page.get_by_test_id("logs-table")).to_contain_text("submit")
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


# --- leaderboard: ranks with ties, hover comparison, sorting by each metric -----------------------------

TIE_RUN = """
[experiment]
benchmark = "regatta-examples"

[[agents]]
harness = "oracle"
[agents.model]
type = "hosted"
base_model = "alpha"
lora_model_name = ""

[[agents]]
harness = "oracle"
[agents.model]
type = "hosted"
base_model = "beta"
lora_model_name = ""

[[agents]]
harness = "nop"
[agents.model]
type = "hosted"
base_model = "none"
lora_model_name = ""

[execution]
attempts_per_task = 1
max_concurrent_attempts = 4
max_retries = 3
"""


def test_leaderboard_shows_tied_ranks_with_the_comparison_and_sorts_by_each_metric(
    make_stack, api_for, page: Page
) -> None:
    stack = make_stack(executors=2, **ACK_WAIT)
    api = api_for(stack)
    benchmark = api.benchmark_ready("regatta-examples")
    created = api.submit_toml(TIE_RUN)
    assert api.wait_run(created["id"])["benchmark_run"]["status"] == "finished"
    api.wait_for(lambda: len(api.get(f"/benchmarks/{benchmark['id']}/leaderboard")["leaderboard"]) == 3)
    sign_in(page, stack)

    page.goto(f"{stack.url}/benchmarks/{benchmark['id']}")
    board = page.get_by_test_id("leaderboard")
    ranks = board.get_by_test_id("rank")
    expect(ranks).to_have_text(["1=", "1=", "3"])
    # Hovering the rank of the oracle that is not the top participant shows the comparison with the top.
    rows = api.get(f"/benchmarks/{benchmark['id']}/leaderboard")["leaderboard"]
    other = next(i for i, r in enumerate(rows[:2]) if r["participant"] != r["comparison"]["top"])
    second = board.locator("tbody tr").nth(other)
    second.get_by_test_id("rank").hover()
    tooltip = second.get_by_test_id("rank-tooltip")
    expect(tooltip).to_be_visible()
    expect(tooltip).to_contain_text("Compared with the top participant")
    expect(tooltip).to_contain_text("Holm-adjusted p")
    expect(tooltip).to_contain_text("+0.0 pp")
    expect(tooltip).to_contain_text("shares rank 1")
    shot(page, "benchmark-leaderboard-tie")
    # The tooltip is reachable by keyboard too.
    page.mouse.move(0, 0)
    board.locator("tbody tr").nth(2).get_by_test_id("rank").focus()
    last = board.locator("tbody tr").nth(2).get_by_test_id("rank-tooltip")
    expect(last).to_be_visible()
    expect(last).to_contain_text("Significantly below")

    mark_page(page)
    for key, label in (
        ("pass_at_k", "Pass@k"),
        ("cost_per_task", "Cost / task"),
        ("time_per_task", "Time / task"),
        ("tokens_per_task", "Tokens / task"),
        ("pass_at_1", "Pass@1"),
    ):
        board = page.get_by_test_id("leaderboard")
        board.get_by_role("link", name=label).click()
        expect(page).to_have_url(re.compile(rf"\?sort={key}$"))
        expect(page.get_by_test_id("leaderboard").locator("th[aria-sort]")).to_contain_text(label)
    assert_same_page(page)
    page.go_back()
    expect(page).to_have_url(re.compile(r"\?sort=tokens_per_task$"))
    expect(page.get_by_test_id("leaderboard").locator("th[aria-sort]")).to_contain_text("Tokens / task")
    page.goto(f"{stack.url}/benchmarks/{benchmark['id']}?sort=pass_at_1")
    expect(page.get_by_test_id("leaderboard").get_by_test_id("rank")).to_have_text(["1=", "1=", "3"])
    phone_shot(page, "benchmark")

    # Clicking a row opens the run behind the score.
    page.get_by_test_id("leaderboard").locator("tbody tr").nth(2).locator("td").nth(1).click()
    expect(page).to_have_url(f"{stack.url}/benchmarks/runs/{created['id']}")
    expect(page.get_by_test_id("agent-results")).to_contain_text("oracle · beta")


# --- a trajectory as a conversation; stopping a running run ----------------------------------------------

ORACLE_RUN = (
    '[experiment]\nbenchmark = "{benchmark}"\n[[agents]]\nharness = "oracle"\n'
    '[agents.model]\ntype = "hosted"\nbase_model = "none"\n'
    "[execution]\nmax_concurrent_attempts = 1\nmax_retries = 3\n"
)


def test_a_trajectory_reads_as_a_conversation_and_a_running_run_can_be_stopped(
    make_stack, api_for, page: Page, tmp_path: Path
) -> None:
    stack = make_stack(executors=1, **ACK_WAIT)
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
