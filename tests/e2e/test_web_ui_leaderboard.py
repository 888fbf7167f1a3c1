"""Issue 7, the web UI's leaderboard: ranks with ties, the comparison on hover, sorting by each metric.
Issue 21: a run under non-standard scoring conditions is never ranked, and both pages say why."""

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


def one_agent_run(name: str, threshold: float | None) -> str:
    execution = "" if threshold is None else f"[execution]\npass_threshold = {threshold}\n"
    return (
        f'name = "{name}"\n[experiment]\nbenchmark = "regatta-examples"\n\n[[agents]]\nharness = "nop"\n'
        '[agents.model]\ntype = "hosted"\nbase_model = "same"\nlora_model_name = ""\n\n' + execution
    )


def test_runs_of_one_agent_at_thresholds_1_and_0_never_share_a_ranking_group(
    make_stack, api_for, page: Page
) -> None:
    """The same agent (nop, which passes nothing) at the benchmark's threshold 1.0 and at 0.0, where every
    scored attempt passes: only the honest run ranks, the API and both pages say why the other does not."""
    stack = make_stack(executors=1, **ACK_WAIT)
    api = api_for(stack)
    benchmark = api.benchmark_ready("regatta-examples")
    honest = api.submit_toml(one_agent_run("honest", None))
    assert api.wait_run(honest["id"])["benchmark_run"]["status"] == "finished"
    lenient = api.submit_toml(one_agent_run("lenient", 0.0))
    detail = api.wait_run(lenient["id"])
    assert detail["benchmark_run"]["status"] == "finished"
    assert detail["agent_metrics"][0]["pass_at_1"]["value"] == 1.0, "at threshold 0 every attempt passes"
    assert detail["leaderboard_qualification"] == {
        "qualifies": False,
        "conditions": {
            "pass_threshold": 0.0,
            "primary_reward_key": None,
            "timeout_multiplier": 1.0,
            "max_retries": 0,
        },
        "standard_conditions": {
            "pass_threshold": 1.0,
            "primary_reward_key": None,
            "timeout_multiplier": 1.0,
            "max_retries": 0,
        },
        "standard": False,
        "differences": [{"field": "pass_threshold", "label": "pass threshold", "run": 0.0, "standard": 1.0}],
        "reasons": ["pass threshold 0 differs from the benchmark's 1"],
    }
    assert api.get(f"/runs/{honest['id']}")["leaderboard_qualification"]["qualifies"] is True
    # The leaderboard is recomputed when each run finishes: after the lenient run it still shows the
    # honest one, with the conditions it was scored under.
    api.wait_for(
        lambda: (
            [r["run_id"] for r in api.get(f"/benchmarks/{benchmark['id']}/leaderboard")["leaderboard"]]
            == [honest["id"]]
        )
    )
    rows = api.get(f"/benchmarks/{benchmark['id']}/leaderboard")["leaderboard"]
    assert rows[0]["pass_at_1"]["value"] == 0.0 and rows[0]["conditions"]["pass_threshold"] == 1.0
    sign_in(page, stack)

    page.goto(f"{stack.url}/benchmarks/{benchmark['id']}")
    board = page.get_by_test_id("leaderboard")
    expect(board.locator("tbody tr")).to_have_count(1)
    expect(board.locator("tbody tr")).to_contain_text("honest")
    expect(page.get_by_test_id("leaderboard-conditions")).to_contain_text("pass threshold 1")
    expect(page.get_by_test_id("leaderboard-conditions")).to_contain_text("Runs under other conditions")

    page.goto(f"{stack.url}/benchmarks/runs/{lenient['id']}")
    why = page.get_by_test_id("run-qualification")
    expect(why).to_contain_text("Not ranked on the leaderboard")
    expect(why).to_contain_text("pass threshold 0 differs from the benchmark's 1")
    expect(page.get_by_test_id("run-conditions")).to_contain_text("pass threshold 0")
    shot(page, "run-not-ranked")
    page.goto(f"{stack.url}/benchmarks/runs/{honest['id']}")
    expect(page.get_by_test_id("run-qualification")).to_contain_text("Qualifies")
