"""Issue 7, the web UI's leaderboard: ranks with ties, the comparison on hover, sorting by each metric.
Issue 21: a run under non-standard scoring conditions is never ranked, and both pages say why.
Issue 19: the recommended set, the runs list; issue 28: one ranking of every comparison group."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import httpx
import pytest
from playwright.sync_api import Page, expect

from tests.e2e.web_ui_layout import assert_readable
from tests.e2e.web_ui_support import (
    ACK_WAIT,
    PHONE,
    RUN,
    add_folder_benchmark,
    assert_apart,
    assert_same_page,
    mark_page,
    phone_shot,
    shot,
    sign_in,
    write_tasks,
)
from tests.support.scripted_llm import ScriptedLLM, terminus_reply
from tests.support.tasks import write_task


def hosted(harness: str, base: str, lora: str = "") -> dict[str, Any]:
    return {"harness": harness, "model": {"type": "hosted", "base_model": base, "lora_model_name": lora}}


def submit(api: Any, benchmark: str, agents: list[dict[str, Any]], **extra: Any) -> dict[str, Any]:
    body = {"experiment_config": {"benchmark": benchmark}, "agents": agents, **extra}
    response = api.http.post("/api/v1/runs", json=body)
    assert response.status_code == 201, response.text
    return response.json()


# Three distinct participants on a folder benchmark of tasks that all ask for the same file: oracle passes
# every task, terminus-2 against a scripted OpenAI-compatible server (the only double, for a paid provider)
# passes every task too, nop passes none. Seven tasks: the fewest for which Holm, over the three pairs,
# separates a participant that passes none from one that passes all (7 discordant tasks, p = 2^-6 = 0.0156
# <= 0.05 / 3), so oracle and terminus-2 tie at rank 1 (p = 1) and nop is 3rd, significantly below.
TIE_TASKS = 7
SOLVER = "gpt-4o-mini"
# Every reply writes the answer and says the task is complete (terminus-2 asks for that twice): the same
# reply whatever the task, the order of the model calls or a redelivered attempt.
SOLVING_REPLY = terminus_reply(["echo done > /app/out.txt\n"], task_complete=True)


def test_leaderboard_shows_tied_ranks_with_the_comparison_and_sorts_by_each_metric(
    shared_stack, api_for, page: Page, tmp_path: Path
) -> None:
    stack = shared_stack(executors=1, **ACK_WAIT)
    api = api_for(stack)
    for index in range(TIE_TASKS):
        # A long agent timeout: the executor's first terminus-2 attempts wait for its import of litellm
        # (15-20 s on a loaded 2-core machine: most of this test's run time; later attempts take 1 s).
        write_task(tmp_path / "tie", f"task-{index:03d}", agent_timeout=300)
    benchmark_id = add_folder_benchmark(api, tmp_path / "tie", "tie")
    assert api.benchmark_ready("tie")["sync_status"] == "ready"
    stored = api.http.post("/api/v1/secrets", json={"name": "SCRIPTED_KEY", "value": "sk-scripted-tie"})
    assert stored.status_code == 201, stored.text
    with ScriptedLLM([SOLVING_REPLY], prompt_tokens=300, completion_tokens=20) as llm:
        solver = {
            "harness": "terminus-2",
            "model": {
                "type": "endpoint",
                "base_url": llm.base_url,
                "model": SOLVER,
                "api_key_secret": "SCRIPTED_KEY",
            },
        }
        agents = [hosted("oracle", "none"), solver, hosted("nop", "none")]
        created = submit(api, "tie", agents, execution_config={"max_concurrent_attempts": 4})
        detail = api.wait_run(created["id"], timeout=RUN / 1000)
        calls = llm.calls
    assert detail["benchmark_run"]["status"] == "finished", detail["benchmark_run"].get("status_reason")
    outcomes = sorted(
        (a["agent_index"], a["outcome"]) for a in api.get(f"/runs/{created['id']}/attempts")["attempts"]
    )
    expected = sorted(
        (agent, outcome)
        for agent, outcome in ((0, "passed"), (1, "passed"), (2, "failed"))
        for _ in range(TIE_TASKS)
    )
    if outcomes != expected:
        pytest.fail(f"{outcomes}, {calls} model calls\n{api.artifact_texts(created['id'])}")
    assert calls >= 2 * TIE_TASKS, "terminus-2 asked the scripted model at least twice an attempt"
    api.wait_for(lambda: len(api.get(f"/benchmarks/{benchmark_id}/leaderboard")["leaderboard"]) == 3)
    sign_in(page, stack)

    page.goto(f"{stack.url}/benchmarks/{benchmark_id}")
    board = page.get_by_test_id("leaderboard")
    ranks = board.get_by_test_id("rank")
    expect(ranks).to_have_text(["1=", "1=", "3"])
    expect(board.locator("tbody tr").nth(2)).to_contain_text("nop")
    # Hovering the rank of the tied participant that is not the top one shows the comparison with the top.
    rows = api.get(f"/benchmarks/{benchmark_id}/leaderboard")["leaderboard"]
    assert {r["label"] for r in rows[:2]} == {"oracle", f"terminus-2 · {SOLVER}"}
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
    page.goto(f"{stack.url}/benchmarks/{benchmark_id}?sort=pass_at_1")
    expect(page.get_by_test_id("leaderboard").get_by_test_id("rank")).to_have_text(["1=", "1=", "3"])
    phone_shot(page, "benchmark")

    # Clicking a row opens the run behind the score.
    page.get_by_test_id("leaderboard").locator("tbody tr").nth(2).locator("td").nth(1).click()
    expect(page).to_have_url(f"{stack.url}/benchmarks/runs/{created['id']}")
    expect(page.get_by_test_id("agent-results")).to_contain_text("oracle")
    expect(page.get_by_test_id("agent-results")).to_contain_text(f"terminus-2 · {SOLVER}")


def one_agent_run(name: str, threshold: float | None) -> str:
    execution = "" if threshold is None else f"[execution]\npass_threshold = {threshold}\n"
    return (
        f'name = "{name}"\n[experiment]\nbenchmark = "regatta-examples"\n\n[[agents]]\nharness = "nop"\n'
        '[agents.model]\ntype = "hosted"\nbase_model = "same"\nlora_model_name = ""\n\n' + execution
    )


def test_runs_of_one_agent_at_thresholds_1_and_0_never_share_a_ranking_group(
    shared_stack, api_for, page: Page
) -> None:
    """The same agent (nop, which passes nothing) at the benchmark's threshold 1.0 and at 0.0, where every
    scored attempt passes: only the honest run ranks, the API and both pages say why the other does not."""
    stack = shared_stack(executors=1, **ACK_WAIT)
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
            "verifier_integrity": "record",
        },
        "standard_conditions": {
            "pass_threshold": 1.0,
            "primary_reward_key": None,
            "timeout_multiplier": 1.0,
            "max_retries": 0,
            "verifier_integrity": "record",
        },
        "standard": False,
        "differences": [{"field": "pass_threshold", "label": "pass threshold", "run": 0.0, "standard": 1.0}],
        "reasons": ["pass threshold 0 differs from the benchmark's 1"],
        "excluded_tasks": [],
        "summary": "Not ranked on the leaderboard: its conditions or task selection differ from the "
        "standard.",
        "agents": [
            {"agent_index": 0, "ranks": False, "reason": "pass threshold 0 differs from the benchmark's 1"}
        ],
    }
    ranked = api.get(f"/runs/{honest['id']}")["leaderboard_qualification"]
    assert ranked["qualifies"] is True
    assert ranked["agents"] == [{"agent_index": 0, "ranks": True, "reason": None}]
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


# --- issue 19: sections, sort, tooltip, the recommended set, labels, the runs list -----------------------

SETS_MANIFEST = """[task_sets.quick]
tasks = ["task-000", "task-001", "task-002", "task-003"]
recommended = true

[task_sets.parity]
tasks = ["task-004", "task-005"]
"""


def test_leaderboard_sections_rank_apart_in_the_chosen_sort_with_the_tooltip_above_its_row(
    shared_stack, api_for, page: Page, tmp_path: Path
) -> None:
    stack = shared_stack(executors=1, **ACK_WAIT)
    api = api_for(stack)
    folder = tmp_path / "sets"
    write_tasks(folder, 6)
    (folder / "regatta.toml").write_text(SETS_MANIFEST)
    # No name given: a folder benchmark is named after its folder, never its absolute path.
    added = api.http.post("/api/v1/benchmarks", json={"source_type": "folder", "path": str(folder)})
    assert added.status_code == 201, added.text
    benchmark = api.benchmark_ready("sets")
    assert benchmark["sync_status"] == "ready" and benchmark["source_ref"] == str(folder)

    alpha, none = hosted("oracle", "alpha", "v1"), hosted("nop", "none")
    full = submit(api, "sets", [alpha, none])
    quick = submit(api, "sets", [none], tasks_config={"task_set": "quick"})
    parity = submit(api, "sets", [alpha], tasks_config={"task_set": "parity"})
    for run in (full, quick, parity):
        assert api.wait_run(run["id"], timeout=RUN / 1000)["benchmark_run"]["status"] == "finished"
    api.wait_for(lambda: len(api.get(f"/benchmarks/{benchmark['id']}/leaderboard")["leaderboard"]) == 3)
    sign_in(page, stack)

    expect(page.locator("tr[data-name='sets']").get_by_role("link", name="sets", exact=True)).to_be_visible()
    page.goto(f"{stack.url}/benchmarks/{benchmark['id']}")
    expect(page.get_by_role("heading", level=1)).to_contain_text("sets")
    expect(page.get_by_role("heading", level=1)).not_to_contain_text(str(tmp_path))

    # One ranking of every row, each naming its task set (issue 28): oracle's full-list row first; nop's
    # full-list row is beaten in its own group (6 discordant tasks: Holm rejects) and its quick-set row by
    # the higher estimate of another group, so both are 2nd, equal, and not tied (two groups never tie).
    table = page.get_by_test_id("leaderboard-table")
    expect(table).to_have_count(1)
    expect(table.get_by_test_id("rank")).to_have_text(["1", "2", "2"])
    expect(table.locator("tbody tr").nth(0)).to_contain_text("oracle")
    task_sets = table.get_by_test_id("row-task-set")
    expect(task_sets).to_have_text(["Full list", "Full list", "Recommended: quick"])
    expect(table.locator("tbody tr").nth(2)).to_contain_text("nop")
    expect(page.get_by_test_id("leaderboard")).not_to_contain_text(parity["name"])

    # Each sort orders every row; the page shows the API's order.
    for key, label in (("time_per_task", "Time / task"), ("pass_at_1", "Pass@1")):
        table.get_by_role("link", name=label).click()
        expect(page).to_have_url(re.compile(rf"\?sort={key}$"))
        expect(table.locator("th[aria-sort]")).to_contain_text(label)
        rows = api.get(f"/benchmarks/{benchmark['id']}/leaderboard", sort=key)["leaderboard"]
        if key == "time_per_task":
            times = [r["mean_duration_seconds"] for r in rows]
            assert times == sorted(times), times
        expect(table.locator("tbody tr")).to_have_count(len(rows))
        for position, row in enumerate(rows):
            shown_row = table.locator("tbody tr").nth(position)
            expect(shown_row).to_have_attribute("data-participant", row["participant"])
            expect(shown_row).to_have_attribute("data-section", row["section"]["key"])
        expect(table.get_by_test_id("rank").first).to_have_text(re.compile(r"^1=?$"))

    # The rank tooltip opens above its row and leaves the next row readable, at both widths; a row of
    # another task set than the top one says it is not comparable with it.
    quick_row = table.locator("tbody tr").nth(2)
    quick_row.evaluate("row => row.scrollIntoView({block: 'center'})")
    quick_row.get_by_test_id("rank").hover()
    not_comparable = quick_row.get_by_test_id("rank-tooltip")
    expect(not_comparable).to_contain_text("Not comparable with the top participant")
    page.mouse.move(0, 0)
    expect(not_comparable).to_be_hidden()
    for width in (1280, PHONE["width"]):
        page.set_viewport_size({"width": width, "height": 900 if width == 1280 else PHONE["height"]})
        first_row = table.locator("tbody tr").nth(0)
        first_row.evaluate("row => row.scrollIntoView({block: 'center'})")
        first_row.get_by_test_id("rank").hover()
        tip = first_row.get_by_test_id("rank-tooltip")
        expect(tip).to_be_visible()
        expect(tip).to_contain_text("Top participant")
        next_row = table.locator("tbody tr").nth(1)
        assert_apart(tip, next_row, f"tooltip over the next row at {width}px")
        shot(page, f"leaderboard-tooltip-{width}")
        page.mouse.move(0, 0)
        expect(tip).to_be_hidden()
    page.set_viewport_size({"width": 1280, "height": 900})
    assert_readable(page, "leaderboard-sections", ["Full list", "Recommended: quick", "oracle"])

    # The runs list says which tasks each run chose, and labels agents as the leaderboard does.
    runs = page.get_by_test_id("runs-table")
    chosen = ((full, "All · 6 tasks"), (quick, "Set quick · 4 tasks"), (parity, "Set parity · 2 tasks"))
    for run, text in chosen:
        row = runs.locator(f"tr[data-run-id='{run['id']}']")
        expect(row.get_by_test_id("run-selection")).to_have_text(text)
    expect(runs.locator(f"tr[data-run-id='{full['id']}']")).to_contain_text("oracle, nop")

    # The parity run is a subset the benchmark does not recommend: its page says why it is not ranked.
    page.goto(f"{stack.url}/benchmarks/runs/{parity['id']}")
    expect(page.get_by_test_id("run-qualification")).to_contain_text(
        "neither the full task list nor the recommended set 'quick'"
    )
    expect(page.get_by_test_id("agent-results")).to_contain_text("oracle")
    page.get_by_role("tab", name="Task Results").click()
    expect(page.locator("#results-agent option", has_text="oracle")).to_have_count(1)

    # The New Run form says "ranks like a full run" of the recommended set only.
    page.goto(f"{stack.url}/benchmarks/{benchmark['id']}/runs/new")
    page.get_by_label("Named task set").check()
    hint = page.locator("[data-hint=recommended]")
    other = page.locator("[data-hint=other]")
    expect(page.locator("#task-set")).to_have_value("quick")
    expect(hint).to_be_visible()
    expect(hint).to_contain_text("ranks like a full run")
    expect(other).to_be_hidden()
    page.locator("#task-set").select_option("parity")
    expect(hint).to_be_hidden()
    expect(other).to_be_visible()
    expect(page.get_by_test_id("summary-tasks")).to_have_text("2 tasks (task set parity)")
    page.get_by_label("All tasks").check()
    expect(page.locator("[data-hint]:visible")).to_have_count(0)
    assert_readable(page, "new-run-task-sets", ["All tasks", "6 tasks"])


def test_the_runs_list_pages_past_50_and_filters_by_status_and_submitter(
    shared_stack, api_for, page: Page, tmp_path: Path
) -> None:
    """No executor: runs stay queued, except the ones stopped here, so the list holds exactly what this
    test submitted and stopped."""
    stack = shared_stack(executors=0)
    api = api_for(stack)
    write_tasks(tmp_path / "many", 2)
    benchmark_id = add_folder_benchmark(api, tmp_path / "many", "many")
    assert api.benchmark_ready("many")["sync_status"] == "ready"
    workspace = next(w for w in api.get("/workspaces")["workspaces"] if w["current"])
    member = api.http.post(
        f"/api/v1/workspaces/{workspace['id']}/members",
        json={"email": "bea@example.com", "role": "member", "issue_token": True},
    )
    assert member.status_code == 201, member.text
    bea = httpx.Client(
        base_url=stack.url, headers={"Authorization": f"Bearer {member.json()['token']}"}, timeout=30.0
    )
    one = [hosted("nop", "none")]
    created = []
    for index in range(53):
        body = {"experiment_config": {"benchmark": "many"}, "agents": one, "name": f"run-{index:02d}"}
        if index % 3 == 1:
            body["tasks_config"] = {"task_names": ["task-001"]}
        client = bea if index % 10 == 0 else api.http
        response = client.post("/api/v1/runs", json=body)
        assert response.status_code == 201, response.text
        created.append(response.json())
    for run in created[-2:]:
        assert api.http.post(f"/api/v1/runs/{run['id']}/stop").status_code == 202
    for run in created[-2:]:
        assert api.wait_run(run["id"])["benchmark_run"]["status"] == "stopped"
    sign_in(page, stack)

    page.goto(f"{stack.url}/benchmarks/{benchmark_id}")
    runs = page.get_by_test_id("runs-table")
    expect(runs.locator("tbody tr")).to_have_count(50)
    expect(page.get_by_test_id("runs-range")).to_have_text("1–50 of 53 runs")
    expect(runs.locator("tbody tr").first).to_contain_text("run-52")
    expect(runs.locator("tr", has_text="run-49").get_by_test_id("run-selection")).to_have_text(
        "Named: task-001 · 1 task"
    )
    all_tasks = runs.locator("tr", has_text="run-48").get_by_test_id("run-selection")
    expect(all_tasks).to_have_text("All · 2 tasks")
    assert_readable(page, "runs-list-page-1", ["1–50 of 53 runs", "Named: task-001 · 1 task"])
    page.get_by_test_id("runs-pager").get_by_role("link", name="Next").click()
    expect(page).to_have_url(re.compile(r"page=2"))
    expect(runs.locator("tbody tr")).to_have_count(3)
    expect(page.get_by_test_id("runs-range")).to_have_text("51–53 of 53 runs")
    expect(runs.locator("tbody tr").last).to_contain_text("run-00")
    shot(page, "runs-list-page-2")

    # Filters: status, then submitter; each change starts from the first page and stays in the URL.
    page.get_by_label("Status").select_option("stopped")
    expect(page).to_have_url(re.compile(r"status=stopped"))
    expect(page).not_to_have_url(re.compile(r"page="))
    expect(runs.locator("tbody tr")).to_have_count(2)
    expect(runs.locator("tbody tr")).to_contain_text(["run-52", "run-51"])
    expect(page.get_by_test_id("runs-pager")).to_have_count(0)
    page.get_by_label("Status").select_option("")
    page.get_by_label("Submitted by").select_option("bea@example.com")
    expect(page).to_have_url(re.compile(r"submitter=bea%40example.com"))
    expect(runs.locator("tbody tr")).to_have_count(6)
    expect(runs.locator("tbody tr").first).to_contain_text("run-50")
    page.get_by_label("Status").select_option("stopped")
    expect(runs.locator("tbody tr.empty")).to_contain_text("No runs match these filters")
    assert_readable(page, "runs-list-filtered", ["No runs match these filters"])
    page.get_by_role("link", name="Show all runs").click()
    expect(runs.locator("tbody tr")).to_have_count(50)
