"""Issue 38, Comparison, in a real browser: any two runs picked on the runs table, two leaderboard rows,
two agents on the run page; from the comparison one task side by side (each side's attempts, the chosen
attempt's grading with per-test results, and its transcript); and the task's history across runs.
Everything by keyboard where a person would use it, and at a phone's width.

The tasks make the outcomes known: `up` and `talk` pass only for the oracle (nop writes nothing); `down`
passes only when nothing is written, so there nop passes and the oracle fails. `talk`'s reference solution
also leaves an ATIF trajectory, and its verifier a CTRF report of two tests whose second one fails without
the file. Run 1 has agents nop and oracle (two attempts per task), run 2 the oracle alone (one).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any
from urllib.parse import quote

from playwright.sync_api import Page, expect

from tests.e2e.web_ui_layout import assert_readable
from tests.e2e.web_ui_support import (
    ACK_WAIT,
    ATIF_TRAJECTORY,
    PHONE,
    RUN,
    add_folder_benchmark,
    shot,
    sign_in,
)
from tests.support.tasks import run_toml, write_task

WIDE = {"width": 1400, "height": 900}
CTRF_TEST = """#!/bin/bash
if grep -q done /app/out.txt 2>/dev/null; then ok=passed; reward=1; else ok=failed; reward=0; fi
cat > /logs/verifier/ctrf.json <<JSON
{"results": {"summary": {"tests": 2}, "tests": [
  {"name": "test_runs", "status": "passed", "duration": 2},
  {"name": "test_out_file", "status": "$ok", "duration": 4, "message": "out.txt: $ok"}]}}
JSON
echo "verifier says: $ok"
echo $reward > /logs/verifier/reward.txt
"""


def _tasks(root: Path) -> Path:
    write_task(root, "up", category="even")
    down = write_task(root, "down", category="odd")
    (down / "tests" / "test.sh").write_text(
        "#!/bin/bash\nif [ -e /app/out.txt ]; then echo 0; else echo 1; fi > /logs/verifier/reward.txt\n"
    )
    talk = write_task(root, "talk", category="odd")
    solve = talk / "solution" / "solve.sh"
    solve.write_text(
        f"{solve.read_text()}cat > /logs/agent/trajectory.json <<'JSON'\n{ATIF_TRAJECTORY}\nJSON\n"
    )
    (talk / "tests" / "test.sh").write_text(CTRF_TEST)
    return root


def _at_1400(page: Page, name: str) -> None:
    """The screenshot at 1400 px wide (assert_readable checks 1280, 1440, 1600 and the phone)."""
    size = page.viewport_size
    page.set_viewport_size(WIDE)
    page.evaluate("() => new Promise(done => requestAnimationFrame(() => requestAnimationFrame(done)))")
    width = page.evaluate("document.documentElement.scrollWidth")
    assert width <= WIDE["width"], f"{name}: the page is {width}px wide at 1400px"
    shot(page, f"{name}-1400")
    if size:
        page.set_viewport_size(size)


def _participant(run_id: str, agent: int) -> str:
    return quote(f"{run_id}:{agent}", safe="")


def test_pick_two_runs_rows_or_agents_then_a_task_side_by_side_and_its_history(
    shared_stack, api_for, page: Page, tmp_path: Path
) -> None:
    stack = shared_stack(executors=1, **ACK_WAIT)
    api = api_for(stack)
    benchmark_id = add_folder_benchmark(api, _tasks(tmp_path / "tasks"), "pick-me")
    api.benchmark_ready("pick-me")
    first = api.submit_toml(run_toml("pick-me", agents=("nop", "oracle"), attempts=2))["id"]
    assert api.wait_run(first, timeout=RUN / 1000)["benchmark_run"]["status"] == "finished"
    second = api.submit_toml(run_toml("pick-me"))["id"]
    assert api.wait_run(second, timeout=RUN / 1000)["benchmark_run"]["status"] == "finished"
    outcomes = {
        (a["agent_index"], a["task"], a["attempt_index"]): a["outcome"]
        for a in api.get(f"/runs/{first}/attempts")["attempts"]
    }
    assert outcomes == {
        (agent, task, index): "passed" if (task == "down") == (agent == 0) else "failed"
        for agent in (0, 1)
        for task in ("up", "down", "talk")
        for index in (0, 1)
    }, outcomes
    sign_in(page, stack)

    _pick_two_runs_on_the_runs_table(page, stack.url, benchmark_id, first, second)
    _pick_two_leaderboard_rows_on_a_phone(page, stack.url, benchmark_id, first, second)
    _pick_two_agents_on_the_run_page(page, stack.url, first)
    _a_task_side_by_side(page, stack.url, api, first)
    _the_task_history(page, stack.url, api, benchmark_id, first, second)


def _pick_two_runs_on_the_runs_table(
    page: Page, url: str, benchmark_id: str, first: str, second: str
) -> None:
    page.goto(f"{url}/benchmarks/{benchmark_id}")
    runs = page.get_by_test_id("runs-table")
    expect(runs.locator("tbody tr[data-run-id]")).to_have_count(2)
    # By keyboard: tab to each row's box, tick it with Space, then press the form's button.
    for run_id in (second, first):
        box = runs.locator(f'tr[data-run-id="{run_id}"]').get_by_test_id("pick-run")
        box.focus()
        page.keyboard.press("Space")
        expect(box).to_be_checked()
    _at_1400(page, "compare-pick-runs")
    assert_readable(page, "compare-pick-runs", ["Compare selected runs", "Benchmark Runs"])
    page.get_by_test_id("compare-runs").focus()
    page.keyboard.press("Enter")
    # The older run is A, each run's first agent (nop in run 1, the oracle in run 2).
    expect(page).to_have_url(f"{url}/compare?a={_participant(first, 0)}&b={_participant(second, 0)}")
    expect(page.get_by_test_id("compare-summary").get_by_test_id("summary-counts")).to_have_text(
        "2 improved · 1 regressed · 0 same"
    )

    # One run ticked is refused with the reason, and nothing else happens.
    page.goto(f"{url}/benchmarks/{benchmark_id}")
    page.get_by_test_id("runs-table").get_by_test_id("pick-run").first.check()
    page.get_by_test_id("compare-runs").click()
    expect(page.locator("main")).to_contain_text("Select exactly two runs to compare")


def _pick_two_leaderboard_rows_on_a_phone(
    page: Page, url: str, benchmark_id: str, first: str, second: str
) -> None:
    page.set_viewport_size(PHONE)
    try:
        page.goto(f"{url}/benchmarks/{benchmark_id}")
        board = page.get_by_test_id("leaderboard-table")
        expect(board.get_by_test_id("pick-row")).to_have_count(2)
        rows = board.locator("tbody tr")
        expect(rows.nth(0)).to_have_attribute("data-participant", re.compile("oracle"))
        for index in (0, 1):
            box = rows.nth(index).get_by_test_id("pick-row")
            box.check()
            expect(box).to_be_checked()
        page.get_by_test_id("compare-rows").click()
        # Rank order: the oracle (run 2, agent 0) is A, nop (run 1, agent 0) is B.
        expect(page).to_have_url(f"{url}/compare?a={_participant(second, 0)}&b={_participant(first, 0)}")
        expect(page.get_by_test_id("compare-who")).to_contain_text("nop")
    finally:
        page.set_viewport_size({"width": 1280, "height": 900})


def _pick_two_agents_on_the_run_page(page: Page, url: str, first: str) -> None:
    page.goto(f"{url}/benchmarks/runs/{first}")
    picker = page.get_by_test_id("run-agent-pick")
    expect(picker.get_by_label("Compare A")).to_have_value(f"{first}:0")
    picker.get_by_label("with B").select_option(f"{first}:1")
    _at_1400(page, "compare-pick-agents")
    assert_readable(
        page, "compare-pick-agents", ["Compare A", "with B"], selector="[data-testid=run-agent-pick]"
    )
    picker.get_by_label("with B").focus()
    page.keyboard.press("Tab")
    expect(picker.get_by_test_id("run-agent-compare")).to_be_focused()
    page.keyboard.press("Enter")
    expect(page).to_have_url(f"{url}/compare?a={_participant(first, 0)}&b={_participant(first, 1)}")
    # The compare page's own pickers swap the sides' agents.
    page.get_by_test_id("compare-agent-pick").get_by_label("A", exact=True).select_option(f"{first}:1")
    page.get_by_test_id("compare-agent-pick").get_by_label("B", exact=True).select_option(f"{first}:0")
    page.get_by_test_id("compare-agent-apply").click()
    expect(page).to_have_url(f"{url}/compare?a={_participant(first, 1)}&b={_participant(first, 0)}")
    expect(page.get_by_test_id("summary-counts")).to_have_text("1 improved · 2 regressed · 0 same")


def _a_task_side_by_side(page: Page, url: str, api: Any, first: str) -> None:
    page.goto(f"{url}/compare?a={_participant(first, 0)}&b={_participant(first, 1)}")
    page.get_by_test_id("compare-table").get_by_role("link", name=re.compile("^talk: ")).click()
    expect(page).to_have_url(re.compile(r"/compare/task\?.*task=talk"))
    expect(page.get_by_role("heading", level=1)).to_have_text("talk")
    expect(page.get_by_test_id("task-verdict")).to_have_text("improved")
    attempts = {
        (a["agent_index"], a["attempt_index"]): a["attempt_id"]
        for a in api.get(f"/runs/{first}/attempts", task="talk")["attempts"]
    }
    side_a, side_b = page.get_by_test_id("side-a"), page.get_by_test_id("side-b")
    for side, agent in ((side_a, 0), (side_b, 1)):
        expect(side.get_by_test_id("side-attempts").locator("tbody tr")).to_have_count(2)
        expect(side.locator("tr.is-chosen")).to_have_attribute("data-attempt-id", attempts[(agent, 0)])
    # A (nop) failed the file test; B (oracle) passed both; each with its verifier output.
    expect(side_a.get_by_test_id("grading-outcome")).to_have_text("failed")
    expect(side_a.locator("[data-testid=test-row][data-status=failed]")).to_contain_text("test_out_file")
    expect(side_a.get_by_test_id("verifier-output")).to_contain_text("verifier says: failed")
    expect(side_b.get_by_test_id("grading-outcome")).to_have_text("passed")
    expect(side_b.locator("[data-testid=test-row][data-status=passed]")).to_have_count(2)
    expect(side_b.get_by_test_id("reward-value")).to_have_text("1")
    # B's transcript is its trajectory, drawn as the run page draws it; nop left none.
    conversation = side_b.get_by_test_id("conversation")
    expect(conversation).to_contain_text("Write done to /app/out.txt")
    expect(conversation).to_contain_text("I will write the file.")
    expect(conversation.locator(".msg-agent")).to_have_count(2)
    expect(side_a.get_by_test_id("transcript-none")).to_be_visible()
    # Side by side on a wide screen.
    box_a, box_b = side_a.bounding_box(), side_b.bounding_box()
    assert box_a and box_b and box_b["x"] > box_a["x"] + box_a["width"] - 1, (box_a, box_b)
    _at_1400(page, "compare-task")
    assert_readable(
        page, "compare-task", ["talk", "Grading", "Transcript", "I will write the file.", "test_out_file"]
    )
    # Stacked on a phone.
    page.set_viewport_size(PHONE)
    try:
        box_a, box_b = side_a.bounding_box(), side_b.bounding_box()
        assert box_a and box_b and box_b["y"] >= box_a["y"] + box_a["height"] - 1, (box_a, box_b)
    finally:
        page.set_viewport_size({"width": 1280, "height": 900})

    # B's second attempt, by keyboard; A's choice stays.
    link = side_b.get_by_test_id("choose-attempt")
    link.focus()
    page.keyboard.press("Enter")
    expect(page).to_have_url(re.compile(f"b_attempt={attempts[(1, 1)]}"))
    expect(page.get_by_test_id("side-b").locator("tr.is-chosen")).to_have_attribute(
        "data-attempt-id", attempts[(1, 1)]
    )
    expect(page.get_by_test_id("side-a").locator("tr.is-chosen")).to_have_attribute(
        "data-attempt-id", attempts[(0, 0)]
    )
    expect(page.get_by_test_id("side-b").get_by_test_id("conversation")).to_contain_text(
        "The file is written."
    )


def _the_task_history(page: Page, url: str, api: Any, benchmark_id: str, first: str, second: str) -> None:
    page.get_by_test_id("task-history-link").click()
    expect(page).to_have_url(f"{url}/benchmarks/{benchmark_id}/task?name=talk")
    history = api.get(f"/benchmarks/{benchmark_id}/task-history", task="talk")["attempts"]
    # Oldest first: run 1's four attempts (in the order its executor ran them), then run 2's one.
    assert [r["at"] for r in history] == sorted(r["at"] for r in history)
    assert [r["run_id"] for r in history] == [first] * 4 + [second]
    assert sorted((r["agent_index"], r["attempt_index"], r["outcome"]) for r in history[:4]) == [
        (0, 0, "failed"),
        (0, 1, "failed"),
        (1, 0, "passed"),
        (1, 1, "passed"),
    ]
    assert (history[4]["agent"], history[4]["outcome"], history[4]["reward"]) == ("oracle", "passed", 1.0)
    rows = page.get_by_test_id("task-history").locator("tbody tr")
    expect(rows).to_have_count(5)
    expect(rows.last).to_have_attribute("data-run-id", second)
    expect(rows.last.locator("td").nth(4)).to_have_text("passed")
    expect(page.get_by_test_id("task-summary")).to_contain_text("passed 3 of 5 scored")
    _at_1400(page, "task-history")
    assert_readable(page, "task-history", ["talk", "History", "oracle", "nop"])
    # Each row opens its attempt's page.
    rows.last.get_by_role("link", name=re.compile("^Attempt 1 of")).click()
    expect(page).to_have_url(f"{url}/benchmarks/runs/{second}/attempts/{history[4]['attempt_id']}")

    # The benchmark page lists its tasks, each opening its history.
    page.goto(f"{url}/benchmarks/{benchmark_id}")
    tasks = page.get_by_test_id("task-list")
    tasks.get_by_text("Tasks (3)").click()
    tasks.get_by_role("link", name="down", exact=True).click()
    expect(page).to_have_url(f"{url}/benchmarks/{benchmark_id}/task?name=down")
    expect(page.get_by_test_id("task-summary")).to_contain_text("passed 2 of 5 scored")
