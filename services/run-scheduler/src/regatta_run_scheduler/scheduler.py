"""Service layer of the run-scheduler: load a run, let the aggregate decide, append, repeat.

The run's state is cached per process and caught up from the store before every decision, so a
second scheduler instance or a redelivered message only costs an optimistic-concurrency retry.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from datetime import datetime, timedelta

from regatta_shared.clock import utcnow
from regatta_shared.events import (
    AttemptScheduled,
    ErroredAttemptsRerunRequested,
    Event,
    RunExecutionCompleted,
    RunFailed,
    RunFinished,
    RunStopped,
    RunStopRequested,
    RunSubmitted,
    parse_event,
)
from regatta_shared.events.aggregates import fold_into
from regatta_shared.eventstore import EventStore, NewEvent, StoredEvent, WrongExpectedVersion
from regatta_shared.ids import run_stream
from regatta_shared.messaging.jobs import AttemptJob, AttemptReport
from regatta_shared.rules.execution_defaults import PASS_THRESHOLD
from regatta_shared.runs.status import FAILED, STOPPED
from regatta_shared.security import run_keys
from regatta_shared.security.attempt_auth import AttemptKeys
from regatta_shared.security.sealing import RUN_SEALED_PREFIX, job_envelope

from . import run as aggregate

log = logging.getLogger("regatta.run_scheduler")
Decision = Callable[[aggregate.RunState], list[NewEvent]]
# After these no attempt needs the run's secrets any more: its data key is deleted (crypto-shredding),
# unless the run finished with errored attempts that may be re-run (keeps_key_for_rerun).
RUN_ENDED: tuple[type[Event], ...] = (RunExecutionCompleted, RunStopped, RunFailed, RunFinished)
_RUN_ENDED_TYPES = frozenset(ended.type_name for ended in RUN_ENDED)
# Claims held at most (attempts in flight across all runs); past it a claim is dropped, which only
# makes a stop not wait for that attempt's sandbox.
_CLAIMS_KEPT = 100_000


def keeps_key_for_rerun(
    state: aggregate.RunState, ended_at: datetime, now: datetime, retention: timedelta
) -> bool:
    """A run whose attempts ended with some errored keeps its secrets' key for `retention` after
    that: its errored attempts can be re-run with the same secrets. A stopped or failed run never."""
    if state.status in (STOPPED, FAILED) or retention <= timedelta(0):
        return False
    errored = any(attempt.outcome == "errored" for attempt in state.attempts.values())
    return errored and now - ended_at < retention


class RunScheduler:
    def __init__(
        self,
        store: EventStore,
        attempt_keys: AttemptKeys | None = None,
        rerun_secrets_retention: timedelta = timedelta(0),
    ) -> None:
        self.store = store
        self.rerun_secrets_retention = rerun_secrets_retention
        # Without keys, jobs carry no report key and no executor can sign a report the app accepts.
        self.attempt_keys = attempt_keys
        self._states: dict[str, aggregate.RunState] = {}
        # The consumers call in from worker threads; the cached states are folded in place, so one
        # decision at a time (each takes milliseconds).
        self._lock = threading.RLock()
        self._scheduled: list[StoredEvent] = []
        # Claims arrive on the event loop's thread while decisions run in worker threads: a lock of
        # their own, never held across I/O, so a claim never waits for a decision.
        self._claims: dict[str, set[str]] = {}
        self._claims_lock = threading.Lock()

    def claim(self, run_id: str, attempt_id: str) -> None:
        """An executor picked up this attempt. Kept in memory only, until its outcome: an executor
        reports "started" only once an attempt has run REGATTA_STARTED_REPORT_DELAY seconds (a
        shorter one costs no event but its outcome), and a stop must still wait for the sandboxes of
        the younger ones. A claim lost with this process (a restart) only lets a stop that follows
        within the delay mark the run stopped before those sandboxes are gone."""
        with self._claims_lock:
            if sum(map(len, self._claims.values())) < _CLAIMS_KEPT:
                self._claims.setdefault(run_id, set()).add(attempt_id)

    def _claimed_in(self, state: aggregate.RunState) -> frozenset[str]:
        with self._claims_lock:
            claims = self._claims.get(state.run_id)
            if not claims:
                return frozenset()
            if state.terminal or state.execution_completed:
                del self._claims[state.run_id]
                return frozenset()
            claims -= {a for a in claims if (known := state.attempts.get(a)) and known.outcome is not None}
            return frozenset(claims)

    def take_scheduled(self) -> list[StoredEvent]:
        """The AttemptScheduled events this instance appended since the last call, for dispatch."""
        with self._lock:
            scheduled, self._scheduled = self._scheduled, []
        return scheduled

    def load(self, run_id: str) -> aggregate.RunState:
        with self._lock:
            return self._load(run_id)

    def _load(self, run_id: str) -> aggregate.RunState:
        state = self._states.get(run_id) or aggregate.RunState(run_id=run_id)
        fold_into(
            state, self.store.read_stream(run_stream(run_id), after_version=state.version), aggregate.apply
        )
        self._states[run_id] = state
        if state.terminal:
            self._states.pop(run_id, None)
        return state

    def decide(self, run_id: str, decision: Decision) -> aggregate.RunState:
        """Apply one decision and the dispatching it allows, appended together in one transaction."""
        with self._lock:
            return self._decide(run_id, decision)

    def _decide(self, run_id: str, decision: Decision) -> aggregate.RunState:
        for _ in range(50):
            state = self._load(run_id)
            state.claimed = self._claimed_in(state)
            expected = state.version
            # The cached state is folded forward before the append; on a conflict it is dropped and the
            # run reloaded, so the cache never holds events the store refused.
            new_events = self._fold_forward(state, decision(state))
            for _ in range(50):
                dispatched = self._fold_forward(state, aggregate.decide_dispatch(state))
                if not dispatched:
                    break
                new_events += dispatched
            if not new_events:
                return state
            try:
                stored = self.store.append(run_stream(run_id), new_events, expected_version=expected)
            except WrongExpectedVersion:
                self._states.pop(run_id, None)
                continue
            except BaseException:
                # The store is down (or the append failed otherwise): the folded-forward state holds
                # events that were never stored, and the redelivered report must decide them again.
                self._states.pop(run_id, None)
                raise
            self._scheduled += [e for e in stored if e.type == AttemptScheduled.type_name]
            self._claimed_in(state)  # drops the claims of attempts that just finished
            if len(stored) != len(new_events):
                # Some were stored already (by another instance, or by this one for a redelivered
                # report): the store skipped those and kept the rest; the cache folded them again.
                self._states.pop(run_id, None)
                return self._load(run_id)
            state.version = stored[-1].version
            if state.terminal:
                self._states.pop(run_id, None)
            return state
        raise RuntimeError(f"run {run_id}: 50 conflicting appends in a row")

    @staticmethod
    def _fold_forward(state: aggregate.RunState, new_events: list[NewEvent]) -> list[NewEvent]:
        for new in new_events:
            aggregate.apply(state, parse_event(new.type, new.data))
        return new_events

    def on_event(self, event: StoredEvent) -> aggregate.RunState | None:
        run_id = event.data.get("run_id")
        if not run_id:
            return None
        if event.type == RunSubmitted.type_name:
            return self.decide(run_id, aggregate.decide_on_submitted)
        if event.type == RunStopRequested.type_name:
            return self.decide(run_id, aggregate.decide_on_stop_requested)
        if event.type == ErroredAttemptsRerunRequested.type_name:
            # The fold put the errored slots back in the plan: dispatch (in decide) schedules them.
            return self.decide(run_id, lambda _state: [])
        return None

    def on_reports(self, reports: list[AttemptReport]) -> None:
        by_run: dict[str, list[AttemptReport]] = {}
        for report in reports:
            by_run.setdefault(report.run_id, []).append(report)
        for run_id, batch in by_run.items():
            self.decide(run_id, lambda state, batch=batch: aggregate.decide_on_reports(state, batch))

    def job_for(self, event: StoredEvent) -> AttemptJob | None:
        """The JOBS message for a scheduled attempt, built from the run's locked submission."""
        return self.jobs_for([event])[0]

    def jobs_for(self, events: list[StoredEvent]) -> list[AttemptJob | None]:
        """job_for of each, each run caught up from the store once for all its events."""
        with self._lock:
            states: dict[str, aggregate.RunState] = {}
            envelopes: dict[str, str | None] = {}
            jobs: list[AttemptJob | None] = []
            for event in events:
                scheduled = event.payload()
                assert isinstance(scheduled, AttemptScheduled)
                run_id = scheduled.run_id
                if run_id not in states:
                    states[run_id] = self._load(run_id)
                state = states[run_id]
                attempt = state.attempts.get(scheduled.attempt_id)
                # Dispatched twice (right after the append, and by the consumer of AttemptScheduled);
                # JOBS drops the second copy by message id, and an attempt already started needs none.
                submitted = state.submitted
                done = attempt is None or attempt.outcome is not None or attempt.started or state.terminal
                if submitted is None or done:
                    jobs.append(None)
                    continue
                if run_id not in envelopes:
                    envelopes[run_id] = self._job_secrets(submitted)
                job = build_job(submitted, scheduled, envelopes[run_id])
                if self.attempt_keys is not None:
                    job.report_key = self.attempt_keys.sealed_key(run_id, scheduled.attempt_id)
                jobs.append(job)
        return jobs

    def _job_secrets(self, submitted: RunSubmitted) -> str | None:
        """The envelope an executor opens with the sealing subkey; the scheduler never sees a value."""
        sealed = submitted.sealed_secrets
        if not sealed or not sealed.startswith(RUN_SEALED_PREFIX):
            return sealed  # none, or a run sealed before per-run keys existed
        wrapped = run_keys.wrapped_key(self.store, submitted.run_id)
        if wrapped is None:
            # Only after the run ended; the executor reports the attempt errored with SealError.
            log.error("run %s has no secrets key (purged?); its jobs cannot open them", submitted.run_id)
            return sealed
        return job_envelope(submitted.run_id, wrapped, sealed)

    def on_run_ended(self, event: StoredEvent) -> bool:
        """Shred the run's secrets: True if its key was still there. Redeliveries are no-ops."""
        run_id = event.data.get("run_id")
        if event.type not in _RUN_ENDED_TYPES or not run_id:
            return False
        state = self.load(run_id)
        if not (state.terminal or state.execution_completed):
            return False  # an old end, heard late: the run is running (again) and its jobs need the key
        if keeps_key_for_rerun(state, event.recorded_at, utcnow(), self.rerun_secrets_retention):
            log.info("run %s ended with errored attempts: its secrets key is kept for a re-run", run_id)
            return False
        purged = run_keys.purge(self.store, run_id)
        if purged:
            log.info("run %s ended (%s): its secrets key is deleted", run_id, event.type)
        return purged

    def purge_ended_runs(self) -> list[str]:
        """At start-up and then periodically: shred keys of runs that ended while no purge consumer saw
        it (e.g. events that aged out of the EVENTS stream), and of those kept for a re-run once their
        time is up; the store, not the bus, says whether and when a run ended."""
        purged = []
        now = utcnow()
        for run_id in run_keys.run_ids(self.store):
            state = self.load(run_id)
            if not (state.terminal or state.execution_completed):
                continue
            ended_at = self._ended_at(run_id)
            retention = self.rerun_secrets_retention
            if ended_at is not None and keeps_key_for_rerun(state, ended_at, now, retention):
                continue
            if run_keys.purge(self.store, run_id):
                purged.append(run_id)
        if purged:
            log.info("deleted the secrets keys of %d ended runs", len(purged))
        return purged

    def _ended_at(self, run_id: str) -> datetime | None:
        """When the run's attempts last ended (its latest end event)."""
        ends = [e for e in self.store.read_stream(run_stream(run_id)) if e.type in _RUN_ENDED_TYPES]
        return ends[-1].recorded_at if ends else None


def build_job(
    submitted: RunSubmitted, scheduled: AttemptScheduled, sealed_secrets: str | None = None
) -> AttemptJob:
    """`sealed_secrets`: the job's envelope (RunScheduler._job_secrets); the stored blob if not given."""
    agent = submitted.agents[scheduled.agent_index]
    task = next(t for t in submitted.tasks if t.name == scheduled.task)
    execution = submitted.execution
    return AttemptJob(
        run_id=submitted.run_id,
        attempt_id=scheduled.attempt_id,
        agent=agent,
        task=task.name,
        task_digest=task.digest,
        attempt_index=scheduled.attempt_index,
        timeout_multiplier=execution.timeout_multiplier,
        max_retries=execution.max_retries,
        pass_threshold=execution.pass_threshold if execution.pass_threshold is not None else PASS_THRESHOLD,
        primary_reward_key=submitted.primary_reward_key,
        verifier_integrity=execution.verifier_integrity,
        env={**submitted.env, **agent.env},
        verifier_env_names=list(execution.verifier_secrets),
        judge_model=execution.judge_model,
        sealed_secrets=sealed_secrets if sealed_secrets is not None else submitted.sealed_secrets,
        rerun=scheduled.rerun,
    )
