"""Issue 26 cause 7 and issue 27 finding 7 through the gateway: a benchmark synced by the real registry-sync
with one invalid task (no instruction.md) and two valid ones is ready, the API, web page and CLI list the
invalid task with its reason, and a run schedules only the valid tasks; a ceiling lowered after the sync
refuses a submission with a 4xx naming task, field and ceiling, and records nothing."""

from __future__ import annotations

import json
from pathlib import Path

import nats
import pytest
from regatta_registry_sync.archive_store import NatsArchiveStore
from regatta_registry_sync.sync import BenchmarkSync, initial_sync_id
from regatta_shared.ids import run_stream
from regatta_shared.messaging.bus import TASKS_BUCKET

from ..registry_sync_support import write_task
from .conftest import ADMIN_TOKEN, Gateway, demo_config


def _dataset(root: Path) -> Path:
    for index, name in enumerate(["alpha", "broken", "gamma"]):
        write_task(root / name, index)
    (root / "broken" / "instruction.md").unlink()
    toml = root / "gamma" / "task.toml"
    toml.write_text(toml.read_text() + "[environment]\nmemory_mb = 4096\n")
    return root


async def _synced_benchmark(gw: Gateway, root: Path, name: str) -> str:
    body = {"source_type": "folder", "path": str(root), "name": name}
    benchmark_id = gw.ok(gw.v1("POST", "/benchmarks", json=body), 201)["id"]
    nc = await nats.connect(gw.nats_url)
    try:
        bucket = await nc.jetstream().object_store(TASKS_BUCKET)
        await BenchmarkSync(gw.store, NatsArchiveStore(bucket)).run(
            benchmark_id, initial_sync_id(benchmark_id)
        )
    finally:
        await nc.close()
    gw.settle()
    return benchmark_id


def _scheduled(gw: Gateway, run_id: str) -> list[str]:
    [submitted] = [e for e in gw.store.read_stream(run_stream(run_id)) if e.type == "RunSubmitted"]
    return [task["name"] for task in submitted.data["tasks"]]


async def test_an_invalid_task_is_listed_with_its_reason_and_runs_schedule_only_valid_ones(
    gateway: Gateway, tmp_path: Path
) -> None:
    gw = gateway
    benchmark_id = await _synced_benchmark(gw, _dataset(tmp_path / "ds"), "mixed")

    detail = gw.ok(gw.v1("GET", f"/benchmarks/{benchmark_id}"))["benchmark"]
    assert detail["sync_status"] == "ready" and detail["task_count"] == 2
    assert detail["invalid_task_count"] == 1
    assert [(t["name"], t["invalid_reason"]) for t in detail["tasks"]] == [
        ("alpha", None),
        ("gamma", None),
        ("broken", "task 'broken': instruction.md is missing"),
    ]
    gw.client.cookies.set("regatta_token", ADMIN_TOKEN)
    page = gw.client.get(f"/benchmarks/{benchmark_id}", follow_redirects=False)
    assert page.status_code == 200
    assert 'data-testid="invalid-tasks"' in page.text
    assert "task &#39;broken&#39;: instruction.md is missing" in page.text
    gw.client.cookies.clear()

    run = gw.submit(demo_config("mixed"))
    assert run["task_count"] == 2
    assert _scheduled(gw, run["id"]) == ["alpha", "gamma"]

    before = gw.event_count()
    named = gw.cli(
        "POST", "/benchmark-runs", json=demo_config("mixed", tasks_config={"task_names": ["broken"]})
    )
    assert named.status_code == 400
    assert "task 'broken' is invalid: task 'broken': instruction.md is missing" in json.dumps(named.json())
    assert gw.event_count() == before


async def test_a_ceiling_lowered_after_the_sync_refuses_the_submission_and_records_nothing(
    gateway: Gateway, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    gw = gateway
    await _synced_benchmark(gw, _dataset(tmp_path / "ds"), "mixed")
    monkeypatch.setenv("REGATTA_MAX_MEMORY_MB", "2048")
    before = gw.event_count()

    refused = gw.cli("POST", "/benchmark-runs", json=demo_config("mixed"))

    assert refused.status_code == 400, refused.text
    text = json.dumps(refused.json())
    assert (
        "task 'gamma': [environment].memory_mb = 4096 exceeds the operator's ceiling of 2048 "
        "(REGATTA_MAX_MEMORY_MB)"
    ) in text
    assert gw.event_count() == before

    # The timeout multiplier counts against the timeout ceilings: 60 s x 10 is over 300 s.
    monkeypatch.setenv("REGATTA_MAX_MEMORY_MB", "8192")
    monkeypatch.setenv("REGATTA_MAX_AGENT_TIMEOUT_SEC", "300")
    slow = gw.cli(
        "POST", "/benchmark-runs", json=demo_config("mixed", execution_config={"timeout_multiplier": 10})
    )
    assert slow.status_code == 400
    assert (
        "[agent].timeout_sec = 60 (x10 timeout multiplier) exceeds the operator's ceiling of 300"
        in json.dumps(slow.json())
    )
    assert gw.event_count() == before

    # Within the ceilings again, the same benchmark runs (no re-sync needed).
    monkeypatch.delenv("REGATTA_MAX_AGENT_TIMEOUT_SEC")
    assert gw.submit(demo_config("mixed"))["task_count"] == 2
