"""Issue 29, "each fact once": the New Run form's attempt count is the server's (POST /api/v1/runs/preview),
for a task set, two agents and several attempts per task: the number the API gives for the same body and
the one the submitted run then expects, and a refusal in its place when the server would refuse."""

from __future__ import annotations

import re
from pathlib import Path

from playwright.sync_api import Page, expect

from tests.e2e.web_ui_support import add_folder_benchmark, sign_in, write_tasks

MANIFEST = '[task_sets.small]\ntasks = ["task-000", "task-002", "task-004"]\n'


def test_the_form_shows_the_servers_attempt_count(shared_stack, api_for, page: Page, tmp_path: Path) -> None:
    stack = shared_stack(executors=0)
    api = api_for(stack)
    folder = tmp_path / "counted"
    write_tasks(folder, 5)
    (folder / "regatta.toml").write_text(MANIFEST)
    add_folder_benchmark(api, folder, "counted")
    benchmark = api.benchmark_ready("counted")
    assert benchmark["sync_status"] == "ready"
    sign_in(page, stack)
    page.goto(f"{stack.url}/benchmarks/{benchmark['id']}/runs/new")

    page.get_by_role("tab", name="Tasks").click()
    page.locator("input[name=task_mode][value=task_set]").check()
    page.locator("#task-set").select_option("small")
    page.get_by_role("tab", name="Agents").click()
    page.locator("[data-agent]").nth(0).get_by_label("Harness", exact=True).select_option("oracle")
    page.get_by_role("button", name="Add agent").click()
    page.locator("[data-agent]").nth(1).get_by_label("Harness", exact=True).select_option("nop")
    page.get_by_role("tab", name="Run settings").click()
    page.get_by_label("Attempts per task").fill("0")

    # A refused setting is said in place of a count, never a number the server would not schedule.
    total = page.get_by_test_id("summary-total")
    expect(total).to_contain_text("No attempts")
    expect(total).to_contain_text("greater than or equal to 1")
    page.get_by_label("Attempts per task").fill("3")
    expect(total).to_have_text("3 tasks × 2 agents × 3 attempts = 18 attempts")
    expect(page.get_by_test_id("summary-tasks")).to_have_text("3 tasks (task set small)")
    body = {
        "experiment_config": {"benchmark": benchmark["id"]},
        "agents": [
            {"harness": harness, "model": {"type": "hosted", "base_model": "none", "lora_model_name": ""}}
            for harness in ("oracle", "nop")
        ],
        "tasks_config": {"task_set": "small"},
        "execution_config": {"attempts_per_task": 3},
    }
    asked = api.http.post("/api/v1/runs/preview", json=body)
    assert asked.status_code == 200, asked.text
    assert asked.json()["expected_attempts"] == 18

    # The number a submission records is the one shown.
    page.get_by_role("button", name="Submit run").click()
    expect(page).to_have_url(re.compile(r"/benchmarks/runs/run_\w+$"))
    run_id = page.url.rsplit("/", 1)[-1]
    assert api.get(f"/runs/{run_id}")["progress"]["expected"] == 18
