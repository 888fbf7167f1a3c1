"""Issue 8: 20 runs submitted at once by 5 workspaces on a fixed executor capacity all finish, no run ever
exceeds its max_concurrent_attempts (checked from the events), and no run starves."""

from __future__ import annotations

import json
from concurrent.futures import ThreadPoolExecutor

import pytest
from sqlalchemy import create_engine, text

from tests.support.tasks import run_toml, write_tasks

RUNS_PER_WORKSPACE = 4
WORKSPACES = 5
CONCURRENCY = 2


@pytest.mark.timeout(900)
def test_twenty_runs_from_five_workspaces_all_finish_within_their_limits(
    make_stack, api_for, tmp_path
) -> None:
    stack = make_stack(executors=1, REGATTA_EXECUTOR_SLOTS="4")
    api = api_for(stack)
    tasks = write_tasks(tmp_path / "tasks", 3, prefix="load", sleep=0.2)
    names = []
    for index in range(WORKSPACES):
        name = f"team-{index}"
        response = api.http.post("/api/v1/workspaces", json={"name": name})
        assert response.status_code == 201, response.text
        headers = {"X-Regatta-Workspace": name}
        added = api.http.post(
            "/api/v1/benchmarks",
            headers=headers,
            json={"source_type": "folder", "path": str(tasks), "name": "load"},
        )
        assert added.status_code == 201, added.text
        names.append(name)
    for name in names:
        api.wait_for(
            # Each workspace also holds the hosted benchmarks: wait for "load" by name.
            lambda name=name: any(
                b["name"] == "load" and b["sync_status"] == "ready"
                for b in api.http.get("/api/v1/benchmarks", headers={"X-Regatta-Workspace": name}).json()[
                    "benchmarks"
                ]
            )
        )

    def submit(name: str) -> str:
        response = api.http.post(
            "/api/v1/runs",
            content=run_toml("load", attempts=2, concurrency=CONCURRENCY),
            headers={"Content-Type": "application/toml", "X-Regatta-Workspace": name},
        )
        assert response.status_code == 201, response.text
        return response.json()["id"]

    with ThreadPoolExecutor(max_workers=8) as pool:
        run_ids = list(pool.map(submit, [n for n in names for _ in range(RUNS_PER_WORKSPACE)]))
    assert len(run_ids) == 20

    engine = create_engine(stack.database_url)

    def all_done() -> bool:
        with engine.connect() as conn:
            finished = conn.execute(
                text("SELECT count(*) FROM events WHERE type = 'RunFinished'")
            ).scalar_one()
        return finished == len(run_ids)

    api.wait_for(all_done, timeout=600, every=1.0)
    with engine.connect() as conn:
        rows = conn.execute(
            text(
                "SELECT position, stream_id, type, data FROM events"
                " WHERE stream_id LIKE 'run-%' ORDER BY position"
            )
        ).all()
    engine.dispose()

    in_flight: dict[str, set[str]] = {}
    first_start: dict[str, int] = {}
    finished_total = 0
    for _, stream, kind, data in rows:
        data = data if isinstance(data, dict) else json.loads(data)
        run = stream.removeprefix("run-")
        if kind == "AttemptScheduled":
            in_flight.setdefault(run, set()).add(data["attempt_id"])
            assert len(in_flight[run]) <= CONCURRENCY, f"{run} exceeded max_concurrent_attempts"
        elif kind == "AttemptStarted":
            first_start.setdefault(run, finished_total)
        elif kind == "AttemptFinished":
            # A short attempt reports no start of its own: its outcome is its run's first sign of work.
            first_start.setdefault(run, finished_total)
            in_flight[run].discard(data["attempt_id"])
            finished_total += 1
    assert finished_total == 20 * 3 * 2
    assert set(first_start) == set(run_ids)
    # No run starves: every run had an attempt started before half of all the work was done.
    assert max(first_start.values()) < finished_total / 2, first_start
