"""A whole run folded in memory from its events: status, submission, expected count, attempt rows,
totals and scores — what the gateway's read model holds for it, by the same rules (attempts.py,
totals.py), for consumers that fold a history themselves (the run snapshot, scoring's tally).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from regatta_shared.events import (
    AttemptFinished,
    AttemptScheduled,
    ErroredAttemptsRerunRequested,
    RunFailed,
    RunFinished,
    RunQueued,
    RunScored,
    RunStarted,
    RunStopped,
    RunStopRequested,
    RunSubmitted,
)

from .attempts import ATTEMPT_EVENTS, attempt_change, expected_attempts, scheduled_row
from .status import FAILED, FINISHED, PENDING, QUEUED, RUNNING, STOPPED, RunStatus
from .totals import no_totals, with_finished

# The run status each event sets; the scheduler's aggregate and the read models use the same words.
STATUS_BY_EVENT: dict[str, RunStatus] = {
    RunSubmitted.type_name: PENDING,
    RunQueued.type_name: QUEUED,
    RunStarted.type_name: RUNNING,
    RunFinished.type_name: FINISHED,
    RunStopped.type_name: STOPPED,
    RunFailed.type_name: FAILED,
    ErroredAttemptsRerunRequested.type_name: RUNNING,
}


def public_submission(d: Mapping[str, Any]) -> dict[str, Any]:
    """A RunSubmitted's data as read models keep it: without the sealed secrets."""
    return {k: v for k, v in d.items() if k != "sealed_secrets"}


def keeps_scores(final_now: bool, d: Mapping[str, Any]) -> bool:
    """Whether a RunScored replaces the run's scores: final scores are never replaced by provisional
    ones (a provisional score computed before the final one may be recorded after it)."""
    return not (final_now and not d["final"])


def rerun_rows(attempts: dict[str, dict[str, Any]], d: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The rows an ErroredAttemptsRerunRequested `d` takes out of `attempts` (popped), so that the
    attempts' new AttemptScheduled make fresh ones: only errored rows, whatever the event lists."""
    return [
        attempts.pop(aid)
        for aid in d["attempt_ids"]
        if aid in attempts and attempts[aid]["outcome"] == "errored"
    ]


@dataclass
class RunFold:
    run_id: str
    status: RunStatus = PENDING
    submission: dict[str, Any] = field(default_factory=dict)
    expected: int = 0
    stop_requested: bool = False
    attempts: dict[str, dict[str, Any]] = field(default_factory=dict)
    totals: dict[str, Any] = field(default_factory=no_totals)
    scores: list[dict[str, Any]] = field(default_factory=list)
    scores_final: bool = False

    def apply(self, event_type: str, d: Mapping[str, Any], at: str | None = None) -> dict[str, Any] | None:
        """Fold one event of the run's stream (`at`: its recorded time as the read models write it).
        Returns what an attempt event changed in its row (the new row for AttemptScheduled), else None."""
        if event_type in STATUS_BY_EVENT:
            self.status = STATUS_BY_EVENT[event_type]
        if event_type == AttemptScheduled.type_name:
            if d["attempt_id"] in self.attempts:
                return None  # a known event id is never stored twice; a copy under another id is ignored
            row = self.attempts[d["attempt_id"]] = scheduled_row(d, at)
            return row
        if event_type in ATTEMPT_EVENTS:
            row = self.attempts.get(d["attempt_id"])
            change = attempt_change(event_type, d, at, row)
            if change is not None and row is not None:
                row.update(change)
                if event_type == AttemptFinished.type_name:
                    self.totals = with_finished(self.totals, d)
            return change
        if event_type == RunSubmitted.type_name:
            self.submission = public_submission(d)
            self.expected = expected_attempts(d)
        elif event_type == RunQueued.type_name:
            self.expected = d["expected_attempts"]
        elif event_type == ErroredAttemptsRerunRequested.type_name:
            # Results only ever add up (caches of a run's counts key on them): the attempts run again
            # are results still expected, on top of their errored ones.
            self.expected += len(rerun_rows(self.attempts, d))
        elif event_type == RunStopRequested.type_name:
            self.stop_requested = True
        elif event_type == RunScored.type_name and keeps_scores(self.scores_final, d):
            self.scores, self.scores_final = d["agents"], d["final"]
        return None
