"""The run aggregate's decisions: given a run's state (run_state.py, its fold), the events that follow.

Pure functions; no I/O. Every decided event carries a deterministic id, so deciding twice (two
scheduler instances, a redelivered report) appends once: the store ignores a known event id.
"""

from __future__ import annotations

from dataclasses import replace

from regatta_shared.events import (
    AttemptFinished,
    AttemptRetried,
    AttemptScheduled,
    AttemptStarted,
    Event,
    ExecutorNoted,
    RunExecutionCompleted,
    RunFailed,
    RunQueued,
    RunStarted,
    RunStopped,
    RunStopRequested,
    RunSubmitted,
    parse_event,
)
from regatta_shared.events.envelope import NewEvent, deterministic_id, new_event
from regatta_shared.ids import attempt_id
from regatta_shared.messaging.jobs import AttemptReport
from regatta_shared.runs import expected_attempts
from regatta_shared.runs.status import FAILED, PENDING, QUEUED

from .run_state import AttemptState as AttemptState
from .run_state import RunState as RunState
from .run_state import apply as apply
from .run_state import fold as fold
from .run_state import plan as plan


def _ev(payload: Event, *id_parts: str) -> NewEvent:
    return new_event(payload, event_id=deterministic_id(*id_parts), actor="run-scheduler")


def decide_on_submitted(state: RunState) -> list[NewEvent]:
    if state.submitted is None or state.status != PENDING or state.stop_requested:
        return []
    expected = expected_attempts(state.submitted)
    return [_ev(RunQueued(run_id=state.run_id, expected_attempts=expected), state.run_id, "queued")]


def decide_dispatch(state: RunState) -> list[NewEvent]:
    """Schedule attempts until the run's concurrency is used; close the run when all are done."""
    submitted = state.submitted
    if submitted is None or state.terminal or state.status == PENDING:
        return []
    if state.stop_requested:
        return _decide_stop(state)
    decided: list[NewEvent] = []
    planned = _planned(state, submitted)
    free = submitted.execution.max_concurrent_attempts - len(state.in_flight)
    if free > 0:
        while state.plan_cursor < len(planned) and planned[state.plan_cursor][0] in state.attempts:
            state.plan_cursor += 1
        for aid, agent_index, task, index in planned[state.plan_cursor :]:
            if free <= 0:
                break
            if aid in state.attempts:
                continue
            scheduled = AttemptScheduled(
                run_id=state.run_id,
                attempt_id=aid,
                agent_index=agent_index,
                task=task,
                attempt_index=index,
                rerun=state.rerun,
            )
            decided.append(_ev(scheduled, aid, "scheduled", *_round(state.rerun)))
            free -= 1
    all_done = len(state.attempts) + len(decided) == len(planned) and not state.in_flight
    if all_done and not decided and not state.execution_completed:
        if reason := _all_errored(state):
            decided.append(_ev(RunFailed(run_id=state.run_id, reason=reason), state.run_id, "failed"))
        else:
            completed = RunExecutionCompleted(run_id=state.run_id)
            decided.append(_ev(completed, state.run_id, "execution-completed", *_round(state.rerun)))
    return decided


MAX_REASON = 1000


def _round(rerun: int) -> tuple[str, ...]:
    """Id parts of the events of a re-run: an attempt run again must not reuse the ids of its errored
    round (the store ignores a known event id). Empty for a run's own round, so its ids stay as they were."""
    return (f"rerun-{rerun}",) if rerun else ()


def _all_errored(state: RunState) -> str | None:
    """Why a run whose every attempt errored has no meaningful result (None if one did not error):
    nothing was measured, so it ends `failed`, never `finished` with empty scores."""
    attempts = list(state.attempts.values())
    if not attempts or any(a.outcome != "errored" for a in attempts):
        return None
    errors: dict[str, int] = {}
    for attempt in attempts:
        error = attempt.error or "no error reported"
        errors[error] = errors.get(error, 0) + 1
    common, times = max(errors.items(), key=lambda item: item[1])
    reason = f"every attempt errored ({len(attempts)} of {len(attempts)}); "
    reason += f"{times} with {common}" if len(errors) > 1 else f"error: {common}"
    return reason[:MAX_REASON]


def _planned(state: RunState, submitted: RunSubmitted) -> list[tuple[str, int, str, int]]:
    if state.planned is None:
        state.planned = [
            (attempt_id(state.run_id, agent_index, task, index), agent_index, task, index)
            for agent_index, task, index in plan(submitted)
        ]
    return state.planned


def _decide_stop(state: RunState) -> list[NewEvent]:
    """Attempts no executor has started or claimed are cancelled here; the others wait for their
    executor's report, so a run is stopped only once their sandboxes are gone."""
    if state.terminal:
        return []
    reason = state.stop_reason or "stopped by user"
    decided = [
        _ev(_cancelled(state.run_id, attempt), attempt.attempt_id, "finished", *_round(attempt.rerun))
        for attempt in state.in_flight
        if not attempt.started and attempt.attempt_id not in state.claimed
    ]
    if len(decided) == len(state.in_flight):
        if state.stop_ends_as == FAILED:
            decided.append(_ev(RunFailed(run_id=state.run_id, reason=reason), state.run_id, "failed"))
        else:
            decided.append(_ev(RunStopped(run_id=state.run_id, reason=reason), state.run_id, "stopped"))
    return decided


def _cancelled(run_id: str, attempt: AttemptState) -> AttemptFinished:
    return AttemptFinished(
        run_id=run_id,
        attempt_id=attempt.attempt_id,
        agent_index=attempt.agent_index,
        task=attempt.task,
        attempt_index=attempt.attempt_index,
        try_number=attempt.try_number,
        outcome="cancelled",
        exception_type="CancelledError",
        exception_message="run stopped before the attempt started",
    )


def decide_on_report(state: RunState, report: AttemptReport) -> list[NewEvent]:
    attempt = state.attempts.get(report.attempt_id)
    if attempt is None or attempt.outcome is not None:
        # Unknown or already finished: a redelivered or duplicate report changes nothing.
        return []
    if report.rerun != attempt.rerun:
        # A report of the attempt's earlier (errored) round, redelivered late: that round is over.
        return []
    if report.kind != "finished" and report.delivery < attempt.delivery:
        # Progress of a delivery a later one superseded (its executor stopped, or was presumed dead):
        # the attempt runs elsewhere now. Its outcome, if it still sends one first, is kept below.
        return []
    aid = report.attempt_id
    # A later delivery restarts its tries from 1: its events need ids of their own.
    again = (() if report.delivery == 1 else (f"delivery-{report.delivery}",)) + _round(attempt.rerun)
    decided: list[NewEvent] = []
    if report.kind == "started":
        if (report.try_number, report.executor_id) in attempt.starts and report.delivery == attempt.delivery:
            return []
        if state.status == QUEUED:
            decided.append(_ev(RunStarted(run_id=state.run_id), state.run_id, "started"))
        started = AttemptStarted(
            run_id=state.run_id,
            attempt_id=aid,
            try_number=report.try_number,
            executor_id=report.executor_id,
            delivery=report.delivery,
        )
        decided.append(_ev(started, aid, "started", str(report.try_number), report.executor_id, *again))
    elif report.kind == "retrying":
        retried = AttemptRetried(
            run_id=state.run_id,
            attempt_id=aid,
            try_number=report.try_number + 1,
            exception_type=report.exception_type,
            exception_message=report.exception_message,
            delay_seconds=report.delay_seconds or 0.0,
            infrastructure=bool(report.infrastructure),
            delivery=report.delivery,
        )
        decided.append(_ev(retried, aid, "retried", str(report.try_number + 1), *again))
    elif report.kind == "note":
        note = ExecutorNoted(run_id=state.run_id, attempt_id=aid, note=report.note or "", level=report.level)
        note_id = (aid, "note", str(report.try_number), report.executor_id, report.note or "")
        decided.append(_ev(note, *note_id, *_round(attempt.rerun)))
    elif report.kind == "finished" and report.outcome is not None:
        if state.status == QUEUED:
            decided.append(_ev(RunStarted(run_id=state.run_id), state.run_id, "started"))
        finished = AttemptFinished(
            run_id=state.run_id,
            attempt_id=aid,
            agent_index=attempt.agent_index,
            task=attempt.task,
            attempt_index=attempt.attempt_index,
            try_number=report.try_number,
            outcome=report.outcome,
            rewards=report.rewards,
            primary_reward=report.primary_reward,
            exception_type=report.exception_type,
            exception_message=report.exception_message,
            started_at=report.started_at,
            finished_at=report.finished_at,
            timings=report.timings,
            usage=report.usage,
            sandbox_seconds=report.sandbox_seconds,
            executor_id=report.executor_id,
            artifacts=report.artifacts,
            environment=report.environment,
            environment_built=report.environment_built,
            environment_note=report.environment_note,
            image=report.image,
            integrity=report.integrity,
        )
        # One id per attempt: whoever records it first wins, every later copy is a no-op.
        decided.append(_ev(finished, aid, "finished", *_round(attempt.rerun)))
        if report.run_failure and not state.stop_requested:
            # No other attempt can succeed either: stop the rest (running ones are cancelled through
            # the stop notice) and end the run `failed`, keeping the results it has.
            failing = RunStopRequested(
                run_id=state.run_id, reason=report.run_failure[:MAX_REASON], ends_as="failed"
            )
            decided.append(_ev(failing, state.run_id, "run-failure"))
    return decided


def decide_on_reports(state: RunState, reports: list[AttemptReport]) -> list[NewEvent]:
    """Decide a batch of reports in order, each seeing what the earlier ones decided."""
    # The submission is frozen and the cached plan never changed in place; attempt states are
    # replaced by apply: copying the attempts dict isolates the scratch. (A deepcopy copied the whole
    # submission and every attempt for each batch of reports: a quarter of the scheduler's CPU.)
    scratch = replace(state, attempts=dict(state.attempts))
    decided: dict[str, NewEvent] = {}
    for report in reports:
        # Cost is checked after each report is applied, so the report that crosses the cap stops the run.
        for step in ("report", "cost"):
            for event in decide_on_report(scratch, report) if step == "report" else decide_cost_cap(scratch):
                if event.event_id not in decided:
                    decided[event.event_id] = event
                    apply(scratch, parse_event(event.type, event.data))
    return list(decided.values())


def decide_cost_cap(state: RunState) -> list[NewEvent]:
    """A run whose reported model spend passes its cap stops itself, saying why."""
    cap = state.submitted.execution.cost_cap_usd if state.submitted else None
    if cap is None or state.stop_requested or state.terminal or state.cost_usd < cap:
        return []
    reason = f"cost cap reached: ${state.cost_usd:.4f} reported, cap ${cap:.4f}"
    return [_ev(RunStopRequested(run_id=state.run_id, reason=reason), state.run_id, "cost-cap")]


def decide_on_stop_requested(state: RunState) -> list[NewEvent]:
    if state.terminal:
        return []
    return _decide_stop(state)
