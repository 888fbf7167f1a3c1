"""The run aggregate decides alone, from events: concurrency, idempotency, stop and the cost cap."""

from __future__ import annotations

from datetime import UTC, datetime
from itertools import count

from regatta_run_scheduler import run as aggregate
from regatta_shared.events import (
    RunStopRequested,
    Usage,
)
from regatta_shared.eventstore import NewEvent, StoredEvent, new_event
from regatta_shared.messaging.jobs import AttemptReport

from tests.support.runs import submission

positions = count(1)


def stored(events: list[NewEvent], version_from: int) -> list[StoredEvent]:
    return [
        StoredEvent(
            position=next(positions),
            event_id=e.event_id,
            stream_id="run-r",
            version=version_from + i,
            type=e.type,
            data=e.data,
            metadata=e.metadata,
            recorded_at=datetime(2026, 1, 1, tzinfo=UTC),
        )
        for i, e in enumerate(events, start=1)
    ]


class Run:
    """A run's stream in memory, driven the way the scheduler's service layer drives it."""

    def __init__(
        self,
        tasks: int = 3,
        agents: int = 2,
        attempts: int = 2,
        concurrency: int = 4,
        cost_cap: float | None = None,
    ) -> None:
        submitted = submission(
            tasks=tasks, agents=agents, attempts=attempts, concurrency=concurrency, cost_cap=cost_cap
        )
        self.events = stored([new_event(submitted)], 0)
        # What executors claimed, as the service layer hands it to every decision.
        self.claimed: frozenset[str] = frozenset()

    def state(self) -> aggregate.RunState:
        state = aggregate.fold("r", self.events)
        state.claimed = self.claimed
        return state

    def decide(self, decision) -> list[NewEvent]:
        decided = decision(self.state())
        self.events += stored(decided, len(self.events))
        while more := aggregate.decide_dispatch(self.state()):
            decided += more
            self.events += stored(more, len(self.events))
        return decided

    def report(self, kind: str, attempt_id: str, **fields: object) -> list[NewEvent]:
        report = AttemptReport(
            kind=kind, run_id="r", attempt_id=attempt_id, try_number=1, executor_id="x", **fields
        )  # type: ignore[arg-type]
        return self.decide(lambda s: aggregate.decide_on_reports(s, [report]))


def types(events: list[NewEvent]) -> list[str]:
    return [e.type for e in events]


def test_submission_queues_and_dispatches_up_to_the_concurrency() -> None:
    run = Run(concurrency=4)
    decided = run.decide(aggregate.decide_on_submitted)
    assert types(decided) == ["RunQueued"] + ["AttemptScheduled"] * 4
    state = run.state()
    assert state.status == "queued" and len(state.in_flight) == 4
    assert aggregate.decide_dispatch(state) == [], "no more while all slots are busy"


def test_each_finished_attempt_frees_one_slot_and_the_run_completes_once() -> None:
    run = Run(tasks=2, agents=1, attempts=2, concurrency=1)
    run.decide(aggregate.decide_on_submitted)
    for _ in range(4):
        attempt = run.state().in_flight[0]
        assert types(run.report("started", attempt.attempt_id))[-1] == "AttemptStarted"
        decided = run.report("finished", attempt.attempt_id, outcome="passed", rewards={"reward": 1.0})
        assert "AttemptFinished" in types(decided)
    state = run.state()
    assert state.execution_completed and len(state.attempts) == 4
    assert aggregate.decide_dispatch(state) == []


def test_a_duplicate_or_late_report_changes_nothing() -> None:
    run = Run(tasks=1, agents=1, attempts=1)
    run.decide(aggregate.decide_on_submitted)
    attempt = run.state().in_flight[0].attempt_id
    run.report("started", attempt)
    first = run.report("finished", attempt, outcome="failed", rewards={"reward": 0.0})
    assert types(first) == ["AttemptFinished", "RunExecutionCompleted"]
    assert run.report("finished", attempt, outcome="passed", rewards={"reward": 1.0}) == []
    assert run.report("started", attempt) == []
    same = aggregate.decide_on_reports(
        run.state(),
        [
            AttemptReport(
                kind="finished",
                run_id="r",
                attempt_id=attempt,
                try_number=1,
                executor_id="y",
                outcome="passed",
            )
        ],
    )
    assert same == []


def test_a_batch_of_reports_decides_each_event_once() -> None:
    run = Run(tasks=1, agents=1, attempts=2, concurrency=2)
    run.decide(aggregate.decide_on_submitted)
    ids = [a.attempt_id for a in run.state().in_flight]
    batch = [
        AttemptReport(kind="started", run_id="r", attempt_id=i, try_number=1, executor_id="x") for i in ids
    ]
    state = run.state()
    before = repr(state)
    decided = aggregate.decide_on_reports(state, batch + batch)
    assert types(decided) == ["RunStarted", "AttemptStarted", "AttemptStarted"]
    assert len({e.event_id for e in decided}) == len(decided)
    assert repr(state) == before, "deciding must not change the state it was given"


def test_a_redelivered_started_report_in_a_batch_decides_only_the_new_events() -> None:
    run = Run(tasks=1, agents=1, attempts=2, concurrency=2)
    run.decide(aggregate.decide_on_submitted)
    first, second = [a.attempt_id for a in run.state().in_flight]
    run.report("started", first)
    run.report("started", second)

    def report(kind: str, attempt_id: str, executor_id: str = "x", **fields: object) -> AttemptReport:
        return AttemptReport(
            kind=kind, run_id="r", attempt_id=attempt_id, try_number=1, executor_id=executor_id, **fields
        )  # type: ignore[arg-type]

    batch = [report("started", first), report("finished", first, outcome="passed")]
    batch += [report("finished", second, outcome="failed")]
    decided = aggregate.decide_on_reports(run.state(), batch)
    assert types(decided) == ["AttemptFinished", "AttemptFinished"]
    elsewhere = aggregate.decide_on_reports(run.state(), [report("started", first, executor_id="y")])
    assert types(elsewhere) == ["AttemptStarted"], "a start on another executor (a redelivered job) is news"


def test_stop_cancels_unstarted_attempts_and_waits_for_running_ones() -> None:
    run = Run(tasks=3, agents=1, attempts=1, concurrency=3)
    run.decide(aggregate.decide_on_submitted)
    running, *_waiting = [a.attempt_id for a in run.state().in_flight]
    run.report("started", running)
    run.events += stored([new_event(RunStopRequested(run_id="r"))], len(run.events))
    decided = run.decide(aggregate.decide_on_stop_requested)
    assert types(decided) == ["AttemptFinished", "AttemptFinished"]
    assert all(e.data["outcome"] == "cancelled" for e in decided)
    assert run.state().status == "running"
    decided = run.report("finished", running, outcome="cancelled", exception_type="CancelledError")
    assert types(decided) == ["AttemptFinished", "RunStopped"]
    assert run.state().status == "stopped"


def test_stop_waits_for_claimed_attempts_as_for_started_ones() -> None:
    """An attempt younger than the started-report delay is known only by its executor's claim: a stop
    must still wait for its executor to report it cancelled, i.e. for its sandbox to be gone."""
    run = Run(tasks=3, agents=1, attempts=1, concurrency=3)
    run.decide(aggregate.decide_on_submitted)
    claimed, started, waiting = [a.attempt_id for a in run.state().in_flight]
    run.claimed = frozenset({claimed})
    run.report("started", started)
    run.events += stored([new_event(RunStopRequested(run_id="r"))], len(run.events))
    decided = run.decide(aggregate.decide_on_stop_requested)
    assert [(e.type, e.data["attempt_id"], e.data["outcome"]) for e in decided] == [
        ("AttemptFinished", waiting, "cancelled")
    ]
    assert run.report("finished", started, outcome="cancelled", exception_type="CancelledError")
    assert run.state().status == "running", "the claimed attempt still has its sandbox"
    decided = run.report("finished", claimed, outcome="cancelled", exception_type="CancelledError")
    assert types(decided) == ["AttemptFinished", "RunStopped"]


def test_a_run_past_its_cost_cap_stops_itself_saying_why() -> None:
    run = Run(tasks=4, agents=1, attempts=1, concurrency=1, cost_cap=0.05)
    run.decide(aggregate.decide_on_submitted)
    attempt = run.state().in_flight[0].attempt_id
    run.report("started", attempt)
    decided = run.report("finished", attempt, outcome="passed", usage=Usage(cost_usd=0.06))
    stop = next(e for e in decided if e.type == "RunStopRequested")
    assert "cost cap reached" in stop.data["reason"] and "0.06" in stop.data["reason"]
    assert run.state().stop_requested


def test_a_run_whose_every_attempt_errored_fails_saying_why() -> None:
    run = Run(tasks=2, agents=1, attempts=1, concurrency=2)
    run.decide(aggregate.decide_on_submitted)
    first, second = [a.attempt_id for a in run.state().in_flight]
    errored = {"outcome": "errored", "exception_type": "TaskEnvironmentError", "exception_message": "compose"}
    assert types(run.report("finished", first, **errored)) == ["RunStarted", "AttemptFinished"]
    decided = run.report("finished", second, **errored)
    assert types(decided) == ["AttemptFinished", "RunFailed"], "never RunExecutionCompleted"
    assert decided[-1].data["reason"] == (
        "every attempt errored (2 of 2); error: TaskEnvironmentError: compose"
    )
    assert run.state().status == "failed"
    assert aggregate.decide_dispatch(run.state()) == []


def test_a_run_with_one_measured_attempt_among_errors_completes() -> None:
    run = Run(tasks=2, agents=1, attempts=1, concurrency=2)
    run.decide(aggregate.decide_on_submitted)
    first, second = [a.attempt_id for a in run.state().in_flight]
    run.report("finished", first, outcome="errored", exception_type="RuntimeError")
    decided = run.report("finished", second, outcome="failed", rewards={"reward": 0.0})
    assert types(decided) == ["AttemptFinished", "RunExecutionCompleted"]


def test_the_most_frequent_error_names_a_failed_runs_reason() -> None:
    run = Run(tasks=3, agents=1, attempts=1, concurrency=3)
    run.decide(aggregate.decide_on_submitted)
    ids = [a.attempt_id for a in run.state().in_flight]
    run.report("finished", ids[0], outcome="errored", exception_type="A", exception_message="a")
    run.report("finished", ids[1], outcome="errored", exception_type="B", exception_message="b")
    decided = run.report("finished", ids[2], outcome="errored", exception_type="B", exception_message="b")
    assert decided[-1].data["reason"] == "every attempt errored (3 of 3); 2 with B: b"


def test_an_incurable_error_fails_the_run_after_its_running_attempts_and_keeps_its_results() -> None:
    run = Run(tasks=4, agents=1, attempts=1, concurrency=3)
    run.decide(aggregate.decide_on_submitted)
    done, running, broken = [a.attempt_id for a in run.state().in_flight]
    run.report("finished", done, outcome="passed", rewards={"reward": 1.0})
    run.report("started", running)
    reason = "the benchmark's version can no longer be fetched: the archive of task 't' is missing"
    decided = run.report(
        "finished", broken, outcome="errored", exception_type="TaskArchiveMissing", run_failure=reason
    )
    # The failure stops the rest: the attempt not yet started is cancelled, the running one waited for.
    assert types(decided) == ["AttemptFinished", "RunStopRequested", "AttemptFinished"]
    assert decided[1].data == {"run_id": "r", "reason": reason, "ends_as": "failed"}
    assert decided[2].data["outcome"] == "cancelled"
    assert run.state().status == "running"
    decided = run.report("finished", running, outcome="cancelled", exception_type="CancelledError")
    assert types(decided) == ["AttemptFinished", "RunFailed"]
    assert decided[-1].data["reason"] == reason
    state = run.state()
    assert state.status == "failed" and state.attempts[done].outcome == "passed"
    # A second incurable report, or a user's stop, changes nothing once the run is failing or failed.
    assert aggregate.decide_on_stop_requested(state) == []


def test_a_users_stop_before_an_incurable_error_still_ends_stopped() -> None:
    run = Run(tasks=3, agents=1, attempts=1, concurrency=2)
    run.decide(aggregate.decide_on_submitted)
    first, second = [a.attempt_id for a in run.state().in_flight]
    run.report("started", first)
    run.report("started", second)
    run.events += stored([new_event(RunStopRequested(run_id="r"))], len(run.events))
    run.decide(aggregate.decide_on_stop_requested)
    run.report("finished", first, outcome="errored", exception_type="SealError", run_failure="secrets")
    decided = run.report("finished", second, outcome="cancelled", exception_type="CancelledError")
    assert types(decided) == ["AttemptFinished", "RunStopped"]


def _report(
    kind: str, attempt_id: str, *, executor_id: str, delivery: int, **fields: object
) -> AttemptReport:
    fields.setdefault("try_number", 1)
    return AttemptReport(
        kind=kind, run_id="r", attempt_id=attempt_id, executor_id=executor_id, delivery=delivery, **fields
    )  # type: ignore[arg-type]


def test_an_attempt_delivered_twice_records_one_outcome_and_ignores_the_superseded_delivery() -> None:
    """Its first executor stopped (or was presumed dead) mid-attempt and the job went to another: the
    second delivery's start is recorded, the first delivery's late progress changes nothing, and of
    the two outcomes only the first recorded counts."""
    run = Run(tasks=1, agents=1, attempts=1)
    run.decide(aggregate.decide_on_submitted)
    aid = run.state().in_flight[0].attempt_id

    def decide(*reports: AttemptReport) -> list[NewEvent]:
        return run.decide(lambda s: aggregate.decide_on_reports(s, list(reports)))

    assert types(decide(_report("started", aid, executor_id="a", delivery=1))) == [
        "RunStarted",
        "AttemptStarted",
    ]
    again = decide(_report("started", aid, executor_id="b", delivery=2))
    assert types(again) == ["AttemptStarted"] and again[0].data["delivery"] == 2
    assert decide(_report("started", aid, executor_id="b", delivery=2)) == [], "a redelivered report"
    late = [
        _report("started", aid, executor_id="a", delivery=1, try_number=2),
        _report("retrying", aid, executor_id="a", delivery=1, delay_seconds=1.0, infrastructure=True),
        _report("note", aid, executor_id="a", delivery=1, note="sandbox cleaned"),
    ]
    assert decide(*late) == [], "the superseded delivery's progress is ignored"
    state = run.state()
    assert state.attempts[aid].delivery == 2 and state.attempts[aid].outcome is None
    outcome = decide(
        _report("finished", aid, executor_id="b", delivery=2, outcome="passed", rewards={"reward": 1.0})
    )
    assert types(outcome) == ["AttemptFinished", "RunExecutionCompleted"]
    assert outcome[0].data["executor_id"] == "b"
    assert decide(_report("finished", aid, executor_id="a", delivery=1, outcome="failed")) == []
    finished = [e for e in run.events if e.type == "AttemptFinished"]
    assert len(finished) == 1 and finished[0].data["outcome"] == "passed"


def test_a_later_delivery_s_retries_are_recorded_apart_from_the_first_s() -> None:
    """Tries restart at 1 on a new delivery: its retry events must not share ids with the first's."""
    run = Run(tasks=1, agents=1, attempts=1)
    run.decide(aggregate.decide_on_submitted)
    aid = run.state().in_flight[0].attempt_id
    retry = {"delay_seconds": 1.0, "exception_type": "DockerError", "infrastructure": True}
    first = run.decide(
        lambda s: aggregate.decide_on_reports(
            s, [_report("retrying", aid, executor_id="a", delivery=1, **retry)]
        )
    )
    second = run.decide(
        lambda s: aggregate.decide_on_reports(
            s, [_report("retrying", aid, executor_id="b", delivery=2, **retry)]
        )
    )
    assert types(first) == types(second) == ["AttemptRetried"]
    assert first[0].event_id != second[0].event_id
    assert second[0].data["infrastructure"] is True and second[0].data["delivery"] == 2
    assert second[0].data["try_number"] == 2
