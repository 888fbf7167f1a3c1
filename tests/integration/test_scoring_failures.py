"""Issue 19, item 2: scoring that raises (a deterministic error: retrying cannot cure it) ends the run
`failed` with the reason instead of redelivering forever; the attempts it recorded stay. Real store
(SQLite and Postgres), the real Scorer; the poison is an event written straight into the store."""

from __future__ import annotations

from regatta_scoring.scorer import Scorer
from regatta_shared.events import AttemptFinished, AttemptScheduled, RunExecutionCompleted, RunFailed
from regatta_shared.eventstore import EventStore, new_event
from regatta_shared.ids import attempt_id, run_stream

from tests.support.runs import submission


def _finished(run_id: str, agent_index: int, task: str, outcome: str = "passed") -> AttemptFinished:
    return AttemptFinished(
        run_id=run_id,
        attempt_id=attempt_id(run_id, agent_index, task, 0),
        agent_index=agent_index,
        task=task,
        attempt_index=0,
        try_number=1,
        outcome=outcome,  # type: ignore[arg-type]
        rewards={"reward": 1.0},
        primary_reward=1.0,
    )


def _scheduled(run_id: str, agent_index: int, task: str) -> AttemptScheduled:
    return AttemptScheduled(
        run_id=run_id,
        attempt_id=attempt_id(run_id, agent_index, task, 0),
        agent_index=agent_index,
        task=task,
        attempt_index=0,
    )


def test_a_run_whose_scoring_raises_ends_failed_with_the_reason_and_keeps_its_attempts(
    store: EventStore,
) -> None:
    run_id = "run_poisoned"
    stream = run_stream(run_id)
    store.append(stream, [new_event(submission(run_id, tasks=2, agents=1, attempts=1))])
    # An attempt of an agent the run does not have: no scheduler decides one, a damaged store can hold it.
    store.append(stream, [new_event(_scheduled(run_id, 0, "t0")), new_event(_scheduled(run_id, 7, "t1"))])
    store.append(stream, [new_event(_finished(run_id, 0, "t0")), new_event(_finished(run_id, 7, "t1"))])
    scorer = Scorer(store)
    scorer.on_events(store.read_stream(stream))  # provisional scoring fails quietly, never a redelivery

    store.append(stream, [new_event(RunExecutionCompleted(run_id=run_id))])
    scorer.on_events(store.read_stream(stream)[-1:])
    history = store.read_stream(stream)
    types = [e.type for e in history]
    assert "RunFinished" not in types
    (failed,) = [e for e in history if e.type == "RunFailed"]
    assert failed.data["reason"] == "scoring failed: KeyError: 7"
    assert failed.actor == "scoring"
    assert types.count("AttemptFinished") == 2, "the attempts it recorded are kept"

    # The same events again (a redelivery, the RunFailed consumed back): nothing new, nothing raised.
    scorer.on_events(history)
    assert [e.type for e in store.read_stream(stream)] == types


def test_a_run_failed_by_the_scheduler_gets_final_scores_of_what_it_measured(store: EventStore) -> None:
    run_id = "run_all_errored"
    stream = run_stream(run_id)
    store.append(stream, [new_event(submission(run_id, tasks=2, agents=1, attempts=1))])
    store.append(
        stream,
        [new_event(_scheduled(run_id, 0, task)) for task in ("t0", "t1")]
        + [new_event(_finished(run_id, 0, task, "errored")) for task in ("t0", "t1")]
        + [new_event(RunFailed(run_id=run_id, reason="every attempt errored (2 of 2)"))],
    )
    Scorer(store).on_events(store.read_stream(stream)[-1:])
    final = [e for e in store.read_stream(stream) if e.type == "RunScored" and e.data["final"]]
    assert len(final) == 1
    (agent,) = final[0].data["agents"]
    assert (agent["errored"], agent["passed"], agent["pass_at_1"]) == (2, 0, None)
