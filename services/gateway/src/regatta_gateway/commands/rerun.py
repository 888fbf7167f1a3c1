"""Re-run a finished run's errored attempts: decided from the run's own events, recorded as one
ErroredAttemptsRerunRequested that the run-scheduler turns into new deliveries of those attempts."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from regatta_shared.events import ErroredAttemptsRerunRequested
from regatta_shared.events.envelope import deterministic_id, new_event
from regatta_shared.eventstore import EventStore, StoredEvent, WrongExpectedVersion
from regatta_shared.ids import run_stream
from regatta_shared.rules.outcomes import ERRORED
from regatta_shared.rules.task_defects import attempt_is_task_defect
from regatta_shared.runs import RunFold
from regatta_shared.runs.status import FINISHED, RUNNING
from regatta_shared.security import run_keys

from regatta_gateway.errors import Conflict
from regatta_gateway.principals import Scope
from regatta_gateway.queries.benchmarks import find_run
from regatta_gateway.readmodels import tables as t


class RerunRefused(Exception):
    """Why a run's errored attempts cannot be re-run; nothing is recorded."""


@dataclass(frozen=True)
class Rerun:
    attempt_ids: list[str]
    number: int  # 1 for the run's first re-run
    version: int  # the run stream's version it was decided on


def decide_rerun(history: Sequence[StoredEvent], secrets_key_kept: bool = False) -> Rerun:
    """The errored attempts of a finished run, by the rules every consumer folds a run with.
    `secrets_key_kept`: the run's secrets key is still there (kept for a re-run: run_keys.py)."""
    run = RunFold(history[0].data["run_id"]) if history else None
    if run is None:
        raise RerunRefused("the run has no history")
    reruns = 0
    for event in history:
        run.apply(event.type, event.data)
        reruns += event.type == ErroredAttemptsRerunRequested.type_name
    if run.status != FINISHED:
        state = "running its last re-run" if reruns and run.status == RUNNING else run.status
        raise RerunRefused(f"the run is {state}: only a finished run's errored attempts can be re-run")
    errored = [aid for aid, row in run.attempts.items() if row["outcome"] == ERRORED]
    # A task's own defect fails the same way again (regatta_shared.rules.task_defects): never re-run.
    rerunnable = [aid for aid in errored if not attempt_is_task_defect(run.attempts[aid])]
    if not rerunnable:
        if errored:
            raise RerunRefused(
                "the run's errored attempts are task defects, which fail the same way every time: "
                "a workspace admin can exclude the task from the benchmark's version instead"
            )
        raise RerunRefused("the run has no errored attempts: there is nothing to re-run")
    errored = rerunnable
    if history[0].data.get("sealed_secrets") and not secrets_key_kept:
        # The run's secrets key is deleted once its re-run time is up (crypto-shredding): a new attempt
        # could not open them.
        raise RerunRefused(
            "the run's secrets were deleted (REGATTA_RERUN_SECRETS_HOURS after its attempts ended), so "
            "its attempts cannot run again: submit the run again instead"
        )
    return Rerun(attempt_ids=sorted(errored), number=reruns + 1, version=history[-1].version)


def rerun_errored(store: EventStore, scope: Scope, key: str) -> dict[str, object]:
    run_id = find_run(store, scope, key, columns=[t.runs.c.id])["id"]
    history = store.read_stream(run_stream(run_id))
    try:
        rerun = decide_rerun(history, secrets_key_kept=run_keys.wrapped_key(store, run_id) is not None)
    except RerunRefused as refused:
        raise Conflict(f"Cannot re-run errored attempts: {refused}", code="CONFLICT") from None
    requested = ErroredAttemptsRerunRequested(
        run_id=run_id, attempt_ids=rerun.attempt_ids, rerun=rerun.number
    )
    event = new_event(
        requested,
        event_id=deterministic_id(run_id, "rerun-errored", str(rerun.number)),
        actor=scope.principal.user_id,
        workspace_id=scope.workspace_id,
    )
    try:
        stored = store.append(run_stream(run_id), [event], expected_version=rerun.version)
    except WrongExpectedVersion:
        changed = "The run changed while its re-run was requested; retry"
        raise Conflict(changed, code="CONFLICT") from None
    if not stored:
        raise Conflict("This re-run was already requested", code="CONFLICT")
    return {"id": run_id, "status": "running", "rerun": rerun.number, "attempts": len(rerun.attempt_ids)}
