"""The gateway projection's batched path writes exactly the rows of one `apply` per event (invariant 7),
on SQLite and Postgres, whatever the batch boundaries — including odd orders the services avoid."""

from __future__ import annotations

import random

import pytest
from regatta_gateway.readmodels import ReadModels
from regatta_gateway.readmodels.operations import OpsReadModels
from regatta_gateway.readmodels.operations import metadata as ops_tables
from regatta_gateway.readmodels.tables import metadata as read_model_tables
from regatta_shared.events import (
    AgentScores,
    AttemptFinished,
    AttemptRetried,
    AttemptScheduled,
    AttemptStarted,
    Event,
    ExecutorNoted,
    RunQueued,
    RunScored,
    RunStopRequested,
    RunSubmitted,
    UserRegistered,
    WebhookDeliveryRecorded,
    WebhookRegistered,
    WebhookRemoved,
    WorkspaceBudgetSet,
    WorkspaceCreated,
)
from regatta_shared.events.envelope import StoredEvent
from regatta_shared.eventstore import EventStore, new_event
from regatta_shared.eventstore.projections import ProjectionRunner
from sqlalchemy import Connection, MetaData


class OneByOne:
    """The projection with its batched path hidden: the runner applies event by event."""

    def __init__(self) -> None:
        self.inner = ReadModels()
        self.name = self.inner.name
        self.metadata: MetaData = self.inner.metadata

    def apply(self, conn: Connection, event: StoredEvent) -> None:
        self.inner.apply(conn, event)


def _submitted(run_id: str) -> RunSubmitted:
    return RunSubmitted.model_validate(
        {
            "run_id": run_id,
            "workspace_id": "ws",
            "name": run_id,
            "benchmark_id": "b",
            "benchmark_name": "b",
            "benchmark_version": "1",
            "benchmark_digest": "d",
            "selection": {},
            "tasks": [{"name": f"t{i}", "digest": "x"} for i in range(3)],
            "agents": [{"index": 0, "harness": "nop", "model": {"type": "hosted", "base_model": "m"}}],
            "execution": {"attempts_per_task": 2},
        }
    )


def _finished(
    run_id: str,
    aid: str,
    outcome: str,
    try_number: int,
    cost: float | None,
    started_at: str | None = None,
    environment: tuple[str | None, bool | None] = (None, None),
) -> AttemptFinished:
    return AttemptFinished(
        environment=environment[0],
        environment_built=environment[1],
        started_at=started_at,
        run_id=run_id,
        attempt_id=aid,
        agent_index=0,
        task="t0",
        attempt_index=0,
        try_number=try_number,
        outcome=outcome,  # type: ignore[arg-type]
        usage={"input_tokens": 10, "output_tokens": 3, "cost_usd": cost},  # type: ignore[arg-type]
    )


def _log(rng: random.Random) -> list[tuple[str, Event, str]]:
    """(stream, event, actor): two runs with retries, finishes before starts, unknown attempts and runs,
    provisional and final scores, a stop request and a user registered mid-run (its name must show in
    later log lines)."""
    log: list[tuple[str, Event, str]] = []
    for run_id in ("r1", "r2"):
        log.append((f"run-{run_id}", _submitted(run_id), "u1"))
        log.append((f"run-{run_id}", RunQueued(run_id=run_id, expected_attempts=6), "run-scheduler"))
    scheduled: set[str] = set()
    for n in range(80):
        run_id = rng.choice(["r1", "r1", "r2", "r2", "r-unknown"])
        aid = f"a{rng.randrange(5)}"
        stream = f"run-{run_id}"
        pick = rng.random()
        if n == 40:
            event: Event = UserRegistered(user_id="u1", email="u1@x", name="user one")
            stream = "workspace-ws"
        elif n in (60, 61):  # r1's final scores, then a late provisional one that must not replace them
            event = RunScored(
                run_id="r1",
                final=n == 60,
                agents=[AgentScores(agent_index=0, k=2, passed=n)],
                rules_version=2,
            )
            stream = "run-r1"
        elif pick < 0.25 and f"{run_id}-{aid}" not in scheduled:
            scheduled.add(f"{run_id}-{aid}")
            event = AttemptScheduled(
                run_id=run_id, attempt_id=f"{run_id}-{aid}", agent_index=0, task="t0", attempt_index=n
            )
        elif pick < 0.5:
            event = AttemptStarted(run_id=run_id, attempt_id=f"{run_id}-{aid}", try_number=1, executor_id="e")
        elif pick < 0.6:
            event = AttemptRetried(run_id=run_id, attempt_id=f"{run_id}-{aid}", try_number=2, delay_seconds=1)
        elif pick < 0.85:
            outcome = rng.choice(["passed", "failed", "errored"])
            # Short attempts report no start: their trial's start time fills started_at.
            trial_start = rng.choice([None, f"2026-11-29 10:00:{n:02d}.5+00:00", "not a time"])
            cost = rng.choice([None, 0.25, 0.1])
            # Old events name no environment; the run counts the others by environment and built-ness.
            environment = rng.choice([(None, None), ("local", False), ("local", True), ("container", True)])
            event = _finished(run_id, f"{run_id}-{aid}", outcome, 2, cost, trial_start, environment)
        elif pick < 0.87:
            event = ExecutorNoted(run_id=run_id, attempt_id=f"{run_id}-{aid}", note="sandbox created")
        elif pick < 0.94:
            # Provisional and final scores in any order: a provisional one after the final is ignored.
            final = rng.random() < 0.3
            event = RunScored(
                run_id=run_id,
                final=final,
                agents=[AgentScores(agent_index=0, k=2, passed=n)],
                rules_version=2,
            )
        else:
            event = RunStopRequested(run_id=run_id)
        log.append((stream, event, rng.choice(["u1", "run-scheduler"])))
    return log


def _dump(store: EventStore) -> dict[str, list[str]]:
    with store.read_engine.connect() as conn:
        return {
            table.name: sorted(repr(sorted(dict(r).items())) for r in conn.execute(table.select()).mappings())
            for table in read_model_tables.sorted_tables
        }


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_batched_projection_writes_the_rows_of_one_apply_per_event(store: EventStore, seed: int) -> None:
    rng = random.Random(seed)
    for stream, event, actor in _log(rng):
        store.append(stream, [new_event(event, actor=actor)])
    one_by_one = ProjectionRunner(store, OneByOne())
    one_by_one.rebuild()
    expected = _dump(store)
    assert expected["rm_attempts"] and expected["rm_run_logs"]
    assert any("('scores_final', True)" in row for row in expected["rm_runs"]), (
        "the log must score a run finally"
    )
    for batch_size in (1, 3, 7, 1000):
        batched = ProjectionRunner(store, ReadModels())
        batched.rebuild(batch_size=batch_size)
        assert _dump(store) == expected, f"batch size {batch_size}"


class OpsOneByOne:
    """The ops projection (audit log, owners, budgets, webhooks), one event per call to `apply`."""

    def __init__(self) -> None:
        self.inner = OpsReadModels()
        self.name = self.inner.name
        self.metadata: MetaData = self.inner.metadata

    def apply(self, conn: Connection, event: StoredEvent) -> None:
        self.inner.apply(conn, event)


def _ops_log(rng: random.Random) -> list[tuple[str, Event, str | None]]:
    """(stream, event, workspace in metadata): owning events, run events that name no workspace (their
    stream's owner decides), a run whose submission comes after its first events, budgets, webhooks."""
    log: list[tuple[str, Event, str | None]] = [
        ("workspace-ws", WorkspaceCreated(workspace_id="ws", name="one"), None),
        ("workspace-ws2", WorkspaceCreated(workspace_id="ws2", name="two"), None),
    ]
    submitted: set[str] = set()
    for n in range(120):
        run_id = rng.choice(["r1", "r2", "r3"])
        pick = rng.random()
        if pick < 0.15 and run_id not in submitted:
            submitted.add(run_id)
            payload = _submitted(run_id).model_dump() | {"workspace_id": rng.choice(["ws", "ws2"])}
            log.append((f"run-{run_id}", RunSubmitted.model_validate(payload), None))
        elif pick < 0.6:
            aid = f"{run_id}-a{rng.randrange(4)}"
            started = AttemptStarted(run_id=run_id, attempt_id=aid, try_number=1, executor_id="e")
            log.append((f"run-{run_id}", started, None))
        elif pick < 0.7:
            budget = WorkspaceBudgetSet(workspace_id="ws", budget_usd=rng.choice([None, 5.0, 10.0]))
            log.append(("workspace-ws", budget, "ws"))
        elif pick < 0.8:
            hook = WebhookRegistered(webhook_id=f"h{n}", workspace_id="ws2", url="http://x", kinds=["run"])
            log.append(("workspace-ws2", hook, "ws2"))
        elif pick < 0.85:
            log.append(("workspace-ws2", WebhookRemoved(webhook_id="h1", workspace_id="ws2"), "ws2"))
        else:
            delivery = WebhookDeliveryRecorded(
                webhook_id="h1", workspace_id="ws2", notification_id=f"n{n}", kind="run", attempt=1,
                delivered=rng.random() < 0.5, status_code=200,
            )  # fmt: skip
            log.append(("webhook-h1", delivery, None))
    return log


def _dump_ops(store: EventStore) -> dict[str, list[str]]:
    with store.read_engine.connect() as conn:
        return {
            table.name: sorted(repr(sorted(dict(r).items())) for r in conn.execute(table.select()).mappings())
            for table in ops_tables.sorted_tables
        }


@pytest.mark.parametrize("seed", [1, 2])
def test_batched_ops_projection_writes_the_rows_of_one_apply_per_event(store: EventStore, seed: int) -> None:
    rng = random.Random(seed)
    for stream, event, workspace in _ops_log(rng):
        store.append(stream, [new_event(event, actor="u1", workspace_id=workspace)])
    ProjectionRunner(store, OpsOneByOne()).rebuild()
    expected = _dump_ops(store)
    owned = [row for row in expected["rm_audit"] if "AttemptStarted" in row and "'ws" in row]
    assert owned, "run events that name no workspace must get their stream owner's"
    for batch_size in (1, 5, 1000):
        ProjectionRunner(store, OpsReadModels()).rebuild(batch_size=batch_size)
        assert _dump_ops(store) == expected, f"batch size {batch_size}"
