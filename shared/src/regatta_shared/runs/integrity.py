"""What an attempt's integrity evidence (AttemptFinished.integrity, events/integrity.py) puts on its row:
whether the platform looked, and how many unexplained tool-chain changes, agent processes alive at the
verifier's start and verifier files written by another hand it saw.

The run page's per-agent counts, the attempts filter, the leaderboard's count and results.csv all read
these columns, so they count the same attempts. Pure.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pydantic import ValidationError

from regatta_shared.events.integrity import AttemptIntegrity

INTEGRITY_COLUMNS = ("integrity_checked", "integrity_unexplained", "integrity_processes", "integrity_writes")
# The attempts filter's words (GET /runs/{key}/attempts?integrity=…) and the column each one reads.
INTEGRITY_FILTERS = {
    "unexplained": "integrity_unexplained",
    "verifier_writes": "integrity_writes",
    "processes": "integrity_processes",
    "not_checked": "integrity_checked",
}


def integrity_columns(d: Mapping[str, Any]) -> dict[str, Any]:
    """The columns of a finished attempt `d` (AttemptFinished data): all None when its environment does
    not look (or the event predates the evidence), counts None when the platform could not look."""
    evidence = d.get("integrity")
    if not isinstance(evidence, Mapping):
        return dict.fromkeys(INTEGRITY_COLUMNS)
    try:
        seen = AttemptIntegrity.model_validate(evidence)
    except ValidationError:
        # A fold must never stop on one event (every later one would wait behind it): evidence this
        # code cannot read counts as not looked at, and the attempt's page says the same.
        return {**dict.fromkeys(INTEGRITY_COLUMNS), "integrity_checked": False}
    if not seen.checked:
        return {**dict.fromkeys(INTEGRITY_COLUMNS), "integrity_checked": False}
    # The totals cover what the bounded lists leave out; the lists are what the totals must at least be.
    return {
        "integrity_checked": True,
        "integrity_unexplained": max(seen.unexplained, sum(c.unexplained for c in seen.changes)),
        "integrity_processes": max(seen.processes_total, len(seen.processes)),
        "integrity_writes": len(seen.verifier_files_written),
    }


def integrity_summary(row: Mapping[str, Any]) -> dict[str, Any] | None:
    """An attempt row's columns as the API shows them; None when its environment recorded nothing."""
    if row.get("integrity_checked") is None:
        return None
    return {
        "checked": bool(row["integrity_checked"]),
        "unexplained": row.get("integrity_unexplained"),
        "processes_alive": row.get("integrity_processes"),
        "verifier_files_written": row.get("integrity_writes"),
    }
