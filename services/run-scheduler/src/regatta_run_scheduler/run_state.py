"""The run aggregate's state: what a run's events say, folded. Pure; no I/O (run.py decides on it).

`apply` is the fold's step, public because the scheduler keeps a state per run and folds forward the
events it appends (and those it reads after them) instead of reading the stream again per decision.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field, replace

from regatta_shared.events import (
    AttemptFinished,
    AttemptRetried,
    AttemptScheduled,
    AttemptStarted,
    ErroredAttemptsRerunRequested,
    Event,
    RunExecutionCompleted,
    RunStopRequested,
    RunSubmitted,
)
from regatta_shared.events.aggregates import fold_into
from regatta_shared.events.envelope import StoredEvent
from regatta_shared.runs import STATUS_BY_EVENT, TERMINAL
from regatta_shared.runs.status import PENDING, STOPPED, RunStatus


@dataclass
class AttemptState:
    attempt_id: str
    agent_index: int
    task: str
    attempt_index: int
    try_number: int = 1
    started: bool = False
    outcome: str | None = None
    error: str | None = None  # "ExceptionType: message" of an errored outcome, for a failed run's reason
    # (try number, executor id) of each recorded start: a redelivered "started" report decides nothing.
    starts: frozenset[tuple[int, str]] = frozenset()
    # The latest delivery of the attempt's job that reported: the progress reports of an earlier one
    # (an executor presumed dead, or one that stopped) are superseded.
    delivery: int = 1
    # The re-run of the run's errored attempts that scheduled it (0: the run's own scheduling).
    rerun: int = 0


@dataclass
class RunState:
    run_id: str
    version: int = 0
    submitted: RunSubmitted | None = None
    status: RunStatus = PENDING
    attempts: dict[str, AttemptState] = field(default_factory=dict)
    stop_requested: bool = False
    execution_completed: bool = False
    cost_usd: float = 0.0
    stop_reason: str | None = None
    stop_ends_as: RunStatus = STOPPED
    # How many times the run's errored attempts were run again (ErroredAttemptsRerunRequested).
    rerun: int = 0
    # Derived, cached: the plan with its attempt ids (hashing them all per decision was O(N) in a
    # 20,000-attempt run) and how much of it is known to be scheduled already.
    planned: list[tuple[str, int, str, int]] | None = field(default=None, repr=False)
    plan_cursor: int = field(default=0, repr=False)
    # Not folded from events: the attempts executors claimed (picked up) that have no AttemptStarted
    # yet, set by the service before each decision. A stop waits for them as for started ones.
    claimed: frozenset[str] = field(default=frozenset(), repr=False)

    @property
    def in_flight(self) -> list[AttemptState]:
        return [a for a in self.attempts.values() if a.outcome is None]

    @property
    def terminal(self) -> bool:
        return self.status in TERMINAL


def plan(submitted: RunSubmitted) -> list[tuple[int, str, int]]:
    """The attempts of a run, in dispatch order: attempt rounds first, so early results cover every task."""
    return [
        (agent.index, task.name, attempt_index)
        for attempt_index in range(submitted.execution.attempts_per_task)
        for task in submitted.tasks
        for agent in submitted.agents
    ]


def fold(run_id: str, events: Iterable[StoredEvent]) -> RunState:
    return fold_into(RunState(run_id=run_id), events, apply)


def apply(state: RunState, event: Event) -> None:
    state.status = STATUS_BY_EVENT.get(event.type_name, state.status)
    match event:
        case RunSubmitted():
            state.submitted = event
        case AttemptScheduled():
            state.attempts[event.attempt_id] = AttemptState(
                event.attempt_id,
                event.agent_index,
                event.task,
                event.attempt_index,
                event.try_number,
                rerun=event.rerun,
            )
        # Attempt states are replaced, never changed in place, so a scratch copy of the state needs
        # only a copy of the dict (decide_on_reports).
        case AttemptStarted():
            attempt = state.attempts.get(event.attempt_id)
            if attempt:
                state.attempts[event.attempt_id] = replace(
                    attempt,
                    started=True,
                    try_number=event.try_number
                    if event.delivery > attempt.delivery
                    else max(attempt.try_number, event.try_number),
                    starts=attempt.starts | {(event.try_number, event.executor_id)},
                    delivery=max(attempt.delivery, event.delivery),
                )
        case AttemptRetried():
            attempt = state.attempts.get(event.attempt_id)
            if attempt:
                state.attempts[event.attempt_id] = replace(
                    attempt,
                    try_number=event.try_number
                    if event.delivery > attempt.delivery
                    else max(attempt.try_number, event.try_number),
                    delivery=max(attempt.delivery, event.delivery),
                )
        case AttemptFinished():
            attempt = state.attempts.get(event.attempt_id)
            if attempt and attempt.outcome is None:
                error = event.exception_type and f"{event.exception_type}: {event.exception_message or ''}"
                state.attempts[event.attempt_id] = replace(attempt, outcome=event.outcome, error=error)
                state.cost_usd += event.usage.cost_usd or 0.0
        case RunStopRequested():
            if not state.stop_requested:
                state.stop_requested = True
                state.stop_reason = event.reason
                state.stop_ends_as = event.ends_as
        case RunExecutionCompleted():
            state.execution_completed = True
        case ErroredAttemptsRerunRequested():
            # The errored attempts leave the state, so dispatch schedules their slots again.
            for aid in event.attempt_ids:
                if (attempt := state.attempts.get(aid)) and attempt.outcome == "errored":
                    del state.attempts[aid]
            state.rerun = max(state.rerun, event.rerun)
            state.execution_completed = False
            state.plan_cursor = 0
