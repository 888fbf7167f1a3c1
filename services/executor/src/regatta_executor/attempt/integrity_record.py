"""What an attempt's environment saw of its integrity before the verifier ran, handed to the attempt's
report (AttemptFinished.integrity), as image_record.py hands the image.

The environment runs inside Harbor's trial, which returns no word of it: it keeps this record in the
trial's folder on the host (nothing in the container writes there), rewritten whole at each verifier of
the attempt (a multi-step task's steps add to it). A record that is missing, too large or not exactly an
AttemptIntegrity is no record.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from regatta_shared.events.integrity import (
    MAX_NAMED_FILES,
    MAX_NAMED_PROCESSES,
    MAX_NAMED_WRITES,
    AgentProcess,
    AttemptIntegrity,
    ToolChainChange,
    VerifierIntegrity,
    VerifierMode,
)

from regatta_executor.attempt.trial_records import read_record, write_record

INTEGRITY_RECORD = "verifier-integrity.json"
MAX_RECORD_BYTES = 1024 * 1024


class IntegrityLog:
    """The evidence of one attempt, across its verifier runs."""

    def __init__(self, trial_dir: Path, policy: VerifierIntegrity, mode: VerifierMode) -> None:
        self.trial_dir = trial_dir
        self.policy: VerifierIntegrity = policy
        self.mode: VerifierMode = mode
        self.checked = True
        self._changes: dict[str, ToolChainChange] = {}
        self._processes: list[AgentProcess] = []
        self._processes_total = 0
        self._writes: list[str] = []
        self._notes: list[str] = []

    def tool_chain(self, changes: Iterable[ToolChainChange]) -> None:
        for change in changes:
            self._changes[change.path] = change
        self.write()

    def processes(self, alive: list[AgentProcess], total: int) -> None:
        self._processes = (self._processes + alive)[:MAX_NAMED_PROCESSES]
        self._processes_total += total
        self.write()

    def verifier_files_written(self, found: list[str]) -> None:
        self._writes = list(dict.fromkeys(self._writes + found))
        self.write()

    def not_checked(self, reason: str) -> None:
        self.checked = False
        self.note(reason)

    def note(self, text: str) -> None:
        if text not in self._notes:
            self._notes.append(text)
        self.write()

    def record(self) -> AttemptIntegrity:
        changes = sorted(self._changes.values(), key=_unexplained_first)
        writes = self._writes
        return AttemptIntegrity(
            policy=self.policy,
            verifier_mode=self.mode,
            checked=self.checked,
            changes=changes[:MAX_NAMED_FILES],
            changes_total=len(changes),
            unexplained=sum(c.unexplained for c in changes),
            processes=self._processes,
            processes_total=self._processes_total,
            verifier_files_written=[w[:500] for w in writes[:MAX_NAMED_WRITES]],
            note="; ".join(self._notes)[:2000] or None,
        )

    def write(self) -> None:
        write_record(self.trial_dir, INTEGRITY_RECORD, self.record())


def _unexplained_first(change: ToolChainChange) -> tuple[bool, bool, str]:
    return (not change.unexplained, change.change == "deleted", change.path)


def read_integrity_record(trial_dir: Path) -> AttemptIntegrity | None:
    return read_record(trial_dir, INTEGRITY_RECORD, AttemptIntegrity, MAX_RECORD_BYTES)
