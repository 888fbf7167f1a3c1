"""The gateway projection's batched path writes exactly the rows of one `apply` per event (invariant 7),
on SQLite and Postgres, whatever the batch boundaries — including odd orders the services avoid."""

from __future__ import annotations

import random
from collections.abc import Iterator

import pytest
from regatta_gateway.readmodels import ReadModels
from regatta_gateway.readmodels.tables import metadata as read_model_tables
from regatta_shared.events import (
    AttemptFinished,
    AttemptRetried,
    AttemptScheduled,
    AttemptStarted,
    Event,
    ExecutorNoted,
    RunQueued,
    RunStopRequested,
    RunSubmitted,
    UserRegistered,
)
from regatta_shared.eventstore import EventStore, new_event
from regatta_shared.eventstore.records import StoredEvent
from regatta_shared.projections import ProjectionRunner
from sqlalchemy import Connection, MetaData


class OneByOne:
    """The projection with its batched path hidden: the runner applies event by event."""

    def __init__(self) -> None:
        self.inner = ReadModels()
        self.name = self.inner.name
        self.metadata: MetaData = self.inner.metadata

    def apply(self, conn: Connection, event: StoredEvent) -> None:
        self.inner.apply(conn, event)


@pytest.fixture
def store(database_url: str) -> Iterator[EventStore]:
    store = EventStore(database_url)
    store.create_schema()
    yield store
    store.dispose()


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


def _finished(run_id: str, aid: str, outcome: str, try_number: int, cost: float | None) -> AttemptFinished:
    return AttemptFinished(
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
    a stop request and a user registered mid-run (its name must show in later log lines)."""
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
            event = _finished(run_id, f"{run_id}-{aid}", outcome, 2, rng.choice([None, 0.25, 0.1]))
        elif pick < 0.9:
            event = ExecutorNoted(run_id=run_id, attempt_id=f"{run_id}-{aid}", note="sandbox created")
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
    for batch_size in (1, 3, 7, 1000):
        batched = ProjectionRunner(store, ReadModels(), batch_size=batch_size)
        batched.rebuild()
        assert _dump(store) == expected, f"batch size {batch_size}"
