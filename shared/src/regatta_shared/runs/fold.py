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
from .totals import no_totals, with_finished

# The run status each event sets; the scheduler's aggregate and the read models use the same words.
STATUS_BY_EVENT = {
    RunSubmitted.type_name: "pending",
    RunQueued.type_name: "queued",
    RunStarted.type_name: "running",
    RunFinished.type_name: "finished",
    RunStopped.type_name: "stopped",
    RunFailed.type_name: "failed",
}
TERMINAL = frozenset({"finished", "failed", "stopped"})


def public_submission(d: Mapping[str, Any]) -> dict[str, Any]:
    """A RunSubmitted's data as read models keep it: without the sealed secrets."""
    return {k: v for k, v in d.items() if k != "sealed_secrets"}


def keeps_scores(final_now: bool, d: Mapping[str, Any]) -> bool:
    """Whether a RunScored replaces the run's scores: final scores are never replaced by provisional
    ones (a provisional score computed before the final one may be recorded after it)."""
    return not (final_now and not d["final"])


@dataclass
class RunFold:
    run_id: str
    status: str = "pending"
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
        elif event_type == RunStopRequested.type_name:
            self.stop_requested = True
        elif event_type == RunScored.type_name and keeps_scores(self.scores_final, d):
            self.scores, self.scores_final = d["agents"], d["final"]
        return None
