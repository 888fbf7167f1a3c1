"""The run-scheduler's service layer over a real store: redelivered reports lose nothing (invariant 3)."""

from __future__ import annotations

from regatta_run_scheduler import run as aggregate
from regatta_run_scheduler.scheduler import RunScheduler
from regatta_shared.events import ErroredAttemptsRerunRequested, RunFinished, RunStopRequested
from regatta_shared.eventstore import EventStore, new_event
from regatta_shared.ids import run_stream
from regatta_shared.messaging.jobs import AttemptReport

from tests.support.runs import submission


def submit(store: EventStore, tasks: int) -> None:
    submitted = submission(tasks=tasks, agents=1, attempts=1, concurrency=tasks)
    store.append(run_stream("r"), [new_event(submitted)], expected_version=0)


def report(kind: str, attempt_id: str, **fields: object) -> AttemptReport:
    return AttemptReport(
        kind=kind, run_id="r", attempt_id=attempt_id, try_number=1, executor_id="x", **fields
    )  # type: ignore[arg-type]


def test_a_redelivered_report_batched_with_new_ones_loses_none_of_them(store: EventStore) -> None:
    """A nats-server killed before it stored an ack redelivers a report already recorded, in the same
    batch as new ones. Each new report must be recorded (the batch is acked after this returns)."""
    submit(store, tasks=2)
    scheduler = RunScheduler(store)
    scheduler.decide("r", aggregate.decide_on_submitted)
    first, second = [a.attempt_id for a in scheduler.load("r").in_flight]
    note = report("note", first, note="sandbox ready")
    scheduler.on_reports([report("started", first), report("started", second), note])
    redelivered = [report("started", first), note]
    scheduler.on_reports(
        [
            *redelivered,
            report("finished", first, outcome="passed"),
            report("finished", second, outcome="failed"),
        ]
    )
    kinds = [e.type for e in store.read_stream(run_stream("r"))]
    assert kinds.count("AttemptFinished") == 2
    assert kinds.count("AttemptStarted") == 2 and kinds.count("ExecutorNoted") == 1
    assert kinds[-1] == "RunExecutionCompleted"
    assert scheduler.load("r").execution_completed


def test_a_stop_waits_for_the_attempts_executors_claimed(store: EventStore) -> None:
    """Claims live in the scheduler's memory, not in events: they must reach every decision, and go
    once the attempts they name have finished."""
    submit(store, tasks=3)
    scheduler = RunScheduler(store)
    scheduler.decide("r", aggregate.decide_on_submitted)
    claimed, started, waiting = [a.attempt_id for a in scheduler.load("r").in_flight]
    scheduler.claim("r", claimed)
    scheduler.on_reports([report("started", started)])
    store.append(run_stream("r"), [new_event(RunStopRequested(run_id="r"))])
    scheduler.decide("r", aggregate.decide_on_stop_requested)
    assert [a.attempt_id for a in scheduler.load("r").in_flight] == [claimed, started]
    scheduler.on_reports([report("finished", claimed, outcome="cancelled")])
    # A claim that arrives after its attempt's outcome (a slow core message) holds nothing up.
    scheduler.claim("r", claimed)
    scheduler.on_reports([report("finished", started, outcome="cancelled")])
    events = store.read_stream(run_stream("r"))
    assert events[-1].type == "RunStopped"
    cancelled = {
        e.data["attempt_id"]: e.data["exception_message"] for e in events if e.type == "AttemptFinished"
    }
    assert cancelled[waiting] == "run stopped before the attempt started"
    assert set(cancelled) == {claimed, started, waiting}


def test_a_rerun_schedules_exactly_the_errored_attempts_again_and_ignores_their_old_round(
    store: EventStore,
) -> None:
    """ErroredAttemptsRerunRequested (the gateway's command) puts the errored slots back: each is scheduled
    once more under ids of its own, its job says which re-run it is, a late report of the errored round
    changes nothing, and the run's execution completes a second time."""
    submit(store, tasks=3)
    scheduler = RunScheduler(store)
    scheduler.decide("r", aggregate.decide_on_submitted)
    passed, errored, unlisted = [a.attempt_id for a in scheduler.load("r").in_flight]
    scheduler.on_reports(
        [
            report("finished", passed, outcome="passed"),
            report("finished", errored, outcome="errored", exception_type="SandboxBuildFailedError"),
            report("finished", unlisted, outcome="errored", exception_type="SandboxBuildFailedError"),
        ]
    )
    store.append(run_stream("r"), [new_event(RunFinished(run_id="r"))])
    scheduler.take_scheduled()
    # The passed one is listed too: only errored attempts are ever run again, whatever the event says.
    rerun = ErroredAttemptsRerunRequested(run_id="r", attempt_ids=[passed, errored], rerun=1)
    (stored,) = store.append(run_stream("r"), [new_event(rerun)])
    scheduler.on_event(stored)
    scheduler.on_event(stored)  # redelivered: decides nothing more

    scheduled = scheduler.take_scheduled()
    assert [(e.data["attempt_id"], e.data["rerun"]) for e in scheduled] == [(errored, 1)]
    (job,) = scheduler.jobs_for(scheduled)
    assert job is not None and job.rerun == 1 and job.attempt_id == errored
    state = scheduler.load("r")
    assert state.status == "running" and not state.execution_completed
    assert [a.attempt_id for a in state.in_flight] == [errored]

    late = report("finished", errored, outcome="errored", exception_type="SandboxBuildFailedError")
    scheduler.on_reports([late])
    assert [a.attempt_id for a in scheduler.load("r").in_flight] == [errored], "the old round is over"
    scheduler.on_reports([report("finished", errored, outcome="passed", rerun=1)])

    events = store.read_stream(run_stream("r"))
    outcomes = [(e.data["attempt_id"], e.data["outcome"]) for e in events if e.type == "AttemptFinished"]
    assert outcomes == [(passed, "passed"), (errored, "errored"), (unlisted, "errored"), (errored, "passed")]
    assert [e.type for e in events].count("RunExecutionCompleted") == 2
    assert events[-1].type == "RunExecutionCompleted"
