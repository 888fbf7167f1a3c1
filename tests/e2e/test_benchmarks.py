"""Issue 4 through the running stack's REST API: paged sync with visible progress, sources, failures and Retry
sync, and a run that keeps executing the version it locked while the benchmark is re-synced."""

from __future__ import annotations

import json
import shutil
import time
from collections import Counter
from datetime import datetime
from pathlib import Path
from typing import Any

from sqlalchemy import create_engine, text

from ..integration.harbor_hub import HarborHub
from ..integration.registry_sync_support import (
    EXAMPLE_TASKS,
    commit_all,
    generate_registry,
    init_repo,
    write_task,
)
from ..support.gates import NEVER_OPENED, Gate, gate
from .web_ui_support import ACK_WAIT

RUN = (
    '[experiment]\nbenchmark = "{benchmark}"\n[[agents]]\nharness = "oracle"\n'
    '[agents.model]\ntype = "hosted"\nbase_model = "none"\n'
    "[execution]\nattempts_per_task = 1\nmax_concurrent_attempts = 1\n"
)


def _events(database_url: str, benchmark_id: str, event_type: str) -> list[dict[str, Any]]:
    engine = create_engine(database_url)
    with engine.connect() as conn:
        rows = conn.execute(
            text("SELECT data FROM events WHERE stream_id = :s AND type = :t ORDER BY version"),
            {"s": f"benchmark-{benchmark_id}", "t": event_type},
        ).all()
    engine.dispose()
    return [row[0] for row in rows]


def _run_tasks(database_url: str, run_id: str) -> dict[str, str]:
    engine = create_engine(database_url)
    with engine.connect() as conn:
        data = conn.execute(
            text("SELECT data FROM events WHERE stream_id = :s AND type = 'RunSubmitted'"),
            {"s": f"run-{run_id}"},
        ).scalar_one()
    engine.dispose()
    return {task["name"]: task["digest"] for task in data["tasks"]}


def _add(api: Any, body: dict[str, Any]) -> str:
    response = api.http.post("/api/v1/benchmarks", json=body)
    assert response.status_code == 201, response.text
    return response.json()["id"]


def _settled(api: Any, benchmark_id: str, timeout: float = 240.0) -> dict[str, Any]:
    def done() -> dict[str, Any] | None:
        body = api.get(f"/benchmarks/{benchmark_id}")["benchmark"]
        return body if body["sync_status"] in ("ready", "failed") else None

    return api.wait_for(done, timeout)


def _pass_at_1(detail: dict[str, Any]) -> float:
    return detail["agent_metrics"][0]["pass_at_1"]["value"]


def test_registry_of_1050_tasks_syncs_page_by_page_with_visible_progress(
    make_stack, api_for, tmp_path
) -> None:
    registry = generate_registry(tmp_path / "big", 1050)
    stack = make_stack(executors=1, REGATTA_SYNC_PAGE_SIZE="25")
    api = api_for(stack)
    benchmark_id = _add(api, {"registry_path": str(registry), "dataset": "generated@1.0", "name": "big"})

    progress: list[tuple[str, int]] = []
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        body = api.get(f"/benchmarks/{benchmark_id}")["benchmark"]
        progress.append((body["sync_status"], body["synced_task_count"]))
        if body["sync_status"] in ("ready", "failed"):
            break
        time.sleep(0.02)

    assert body["sync_status"] == "ready", body.get("sync_error")
    midway = [synced for status, synced in progress if status == "syncing" and 0 < synced < 1050]
    assert midway, f"never saw a partial sync: {sorted(set(progress))[:10]}"
    assert midway == sorted(midway)
    assert body["task_count"] == 1050 and body["synced_task_count"] == 1050 and body["version"] == "1.0"
    assert body["categories"] == [
        {"name": name, "task_count": 210} for name in ("data", "files", "math", "scripting", "text")
    ]
    assert Counter(task["difficulty"] for task in body["tasks"])[None] == 262
    pages = _events(stack.database_url, benchmark_id, "BenchmarkTasksSynced")
    assert [page["page"] for page in pages] == list(range(1, 43))
    listed = next(b for b in api.get("/benchmarks")["benchmarks"] if b["id"] == benchmark_id)
    assert listed["task_count"] == 1050 and listed["category_count"] == 5


def _gated_tasks(root: Path, gate: Gate, count: int) -> None:
    """Oracle solutions that wait for the gate."""
    for index in range(count):
        task = root / f"locked-{index}"
        write_task(task, index, "locked")
        (task / "solution" / "solve.sh").write_text(
            f"#!/bin/bash\n{gate.wait()}echo {index} > /app/out.txt\n"
        )


def test_a_run_keeps_executing_the_version_it_locked_across_a_resync(shared_stack, api_for, tmp_path) -> None:
    tasks = tmp_path / "locked"
    stack = shared_stack(executors=1, **ACK_WAIT)
    api = api_for(stack)
    with gate() as opened:
        _gated_tasks(tasks, opened, 3)
        benchmark_id = _add(api, {"source_type": "folder", "path": str(tasks), "name": "locked"})
        before = _settled(api, benchmark_id)
        assert before["sync_status"] == "ready", before.get("sync_error")
        old_run = api.submit_toml(RUN.format(benchmark="locked"))["id"]
        api.wait_for(
            lambda: any(a["started_at"] for a in api.get(f"/runs/{old_run}/attempts")["attempts"]),
            timeout=120,
        )
        # While the old run waits at the gate, two tasks change so that the oracle would fail them.
        for name in ("locked-1", "locked-2"):
            (tasks / name / "tests" / "test.sh").write_text(
                "#!/bin/bash\necho 0 > /logs/verifier/reward.txt\n"
            )
        response = api.http.post(f"/api/v1/benchmarks/{benchmark_id}/sync")
        assert response.status_code == 202, response.text

        def resynced() -> dict[str, Any] | None:
            body = api.get(f"/benchmarks/{benchmark_id}")["benchmark"]
            return body if body["sync_status"] == "ready" and body["version"] != before["version"] else None

        after = api.wait_for(resynced, timeout=120)
        resynced_at = time.time()
        new_run = api.submit_toml(RUN.format(benchmark="locked"))["id"]
        opened.open()
        old = api.wait_run(old_run)
        new = api.wait_run(new_run)

    old_digests = {t["name"]: t["digest"] for t in before["tasks"]}
    new_digests = {t["name"]: t["digest"] for t in after["tasks"]}
    assert {n for n in old_digests if old_digests[n] != new_digests[n]} == {"locked-1", "locked-2"}
    assert after["digest"] != before["digest"]
    assert old["configuration"]["resolved_version"] == before["version"]
    assert old["configuration"]["resolved_digest"] == before["digest"]
    assert new["configuration"]["resolved_version"] == after["version"]
    assert _run_tasks(stack.database_url, old_run) == old_digests
    assert _run_tasks(stack.database_url, new_run) == new_digests
    # The old run fetched changed tasks after the re-sync, and still ran the content it locked.
    attempts = api.get(f"/runs/{old_run}/attempts")["attempts"]
    late = [
        a for a in attempts if a["task"] in ("locked-1", "locked-2") and _epoch(a["started_at"]) > resynced_at
    ]
    assert late, attempts
    assert NEVER_OPENED not in api.artifact_texts(old_run, limit=100_000)
    assert old["benchmark_run"]["status"] == new["benchmark_run"]["status"] == "finished"
    assert _pass_at_1(old) == 1.0
    assert abs(_pass_at_1(new) - 1 / 3) < 1e-9


def _epoch(stamp: str) -> float:
    return datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()


def test_sources_failures_retry_and_removal_through_rest(make_stack, api_for, tmp_path) -> None:
    hub = HarborHub().start()
    try:
        tasks = [hub.publish_task("acme", EXAMPLE_TASKS / name) for name in ("hello-file", "rot13")]
        hub.publish_dataset("acme", "mini", tasks, ["latest", "v1"])
        repo = tmp_path / "repo"
        init_repo(repo)
        write_task(repo / "tasks" / "alpha", 1)
        first = commit_all(repo, "first")
        write_task(repo / "tasks" / "beta", 2)
        commit_all(repo, "second")
        broken = tmp_path / "broken"
        shutil.copytree(EXAMPLE_TASKS, broken)
        (broken / "rot13" / "task.toml").unlink()
        declared = [
            {
                "source_type": "folder",
                "path": str(EXAMPLE_TASKS),
                "name": "hosted-folder",
                "metadata": {"description": "Declared by the deployment", "task_sets": {"smoke": ["rot13"]}},
            }
        ]
        stack = make_stack(
            executors=1,
            HARBOR_SUPABASE_URL=hub.url,
            HARBOR_SUPABASE_PUBLISHABLE_KEY="sb_publishable_standin",
            REGATTA_HOSTED_BENCHMARKS=json.dumps(declared),
            REGATTA_OUTBOUND_ALLOW="127.0.0.1",  # the stand-in hub
        )
        api = api_for(stack)
        hub_id = _add(api, {"source_type": "hub", "dataset": "acme/mini@v1"})
        git_id = _add(api, {"source_type": "git", "repo": f"{repo}@{first[:8]}", "name": "pinned"})
        broken_id = _add(api, {"source_type": "folder", "path": str(broken), "name": "broken"})

        hosted = api.benchmark_ready("hosted-folder")
        from_hub = _settled(api, hub_id)
        pinned = _settled(api, git_id)
        failed = _settled(api, broken_id)
    finally:
        hub.stop()

    assert hosted["sync_status"] == "ready" and hosted["hosted"]
    assert hosted["description"] == "Declared by the deployment"
    assert hosted["task_sets"] == [{"name": "smoke", "task_count": 1, "recommended": False}]
    assert api.http.delete(f"/api/v1/benchmarks/{hosted['id']}").status_code == 403

    assert from_hub["sync_status"] == "ready", from_hub.get("sync_error")
    assert from_hub["version"] == "1"
    assert sorted(t["name"] for t in from_hub["tasks"]) == ["acme/hello-file", "acme/rot13"]
    assert from_hub["digest"] == f"sha256:{hub.datasets[0].content_hash}"

    assert pinned["sync_status"] == "ready", pinned.get("sync_error")
    assert pinned["source_commit"] == first and [t["name"] for t in pinned["tasks"]] == ["alpha"]

    # One broken task is listed invalid with its reason; the other nine are ready and runnable.
    assert failed["sync_status"] == "ready" and failed["task_count"] == 9, failed.get("sync_error")
    invalid = {t["name"]: t["invalid_reason"] for t in failed["tasks"] if t["invalid_reason"]}
    assert invalid == {"rot13": "task 'rot13': task.toml is missing"}
    shutil.copy(EXAMPLE_TASKS / "rot13" / "task.toml", broken / "rot13" / "task.toml")
    assert api.http.post(f"/api/v1/benchmarks/{broken_id}/sync").status_code == 202
    retried = _settled(api, broken_id)
    assert retried["sync_status"] == "ready" and retried["task_count"] == 10 and "sync_error" not in retried

    assert api.http.delete(f"/api/v1/benchmarks/{broken_id}").status_code == 204
    assert broken_id not in {b["id"] for b in api.get("/benchmarks")["benchmarks"]}

    for body, field in (
        ({"source_type": "git", "repo": str(repo), "ref": "--upload-pack=touch /tmp/x"}, "ref"),
        ({"source_type": "git", "repo": "-oProxyCommand=x"}, "repo"),
        ({"source_type": "hub", "dataset": "not-a-package"}, "dataset"),
        ({"path": str(EXAMPLE_TASKS), "metadata": {"default_harness": "robot"}}, "metadata.default_harness"),
        ({"path": str(EXAMPLE_TASKS), "metadata": {"pass_treshold": 0.5}}, "metadata.pass_treshold"),
    ):
        response = api.http.post("/api/v1/benchmarks", json=body)
        assert response.status_code == 400 and response.json()["field"] == field, (body, response.text)
