"""Issue 7, the web UI's leaderboard: ranks with ties, the comparison on hover, sorting by each metric."""

from __future__ import annotations

import re

from playwright.sync_api import Page, expect

from tests.e2e.web_ui_support import (
    ACK_WAIT,
    assert_same_page,
    mark_page,
    phone_shot,
    shot,
    sign_in,
)

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
