"""Issue 8: crash faults during a run of 400 attempts lose nothing and count nothing twice."""

from __future__ import annotations

import json
import random
from collections import Counter
from collections.abc import Iterator

import httpx
import pytest
from sqlalchemy import create_engine, text

from tests.e2e.test_spine import DEMO
from tests.support.own_postgres import OwnPostgres
from tests.support.processes import descendants

# Long enough that all eight faults, a few attempts apart, land while the run is running.
ATTEMPTS = 400
BIG_DEMO = DEMO.replace("attempts_per_task = 2", f"attempts_per_task = {ATTEMPTS // 20}")


def _scores(stack, run_id: str) -> list[dict]:
    engine = create_engine(stack.database_url)
    with engine.connect() as conn:
        rows = conn.execute(
            text("SELECT type, data FROM events WHERE stream_id = :s ORDER BY position"),
            {"s": f"run-{run_id}"},
        ).all()
        duplicates = conn.execute(text("SELECT count(*) - count(DISTINCT event_id) FROM events")).scalar_one()
    engine.dispose()
    events = [(kind, data if isinstance(data, dict) else json.loads(data)) for kind, data in rows]
    finished = Counter(d["attempt_id"] for kind, d in events if kind == "AttemptFinished")
    assert duplicates == 0
    assert len(finished) == ATTEMPTS, "every attempt has an outcome"
    assert set(finished.values()) == {1}, "every attempt has exactly one outcome"
    final = [d for kind, d in events if kind == "RunScored" and d["final"]]
    assert len(final) == 1
    keep = (
        "agent_index",
        "pass_at_1",
        "pass_at_k",
        "categories",
        "task_counts",
        "passed",
        "failed",
        "errored",
        "cancelled",
        "rank",
        "tied",
        "complete",
    )
    return [{k: agent[k] for k in keep} for agent in final[0]["agents"]]


def _runs_a_sandbox(executor: int) -> bool:
    return any(process.name == "bwrap" for process in descendants([executor]).values())


@pytest.fixture
def own_postgres() -> Iterator[OwnPostgres]:
    """The run's database in a cluster of its own: the test crashes it, never the machine's."""
    cluster = OwnPostgres()
    try:
        cluster.start()
        yield cluster
    finally:
        cluster.stop()


def _ingested(api, run_id: str) -> int:
    """Attempts recorded so far; 0 while the gateway is between a fault and its recovery."""
    try:
        return api.get(f"/runs/{run_id}")["progress"]["ingested"]
    except httpx.HTTPError:
        return 0


@pytest.mark.timeout(900)
def test_crash_faults_during_a_run_lose_nothing(own_postgres: OwnPostgres, make_stack, api_for) -> None:
    stack = make_stack(executors=2, database_url=own_postgres.url, REGATTA_JOB_ACK_WAIT="5")
    api = api_for(stack)
    api.benchmark_ready("regatta-examples")

    calm = api.submit_toml(BIG_DEMO)
    assert api.wait_run(calm["id"], timeout=400)["benchmark_run"]["status"] == "finished"
    expected = _scores(stack, calm["id"])

    rng = random.Random(20261129)
    stormy = api.submit_toml(BIG_DEMO)
    run_id = stormy["id"]
    victims = [
        "relay",
        "run-scheduler",
        "executor-1",
        "scoring",
        "registry-sync",
        "nats",
        "postgres",
        "gateway",
    ]
    statuses = []
    seen = 0
    for victim in victims:
        # Each fault strikes after the run made progress since the previous one, a few attempts later.
        target = seen + rng.randint(1, 8)
        seen = api.wait_for(lambda target=target: (n := _ingested(api, run_id)) >= target and n, timeout=120)
        statuses.append(api.get(f"/runs/{run_id}")["benchmark_run"]["status"])
        if victim == "executor-1":
            # Killed while it holds an attempt. Short attempts are never reported "running" (the
            # started-report delay), so the sign is one of its sandboxes.
            executor = stack.processes["executor-1"].pid
            api.wait_for(lambda pid=executor: _runs_a_sandbox(pid), timeout=60, every=0.02)
        if victim == "nats":
            stack.kill_nats()
            stack.start_nats()
        elif victim == "postgres":
            own_postgres.restart_immediately()
        else:
            stack.kill(victim)
            stack.restart(victim)
        if victim == "gateway":
            stack.wait_ready()
    assert statuses == ["running"] * len(victims), "every fault must hit the run while it runs"
    detail = api.wait_run(run_id, timeout=600)
    assert detail["benchmark_run"]["status"] == "finished"
    assert detail["progress"] == {"ingested": ATTEMPTS, "expected": ATTEMPTS}
    assert _scores(stack, run_id) == expected
