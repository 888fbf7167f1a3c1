"""The tasks excluded from a run's benchmark version (BenchmarkTaskExcluded) that the run ran, and its
attempts left unscored outside them: what decides whether its agents rank once those tasks are taken out
(scoring's leaderboard.py tallies the run without them)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from regatta_shared.eventstore import EventStore
from regatta_shared.rules.outcomes import UNSCORED
from sqlalchemy import func, select

from regatta_gateway.readmodels import tables as t


@dataclass(frozen=True)
class Exclusions:
    tasks: dict[str, str]  # task -> why it was excluded
    # agent index -> {outcome: count} of its unscored attempts of the tasks not excluded
    unscored: dict[int, dict[str, int]] = field(default_factory=dict)


def run_exclusions(store: EventStore, row: dict[str, Any], submission: dict[str, Any]) -> Exclusions | None:
    """None when no task the run ran is excluded from its version (the common case: one indexed read)."""
    version = submission.get("benchmark_version")
    ran = {task["name"] for task in submission.get("tasks") or []}
    if not version or not ran:
        return None
    exclusions = t.benchmark_exclusions
    with store.read_engine.connect() as conn:
        rows = conn.execute(
            select(exclusions.c.task, exclusions.c.reason).where(
                exclusions.c.benchmark_id == row["benchmark_id"], exclusions.c.version == str(version)
            )
        ).all()
        excluded = {task: reason or "" for task, reason in rows if task in ran}
        if not excluded:
            return None
        attempts = t.attempts
        counts = conn.execute(
            select(attempts.c.agent_index, attempts.c.outcome, func.count())
            .where(
                attempts.c.run_id == row["id"],
                attempts.c.outcome.in_(UNSCORED),
                attempts.c.task.not_in(sorted(excluded)),
            )
            .group_by(attempts.c.agent_index, attempts.c.outcome)
        ).all()
    unscored: dict[int, dict[str, int]] = {}
    for agent_index, outcome, count in counts:
        unscored.setdefault(agent_index, {})[outcome] = count
    return Exclusions(excluded, unscored)
