"""Every consumer of a run's events reads the same facts from them (issue 20, one fold per fact).

Generated run histories — attempts scheduled, started, retried and finished in any order, finishes
twice or for attempts never scheduled, scores in any order, a stop — go into a real event store; then
the gateway's projection (batched, any batch size), the run snapshot behind downloads, scoring's tally
and the run scheduler's aggregate each fold them, and must agree on the attempt rows, their statuses
and outcomes, the run's status, its expected attempt count and its totals.
"""

from __future__ import annotations

import itertools
from collections import Counter
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from regatta_gateway.queries.run_snapshot import load_snapshot
from regatta_gateway.readmodels import ReadModels
from regatta_gateway.readmodels import tables as t
from regatta_run_scheduler import run as aggregate
from regatta_scoring.scores import tally
from regatta_shared.events import (
    AgentScores,
    AttemptFinished,
    AttemptRetried,
    AttemptScheduled,
    AttemptStarted,
    Event,
    ExecutorNoted,
    RunExecutionCompleted,
    RunFailed,
    RunFinished,
    RunQueued,
    RunScored,
    RunStarted,
    RunStopped,
    RunStopRequested,
    RunSubmitted,
)
from regatta_shared.events.integrity import AttemptIntegrity
from regatta_shared.eventstore import EventStore, new_event
from regatta_shared.eventstore.projections import ProjectionRunner
from regatta_shared.ids import attempt_id, run_stream
from regatta_shared.runs import INTEGRITY_COLUMNS, RunFold, expected_attempts, integrity_columns
from sqlalchemy import select

from tests.support.runs import submission

_runs = itertools.count()

# Costs that add exactly in binary floating point: the run's total and the sum of its agents' totals
# are added in different orders, and must still be equal.
COSTS = st.sampled_from([None, 0.25, 0.5, 2.0])
TRY = st.integers(1, 3)


# What the platform saw before the verifier: nothing (an environment that does not look), not looked,
# and something to review.
EVIDENCE = [
    None,
    AttemptIntegrity(checked=False),
    AttemptIntegrity(unexplained=2, processes_total=1, verifier_files_written=["/tests/t.sh"]),
]


def _finish(
    slot: int, outcome: str, try_number: int, usage: tuple[Any, ...], extra: tuple[Any, ...]
) -> tuple:
    return ("finish", slot, outcome, try_number, usage, extra)


STEPS = st.one_of(
    st.tuples(st.just("schedule"), st.integers(0, 11)),
    st.tuples(st.just("start"), st.integers(0, 11), TRY, st.sampled_from(["e1", "e2"])),
    st.tuples(st.just("retry"), st.integers(0, 11), TRY),
    st.builds(
        _finish,
        st.integers(0, 11),
        st.sampled_from(["passed", "failed", "errored", "cancelled"]),
        TRY,
        st.tuples(
            st.sampled_from([None, 0, 7]), st.sampled_from([None, 3]), st.sampled_from([None, 2]), COSTS
        ),
        st.tuples(
            # Short attempts report no start: the trial's start fills started_at (or not, if unreadable).
            st.sampled_from([None, "2026-11-29T10:00:01.5+00:00", "not a time"]),
            st.sampled_from([(None, None), ("local", False), ("container", True)]),
            st.sampled_from([None, 12.5]),
            st.sampled_from(EVIDENCE),
        ),
    ),
    st.tuples(st.just("note"), st.integers(0, 11)),
    st.tuples(st.just("scored"), st.booleans(), st.integers(0, 5)),
    st.tuples(st.just("run"), st.sampled_from(["queued", "started", "stop", "completed", "ended"])),
)


def _history(submitted: RunSubmitted, steps: list[tuple]) -> list[Event]:
    run_id = submitted.run_id
    plan = aggregate.plan(submitted)
    scheduled: set[str] = set()
    events: list[Event] = [submitted]
    ended = False
    for step in steps:
        kind = step[0]
        if kind in ("schedule", "start", "retry", "finish", "note"):
            agent, task, index = plan[step[1] % len(plan)]
            aid = attempt_id(run_id, agent, task, index)
        if kind == "schedule":
            # Each attempt is scheduled once: its event id is deterministic, and the store keeps one.
            if aid not in scheduled:
                scheduled.add(aid)
                events.append(
                    AttemptScheduled(
                        run_id=run_id, attempt_id=aid, agent_index=agent, task=task, attempt_index=index
                    )
                )
        elif kind == "start":
            events.append(
                AttemptStarted(run_id=run_id, attempt_id=aid, try_number=step[2], executor_id=step[3])
            )
        elif kind == "retry":
            events.append(AttemptRetried(run_id=run_id, attempt_id=aid, try_number=step[2], delay_seconds=1))
        elif kind == "finish":
            _, _, outcome, try_number, (inputs, outputs, cache, cost), extra = step
            start, environment, total, evidence = extra
            events.append(
                AttemptFinished(
                    run_id=run_id,
                    attempt_id=aid,
                    agent_index=agent,
                    task=task,
                    attempt_index=index,
                    try_number=try_number,
                    outcome=outcome,
                    rewards={"reward": float(outcome == "passed")},
                    usage={
                        "input_tokens": inputs,
                        "output_tokens": outputs,
                        "cache_tokens": cache,
                        "cost_usd": cost,
                    },
                    timings={"total": total},
                    started_at=start,
                    environment=environment[0],
                    environment_built=environment[1],
                    integrity=evidence,
                )  # type: ignore[arg-type]
            )
        elif kind == "note":
            events.append(ExecutorNoted(run_id=run_id, attempt_id=aid, note="sandbox created"))
        elif kind == "scored":
            agents = [AgentScores(agent_index=0, k=1, passed=step[2])]
            events.append(RunScored(run_id=run_id, final=step[1], agents=agents, rules_version=2))
        elif step[1] == "queued":
            events.append(RunQueued(run_id=run_id, expected_attempts=expected_attempts(submitted)))
        elif step[1] == "started":
            events.append(RunStarted(run_id=run_id))
        elif step[1] == "stop":
            events.append(RunStopRequested(run_id=run_id, reason="enough"))
        elif step[1] == "completed":
            events.append(RunExecutionCompleted(run_id=run_id))
        elif not ended:
            ended = True
            events.append(
                [
                    RunFinished(run_id=run_id),
                    RunStopped(run_id=run_id, reason="x"),
                    RunFailed(run_id=run_id, reason="y"),
                ][len(events) % 3]
            )
    return events


def _read_model(store: EventStore, run_id: str) -> tuple[dict[str, Any], dict[str, dict[str, Any]]]:
    with store.read_engine.connect() as conn:
        run = dict(conn.execute(select(t.runs).where(t.runs.c.id == run_id)).mappings().one())
        rows = conn.execute(select(t.attempts).where(t.attempts.c.run_id == run_id)).mappings()
        return run, {row["attempt_id"]: dict(row) for row in rows}


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    shape=st.tuples(st.integers(1, 3), st.integers(1, 2), st.integers(1, 2)),
    steps=st.lists(STEPS, max_size=60),
    batch_size=st.sampled_from([1, 4, 1000]),
)
def test_every_consumer_folds_a_run_history_the_same_way(
    store: EventStore, shape: tuple[int, int, int], steps: list[tuple], batch_size: int
) -> None:
    tasks, agents, attempts = shape
    run_id = f"fold{next(_runs)}"
    submitted = submission(run_id, tasks=tasks, agents=agents, attempts=attempts)
    stored = store.append(
        run_stream(run_id), [new_event(e, actor="run-scheduler") for e in _history(submitted, steps)]
    )
    projection = ProjectionRunner(store, ReadModels(), batch_size=batch_size)
    projection.create_tables()
    projection.catch_up()

    run, rows = _read_model(store, run_id)
    snapshot = load_snapshot(store, run_id, stored[-1].version)
    scheduler = aggregate.fold(run_id, stored)
    scores = tally(store.read_stream(run_stream(run_id)))
    reference = RunFold(run_id)
    for event in stored:
        reference.apply(event.type, event.data)
    assert scores is not None

    # Attempt rows: the read model's and the snapshot's are the same rows, column for column; the
    # evidence columns are those of the finish that counted.
    assert rows == snapshot.attempts
    for row in rows.values():
        assert {c: row[c] for c in INTEGRITY_COLUMNS} == integrity_columns(row["result"] or {})
    finished = {aid: row["outcome"] for aid, row in rows.items() if row["outcome"] is not None}
    assert all(row["status"] == "finished" for aid, row in rows.items() if aid in finished)
    assert {row["status"] for aid, row in rows.items() if aid not in finished} <= {
        "scheduled",
        "running",
        "retrying",
    }

    # The scheduler knows the same attempts, finished with the same outcomes, the others in flight;
    # an unfinished attempt is started for it exactly when the read model has its start time.
    assert set(scheduler.attempts) == set(rows)
    assert {a.attempt_id: a.outcome for a in scheduler.attempts.values() if a.outcome} == finished
    assert {a.attempt_id for a in scheduler.in_flight} == set(rows) - set(finished)
    assert {a.attempt_id for a in scheduler.in_flight if a.started} == {
        aid for aid, row in rows.items() if aid not in finished and row["started_at"] is not None
    }

    # Scoring counts exactly the finishes the read model counts, per agent, outcome and task.
    outcomes = Counter((rows[aid]["agent_index"], outcome) for aid, outcome in finished.items())
    assert {
        (index, outcome): n
        for index, agent in scores.agents.items()
        for outcome, n in agent.outcomes.items()
        if n
    } == dict(outcomes)
    scored: dict[tuple[int, str], list[int]] = {}
    for aid, outcome in finished.items():
        if outcome in ("passed", "failed"):
            n_c = scored.setdefault((rows[aid]["agent_index"], rows[aid]["task"]), [0, 0])
            n_c[0] += 1
            n_c[1] += outcome == "passed"
    assert {
        (index, task): n_c for index, agent in scores.agents.items() for task, n_c in agent.counts.items()
    } == scored

    # Totals: the read model's run row, scoring's agents summed, the scheduler's cost and the pure fold.
    assert run["ingested"] == len(finished) == sum(sum(a.outcomes.values()) for a in scores.agents.values())
    assert run["input_tokens"] == sum(a.input_tokens for a in scores.agents.values())
    assert run["output_tokens"] == sum(a.output_tokens for a in scores.agents.values())
    costs = [a.cost_usd for a in scores.agents.values() if a.cost_usd is not None]
    assert run["cost_usd"] == (sum(costs) if costs else None)
    assert scheduler.cost_usd == (run["cost_usd"] or 0.0)
    assert {k: run[k] for k in ("ingested", "input_tokens", "output_tokens", "cost_usd", "environments")} == {
        k: reference.totals[k]
        for k in ("ingested", "input_tokens", "output_tokens", "cost_usd", "environments")
    }

    # The run: status, stop request, scores and the expected count, which is the scheduler's plan.
    assert run["status"] == snapshot.status == scheduler.status == reference.status
    assert run["stop_requested"] == scheduler.stop_requested == reference.stop_requested
    assert (run["scores"] or [], run["scores_final"]) == (snapshot.scores, snapshot.scores_final)
    assert (
        run["expected"] == reference.expected == len(aggregate.plan(submitted)) == tasks * agents * attempts
    )
    decided = aggregate.decide_on_submitted(aggregate.fold(run_id, stored[:1]))
    assert decided[0].data["expected_attempts"] == run["expected"]
    assert run["submission"] == snapshot.submission
