"""Issue 17 (choice and honesty), end to end under `local`: every attempt records the environment that ran
it, a task whose Dockerfile `local` does not build is labelled so in the API, the results download and on
the run page (real Chromium), and a docker-compose task errors once, naming its file, unscored."""

from __future__ import annotations

import csv
import io
from pathlib import Path

import httpx
from playwright.sync_api import Page, expect

from tests.e2e.web_ui_support import ACK_WAIT, RUN, WAIT, add_folder_benchmark, shot, sign_in
from tests.support.tasks import run_toml, write_task


def _tasks(root: Path) -> Path:
    write_task(root, "plain")
    # The example: the oracle passes only where the Dockerfile was really built.
    baked = write_task(root, "baked", solve="cp /opt/marker.txt /app/out.txt")
    (baked / "environment" / "Dockerfile").write_text(
        "FROM python:3.12-slim\nWORKDIR /app\nRUN echo baked > /opt/marker.txt\n"
    )
    (baked / "tests" / "test.sh").write_text(
        "#!/bin/bash\nif grep -q baked /app/out.txt 2>/dev/null; then echo 1; else echo 0; fi"
        " > /logs/verifier/reward.txt\n"
    )
    sidecars = write_task(root, "sidecars")
    (sidecars / "environment" / "docker-compose.yaml").write_text("services:\n  main:\n    build: .\n")
    return root


def test_local_records_its_environment_and_labels_unbuilt_tasks_everywhere(
    shared_stack, api_for, page: Page, tmp_path: Path
) -> None:
    stack = shared_stack(executors=1, **ACK_WAIT)
    assert stack.environment == "local"
    api = api_for(stack)
    add_folder_benchmark(api, _tasks(tmp_path / "tasks"), "env-honesty")
    api.benchmark_ready("env-honesty")
    run_id = api.submit_toml(run_toml("env-honesty", retries=2))["id"]
    detail = api.wait_run(run_id, timeout=RUN / 1000)

    attempts = {a["task"]: a for a in api.get(f"/runs/{run_id}/attempts")["attempts"]}
    assert {task: a["result"]["environment"] for task, a in attempts.items()} == dict.fromkeys(
        ("baked", "plain", "sidecars"), "local"
    )
    plain, baked, sidecars = attempts["plain"], attempts["baked"], attempts["sidecars"]
    assert (plain["outcome"], plain["result"]["environment_built"], plain["result"]["environment_note"]) == (
        "passed",
        True,
        None,
    )
    assert baked["outcome"] == "failed"  # /opt/marker.txt was never made: and the attempt says why
    assert baked["result"]["environment_built"] is False
    note = baked["result"]["environment_note"]
    assert "The task's environment was not built" in note and "RUN (environment/Dockerfile)" in note
    # The compose task: an error of the setup, once (not retried with retries = 2), naming its file.
    assert (sidecars["outcome"], sidecars["try_number"]) == ("errored", 1)
    assert sidecars["result"]["exception_type"] == "TaskEnvironmentError"
    assert "environment/docker-compose.yaml" in sidecars["result"]["exception_message"]
    assert "REGATTA_EXECUTOR_ENVIRONMENT=docker" in sidecars["result"]["exception_message"]
    # Run view: attempts by environment; the errored compose task is not the agent's failure.
    assert detail["environments"] == [{"environment": "local", "attempts": 3, "not_built": 1}]
    logs = [entry["message"] for entry in api.all_logs(run_id)]
    assert any(
        m.startswith("baked attempt 1") and "the task's environment was not built (local)" in m for m in logs
    )
    metric = api.get(f"/runs/{run_id}")["agent_metrics"][0]
    assert (metric["passed"], metric["failed"], metric["errored"]) == (1, 1, 1)

    # The results download carries the same, per attempt.
    manifest = api.get(f"/runs/{run_id}/downloads", types="results")
    results = next(f for f in manifest["files"] if f["path"] == "results.csv")
    rows = {r["task"]: r for r in csv.DictReader(io.StringIO(httpx.get(results["url"], timeout=30).text))}
    assert {task: r["environment"] for task, r in rows.items()} == dict.fromkeys(
        ("baked", "plain", "sidecars"), "local"
    )
    assert (rows["baked"]["environment_built"], rows["plain"]["environment_built"]) == ("false", "true")
    assert rows["baked"]["environment_note"] == note

    # The run page: a banner above everything, the sidebar's count, the attempt's own note.
    page.set_default_timeout(WAIT)
    sign_in(page, stack)
    page.goto(f"{stack.url}/benchmarks/runs/{run_id}")
    banner = page.get_by_test_id("environment-not-built")
    expect(banner).to_be_visible()
    expect(banner).to_contain_text("Task environments were not built for 1 attempt of 1 task")
    expect(banner).to_contain_text("local")
    expect(page.get_by_test_id("run-environment")).to_contain_text("local 3 attempts, 1 not built")
    shot(page, "run-environment-not-built")
    page.get_by_role("tab", name="Task Results").click()
    row = page.locator("tr[data-attempt-id]", has_text="baked")
    expect(row.get_by_test_id("not-built-tag")).to_have_text("env not built")
    expect(
        page.locator("tr[data-attempt-id]", has_text="plain").get_by_test_id("not-built-tag")
    ).to_have_count(0)
    row.get_by_role("button", name="Details of baked", exact=False).click()
    expect(page.get_by_test_id("attempt-environment")).to_have_text("local")
    expect(page.get_by_test_id("environment-note")).to_contain_text("RUN (environment/Dockerfile)")
    shot(page, "attempt-environment-note")
