"""The benchmark aggregate: fold a benchmark's stream into its state, and decide what a command records.

Pure functions; no I/O. The gateway folds the stream it read, decides, and appends with the version it
folded (commands/benchmarks.py), so two requests that both saw the same state cannot both be
recorded: the later append fails its version check and its command is decided again on the newer state.

The state mirrors the read model's row (readmodels/projection.py): a sync counts as in progress from its
request (or the benchmark's addition, which starts the initial sync) until it completes or fails.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Literal

from regatta_shared.events import (
    BenchmarkAdded,
    BenchmarkRemoved,
    BenchmarkSyncCompleted,
    BenchmarkSyncFailed,
    BenchmarkSyncRequested,
    BenchmarkSyncStarted,
    BenchmarkTaskExcluded,
    BenchmarkTasksSynced,
    Event,
)
from regatta_shared.events.aggregates import fold_into
from regatta_shared.events.envelope import StoredEvent
from regatta_shared.rules.benchmark_status import FAILED, IN_PROGRESS, PENDING, READY, SYNCING, SyncStatus

Refusal = Literal[
    "not_found",
    "hosted",
    "sync_in_progress",
    "not_adder",
    "not_admin",
    "no_version",
    "unknown_version",
    "unknown_task",
    "already_excluded",
]


class BenchmarkRefused(Exception):
    """The command does not hold on the benchmark's current state; `reason` says why."""

    def __init__(self, reason: Refusal) -> None:
        super().__init__(reason)
        self.reason: Refusal = reason


@dataclass
class BenchmarkState:
    benchmark_id: str
    version: int = 0
    added: BenchmarkAdded | None = None
    # The user who added it (the actor of BenchmarkAdded): they may remove it, as may a workspace admin.
    added_by: str | None = None
    status: SyncStatus = PENDING
    sync_id: str | None = None
    removed: bool = False
    # The valid tasks of each version a sync completed, and the latest such version.
    versions: dict[str, frozenset[str]] = field(default_factory=dict)
    current_version: str | None = None
    excluded: set[tuple[str, str]] = field(default_factory=set)  # (version, task)
    _pages: dict[str, set[str]] = field(default_factory=dict)  # sync id -> tasks recorded so far


def fold(benchmark_id: str, events: Iterable[StoredEvent]) -> BenchmarkState:
    stored = list(events)
    state = fold_into(BenchmarkState(benchmark_id=benchmark_id), stored, _apply)
    # Who acted lives in the envelope, not the payload the fold applies.
    state.added_by = next((e.actor for e in stored if e.type == BenchmarkAdded.type_name), None)
    return state


def _apply(state: BenchmarkState, event: Event) -> None:
    match event:
        case BenchmarkAdded():
            state.added = event
            state.status = PENDING
        case BenchmarkSyncRequested():
            state.status = PENDING
            state.sync_id = event.sync_id
        case BenchmarkSyncStarted():
            state.status = SYNCING
            state.sync_id = event.sync_id
        case BenchmarkTasksSynced():
            state._pages.setdefault(event.sync_id, set()).update(task.name for task in event.tasks)
        case BenchmarkSyncCompleted():
            state.status = READY
            state.versions[event.version] = frozenset(state._pages.pop(event.sync_id, set()))
            state.current_version = event.version
        case BenchmarkTaskExcluded():
            state.excluded.add((event.version, event.task))
        case BenchmarkSyncFailed():
            state.status = FAILED
        case BenchmarkRemoved():
            state.removed = True


def _existing(state: BenchmarkState, workspace_id: str) -> BenchmarkAdded:
    """The benchmark as added, if it exists, is not removed and belongs to `workspace_id`."""
    if state.added is None or state.removed or state.added.workspace_id != workspace_id:
        raise BenchmarkRefused("not_found")
    return state.added


def decide_sync(state: BenchmarkState, workspace_id: str, sync_id: str) -> list[Event]:
    """A new sync, unless one is already pending or running (two would race to record their pages)."""
    _existing(state, workspace_id)
    if state.status in IN_PROGRESS:
        raise BenchmarkRefused("sync_in_progress")
    return [BenchmarkSyncRequested(benchmark_id=state.benchmark_id, sync_id=sync_id)]


def may_remove(added_by: str | None, user_id: str, is_admin: bool) -> bool:
    """A benchmark is removed by the user who added it or by an admin of its workspace, nobody else
    (hosted ones by nobody: decide_remove)."""
    return is_admin or (added_by is not None and added_by == user_id)


def decide_remove(state: BenchmarkState, workspace_id: str, user_id: str, is_admin: bool) -> list[Event]:
    """Remove the benchmark, unless the deployment hosts it or `user_id` may not (may_remove). A sync in
    progress does not prevent it: registry-sync starts no sync of a removed benchmark, and one already
    running only records tasks nobody can select any more."""
    added = _existing(state, workspace_id)
    if added.hosted:
        raise BenchmarkRefused("hosted")
    if not may_remove(state.added_by, user_id, is_admin):
        raise BenchmarkRefused("not_adder")
    return [BenchmarkRemoved(benchmark_id=state.benchmark_id)]


def decide_exclude_task(
    state: BenchmarkState, workspace_id: str, is_admin: bool, task: str, reason: str, version: str | None
) -> list[Event]:
    """Exclude `task` from `version` (default: the latest synced one), by a workspace admin only, once.
    The task must be one of that version's valid tasks: an invalid one never runs anyway."""
    _existing(state, workspace_id)
    if not is_admin:
        raise BenchmarkRefused("not_admin")
    version = version or state.current_version
    if version is None:
        raise BenchmarkRefused("no_version")
    if version not in state.versions:
        raise BenchmarkRefused("unknown_version")
    if task not in state.versions[version]:
        raise BenchmarkRefused("unknown_task")
    if (version, task) in state.excluded:
        raise BenchmarkRefused("already_excluded")
    return [BenchmarkTaskExcluded(benchmark_id=state.benchmark_id, version=version, task=task, reason=reason)]
