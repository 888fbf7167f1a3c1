"""Issue 19, item 2: a run that cannot produce a meaningful result ends `failed`, saying why in its API,
its Logs and on its run page, and keeps the results it finished (API and downloads).

Causes shown through the running stack: every attempt errored (tasks with sidecar services, which the
`local` environment refuses); the benchmark's version can no longer be fetched (a task archive removed
from the object store, as an operator losing it would); an execution error retrying cannot cure (the
run's secrets key lost mid-run, so no executor can open its secrets). Scoring that raises is in
tests/integration/test_scoring_failures.py.
"""

from __future__ import annotations

import asyncio
import csv
import io
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import nats
from playwright.sync_api import Page, expect
from regatta_shared.messaging.bus import TASKS_BUCKET
from sqlalchemy import create_engine, text

from tests.e2e.test_cli import regatta
from tests.e2e.web_ui_support import ACK_WAIT, phone_shot, shot, sign_in
from tests.support.tasks import run_toml, write_task


def _results(api, run_id: str) -> dict[str, dict[str, str]]:
    manifest = api.get(f"/runs/{run_id}/downloads", types="results,logs")
    files = {f["path"]: f for f in manifest["files"]}
    results = httpx.get(files["results.csv"]["url"], timeout=30).text
    return {row["task"]: row for row in csv.DictReader(io.StringIO(results))}


def _logs_download(api, run_id: str) -> str:
    manifest = api.get(f"/runs/{run_id}/downloads", types="logs")
    (logs,) = manifest["files"]
    return httpx.get(logs["url"], timeout=30).text


async def _remove_archive(nats_url: str, digest: str) -> None:
    nc = await nats.connect(nats_url)
    try:
        bucket = await nc.jetstream().object_store(TASKS_BUCKET)
        await bucket.delete(digest)
    finally:
        await nc.close()


def _add(api, root: Path, name: str) -> dict:
    response = api.http.post(
        "/api/v1/benchmarks", json={"source_type": "folder", "path": str(root), "name": name}
    )
    assert response.status_code == 201, response.text
    assert api.benchmark_ready(name)["sync_status"] == "ready"
    return api.get(f"/benchmarks/{name}")["benchmark"]


def test_runs_that_cannot_produce_a_result_end_failed_with_their_reason_and_keep_results(
    shared_stack, api_for, page: Page, tmp_path: Path
) -> None:
    stack = shared_stack(executors=1, **ACK_WAIT)
    api = api_for(stack)

    # 1. Every attempt errored: both tasks need sidecar services the `local` environment does not run.
    sidecars = tmp_path / "sidecars"
    for name in ("compose-a", "compose-b"):
        task = write_task(sidecars, name, solve=f"echo done > /app/out.txt  # {name}")
        (task / "environment" / "docker-compose.yaml").write_text("services: {db: {image: postgres}}\n")
    _add(api, sidecars, "sidecars")
    errored_run = api.submit_toml(run_toml("sidecars", retries=2))["id"]

    # 2. The benchmark's version can no longer be fetched: the middle task's archive is gone. One
    # attempt at a time, so the first task's result exists when the second one fails the run.
    vanishing = tmp_path / "vanishing"
    for index in range(3):
        write_task(vanishing, f"task-{index}", solve=f"echo done > /app/out.txt  # {index}")
    benchmark = _add(api, vanishing, "vanishing")
    digests = {task["name"]: task["digest"] for task in benchmark["tasks"]}
    assert len(set(digests.values())) == 3
    # In a thread of its own: Playwright's sync API keeps an event loop running on this one.
    with ThreadPoolExecutor(1) as pool:
        pool.submit(asyncio.run, _remove_archive(stack.nats_url, digests["task-1"])).result()
    vanished_run = api.submit_toml(run_toml("vanishing", concurrency=1, retries=2))["id"]

    # 3. An execution error retrying cannot cure: the run's secrets key is lost (its row deleted, as a
    # purge or a restore from an old backup would) while its first attempt runs; every later job's
    # secrets cannot be opened by any executor.
    slow = tmp_path / "slow"
    write_task(slow, "slow-0", solve="sleep 8\necho done > /app/out.txt")
    # (Contents of their own: a task archive is stored by content, so a twin of task-1 would restore it.)
    write_task(slow, "slow-1", solve="echo done > /app/out.txt  # slow")
    _add(api, slow, "slow")
    body = {
        "experiment_config": {"benchmark": "slow"},
        "agents": [{"harness": "oracle", "model": {"type": "hosted", "base_model": "none"}, "env": {}}],
        "execution_config": {"max_concurrent_attempts": 1},
        "secrets": {"provided": {"RUN_ONLY_TOKEN": "run-only-value-0d1f"}},
    }
    created = api.http.post("/api/v1/runs", json=body)
    assert created.status_code == 201, created.text
    sealed_run = created.json()["id"]
    api.wait_for(
        lambda: any(a["status"] == "running" for a in api.get(f"/runs/{sealed_run}/attempts")["attempts"]),
        timeout=120,
    )
    engine = create_engine(stack.database_url)
    with engine.begin() as conn:
        lost = conn.execute(text("DELETE FROM run_keys WHERE run_id = :r"), {"r": sealed_run}).rowcount
    engine.dispose()
    assert lost == 1

    # --- every attempt errored ---
    detail = api.wait_run(errored_run, timeout=180)
    run = detail["benchmark_run"]
    assert run["status"] == "failed", run
    assert run["status_reason"].startswith("every attempt errored (2 of 2); error: TaskEnvironmentError:")
    assert "docker-compose.yaml" in run["status_reason"]
    # Final scores of what it measured: two errors, nothing scored as the agent's failure.
    (metric,) = api.get(f"/runs/{errored_run}")["agent_metrics"]
    assert (metric["passed"], metric["failed"], metric["errored"], metric["final"]) == (0, 0, 2, True)
    messages = [entry["message"] for entry in api.all_logs(errored_run)]
    failed_at = next(i for i, m in enumerate(messages) if m.startswith("Run failed: "))
    assert messages[failed_at] == f"Run failed: {run['status_reason']}"
    assert all(not m.startswith("compose-") for m in messages[failed_at:]), "it fails after every result"
    assert "All attempts recorded" not in messages
    rows = _results(api, errored_run)
    assert {task: row["outcome"] for task, row in rows.items()} == {
        "compose-a": "errored",
        "compose-b": "errored",
    }
    # A failed run never ranks.
    assert api.get("/benchmarks/sidecars/leaderboard")["leaderboard"] == []

    # --- the benchmark's version can no longer be fetched ---
    detail = api.wait_run(vanished_run, timeout=180)
    run = detail["benchmark_run"]
    reason = run["status_reason"]
    assert run["status"] == "failed", run
    assert reason.startswith("the benchmark's version can no longer be fetched: the archive of task 'task-1'")
    assert digests["task-1"] in reason
    attempts = {a["task"]: a for a in api.get(f"/runs/{vanished_run}/attempts")["attempts"]}
    assert attempts["task-0"]["outcome"] == "passed", "the result finished before the failure is kept"
    assert attempts["task-1"]["outcome"] == "errored"
    assert attempts["task-1"]["try_number"] == 1, "an archive that is gone is not retried"
    assert attempts["task-1"]["result"]["exception_type"] == "TaskArchiveMissing"
    assert "task-2" not in attempts or attempts["task-2"]["outcome"] == "cancelled"
    (metric,) = detail["agent_metrics"]
    assert (metric["passed"], metric["errored"], metric["final"]) == (1, 1, True)
    messages = [entry["message"] for entry in api.all_logs(vanished_run)]
    assert any(
        m.startswith("Run failing: the benchmark's version can no longer be fetched") for m in messages
    )
    assert f"Run failed: {reason}" in messages
    rows = _results(api, vanished_run)
    assert rows["task-0"]["outcome"] == "passed" and rows["task-1"]["outcome"] == "errored"
    assert f"Run failed: {reason}" in _logs_download(api, vanished_run)
    # The CLI contract's run detail shows `failed` (its "See logs with" hint) and the same logs.
    workspace = {"X-Osmosis-Workspace": stack.workspace}
    cli = api.http.get(f"/api/cli/benchmark-runs/{vanished_run}", headers=workspace).json()
    assert cli["benchmark_run"]["status"] == "failed"
    cli_logs = api.http.get(
        f"/api/cli/benchmark-runs/{vanished_run}/logs", params={"limit": 5}, headers=workspace
    ).json()
    assert any(entry["message"] == f"Run failed: {reason}" for entry in cli_logs["logs"]), cli_logs

    # --- the run's secrets cannot be opened ---
    run = api.wait_run(sealed_run, timeout=180)["benchmark_run"]
    assert run["status"] == "failed", run
    assert run["status_reason"].startswith("the run's secrets cannot be opened by its executors"), run
    attempts = {a["task"]: a for a in api.get(f"/runs/{sealed_run}/attempts")["attempts"]}
    assert attempts["slow-0"]["outcome"] == "passed", "the result finished before the failure is kept"
    assert attempts["slow-1"]["result"]["exception_type"] == "SealError"
    assert _results(api, sealed_run)["slow-0"]["outcome"] == "passed"

    # Our own CLI says so too.
    shown = regatta(stack, "run", "show", vanished_run, COLUMNS="400")
    assert shown.returncode == 0, shown.stderr
    assert f"Reason: {reason}" in " ".join(shown.stdout.split()), shown.stdout

    # --- the run page says so: a banner with the reason, the sidebar, the Logs tab ---
    sign_in(page, stack)
    page.goto(f"{stack.url}/benchmarks/runs/{vanished_run}")
    banner = page.get_by_test_id("run-failed")
    expect(banner).to_be_visible()
    expect(banner).to_contain_text("Run failed: the benchmark's version can no longer be fetched")
    expect(banner).to_contain_text("The results it finished are kept")
    expect(page.get_by_test_id("run-status")).to_contain_text("failed")
    expect(page.get_by_test_id("run-status")).to_contain_text("task-1")
    expect(page.get_by_test_id("agent-results")).to_contain_text("1 passed")
    # Measured in the page in one go: the results redraw live, and an element replaced between two
    # reads from here has no box.
    page.wait_for_function(
        """() => {
            const banner = document.querySelector('[data-testid="run-failed"]');
            const table = document.querySelector('[data-testid="agent-results"]');
            if (!banner || !table) return false;
            const b = banner.getBoundingClientRect(), t = table.getBoundingClientRect();
            return b.height > 0 && t.height > 0 && b.bottom <= t.top;
        }""",
        timeout=10_000,
    )  # times out (fails) if the banner covers the results
    shot(page, "run-failed")
    phone_shot(page, "run-failed")
    page.get_by_role("tab", name="Logs").click()
    expect(page.get_by_role("tabpanel", name="Logs")).to_contain_text(f"Run failed: {reason}")
    page.get_by_role("tab", name="Task Results").click()
    expect(page.locator("tr[data-attempt-id]", has_text="task-0")).to_contain_text("passed")
