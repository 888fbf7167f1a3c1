"""Issue 38, the task browser, in a real browser against a real stack (registry-sync syncs a folder of
tasks and stores their archives; the gateway reads them back): the benchmark page's task list, searched and
paged by URL; a task page with its instruction rendered from markdown and an attack in it made inert; its
task.toml, environment, tests and solution files (a binary one named, a long one cut); its results by agent;
and, since the benchmark's regatta.toml hides solutions, no solution for a member. Screenshots at 1400 px
and at a phone's 390 px (assert_readable) land in test-artifacts/screenshots/.
"""

from __future__ import annotations

import re
from pathlib import Path
from urllib.parse import quote

from playwright.sync_api import Page, expect

from tests.e2e.web_ui_layout import assert_readable
from tests.e2e.web_ui_support import ACK_WAIT, LONG, RUN, add_folder_benchmark, sign_in, wide_shot
from tests.support.task_archives import ATTACK_INSTRUCTION
from tests.support.tasks import run_toml, write_task, write_tasks

PLAIN_TASKS = 51  # with parser-fix, 52: two pages of 50
BIG = "".join(f"line {i:06d}\n" for i in range(30_000))  # past the 256 KiB shown of a file


def _benchmark(root: Path) -> Path:
    write_tasks(root, PLAIN_TASKS, prefix="task")
    fix = write_task(root, "parser-fix", category="parsing")
    (fix / "instruction.md").write_text(ATTACK_INSTRUCTION)
    toml = (fix / "task.toml").read_text().replace("[metadata]\n", '[metadata]\ndifficulty = "hard"\n')
    (fix / "task.toml").write_text(
        toml.replace("[environment]\n", "[environment]\ncpus = 1\nmemory_mb = 512\n")
    )
    (fix / "environment" / "data.bin").write_bytes(bytes(range(256)) * 4)
    (fix / "environment" / "big.txt").write_text(BIG)
    (root / "regatta.toml").write_text("[benchmark]\nshow_solutions = false\n")
    return root


def _sign_in_as(page: Page, url: str, workspace_id: str, token: str) -> None:
    page.context.clear_cookies()
    page.context.add_cookies([{"name": "regatta_workspace", "value": workspace_id, "url": url}])
    page.goto(f"{url}/benchmarks")
    page.get_by_label("API token").fill(token)
    page.get_by_role("button", name="Sign in").click()
    expect(page).to_have_url(f"{url}/benchmarks")


def test_browse_a_benchmarks_tasks_and_read_one_safely(
    shared_stack, api_for, page: Page, tmp_path: Path
) -> None:
    stack = shared_stack(executors=1, **ACK_WAIT)
    api = api_for(stack)
    benchmark_id = add_folder_benchmark(api, _benchmark(tmp_path / "tasks"), "browse-me")
    api.wait_for(
        lambda: api.get(f"/benchmarks/{benchmark_id}")["benchmark"]["sync_status"] == "ready", LONG / 1000
    )
    run = api.submit_toml(run_toml("browse-me", task_names=["parser-fix"]))["id"]
    assert api.wait_run(run, timeout=RUN / 1000)["benchmark_run"]["status"] == "finished"
    sign_in(page, stack)
    url = stack.url

    # The list: 52 tasks, 50 a page; the second page by its link, then a search, both kept in the URL.
    page.goto(f"{url}/benchmarks/{benchmark_id}")
    tasks = page.get_by_test_id("task-list")
    tasks.get_by_text("Tasks (52)").click()
    rows = page.get_by_test_id("task-table").locator("tbody tr[data-task]")
    expect(rows).to_have_count(50)
    page.get_by_test_id("task-pager").get_by_role("link", name="Next").click()
    expect(page).to_have_url(re.compile(r"task_page=2"))
    expect(rows).to_have_count(2)
    expect(page.get_by_test_id("task-pager")).to_contain_text("Page 2 of 2")
    search = page.get_by_role("searchbox", name="Search")
    search.fill("PARSER")
    search.press("Enter")
    expect(page).to_have_url(re.compile(r"task_search=PARSER"))
    expect(rows).to_have_count(1)
    row = rows.first
    expect(row).to_have_attribute("data-task", "parser-fix")
    expect(row.locator("td").nth(1)).to_have_text("parsing")
    expect(row.locator("td").nth(2)).to_have_text("hard")
    expect(row.locator("td").nth(3)).to_have_text("1 CPU · 0.5 GB")
    expect(row.locator("td").nth(4)).to_have_text("valid")
    wide_shot(page, "task-list")
    assert_readable(
        page,
        "task-list",
        ["Tasks (1)", "parser-fix", "parsing", "valid"],
        selector="#tasks-title ~ *, [data-testid=task-list]",
    )

    # The task page: the instruction rendered, the attack inert (no script ran, no element or link of it).
    row.get_by_role("link", name="parser-fix").click()
    expect(page).to_have_url(f"{url}/benchmarks/{benchmark_id}/task?name=parser-fix")
    instruction = page.get_by_test_id("instruction")
    expect(instruction.get_by_role("heading", name="Fix the parser")).to_be_visible()
    expect(instruction.locator("strong")).to_have_text("empty")
    expect(instruction.get_by_role("link", name="the docs")).to_have_attribute(
        "href", "https://example.com/docs"
    )
    expect(instruction).to_contain_text("<script>window.__pwned = 1</script>")
    assert page.evaluate("window.__pwned === undefined")
    expect(instruction.locator("script, iframe, img, [onerror]")).to_have_count(0)
    expect(instruction.locator('a[href^="javascript"]')).to_have_count(0)
    # Files by section; an admin sees the solution even though the benchmark hides it from members.
    expect(page.get_by_test_id("files-config")).to_contain_text('difficulty = "hard"')
    environment = page.get_by_test_id("files-environment")
    environment.locator('[data-path="environment/data.bin"] summary').click()
    expect(environment).to_contain_text("binary, 1024 bytes")
    environment.locator('[data-path="environment/big.txt"] summary').click()
    expect(environment.get_by_test_id("truncated")).to_contain_text(f"the first 256 KiB of {len(BIG)} bytes")
    expect(page.get_by_test_id("files-tests").locator('[data-path="tests/test.sh"]')).to_be_visible()
    expect(page.get_by_test_id("files-solution").locator('[data-path="solution/solve.sh"]')).to_be_visible()
    results = page.get_by_test_id("results-by-agent").locator("tbody tr")
    expect(results).to_have_count(1)
    expect(results.first.locator("td").nth(2)).to_contain_text("100% (1/1)")
    expect(page.get_by_test_id("task-history").locator("tbody tr[data-attempt-id]")).to_have_count(1)
    wide_shot(page, "task-page")
    assert_readable(page, "task-page", ["Fix the parser", "Instruction", "Results by agent", "History"])

    # A member: no solution in the page, and the page says so.
    member = api.http.post(
        f"/api/v1/workspaces/{quote(stack.workspace, safe='')}/members",
        json={"email": "browses@example.com", "role": "member", "issue_token": True},
    )
    assert member.status_code == 201, member.text
    _sign_in_as(page, url, stack.workspace_id, member.json()["token"])
    page.goto(f"{url}/benchmarks/{benchmark_id}/task?name=parser-fix")
    expect(page.get_by_test_id("solution-hidden")).to_have_text("This benchmark hides its solutions.")
    expect(page.locator('[data-path^="solution/"]')).to_have_count(0)
    assert "echo done > /app/out.txt" not in page.content().split('data-testid="files-tests"')[0]
    wide_shot(page, "task-page-member")
    assert_readable(page, "task-page-member", ["This benchmark hides its solutions."])
