"""Integrity evidence counted per agent: how many of an agent's attempts the platform checked, and how many
had unexplained changes to the verifier's tools, verifier files written by another hand, or agent
processes alive when the verifier started. Read from rm_attempts' integrity columns (folded once, by
regatta_shared.runs.integrity), so a count and the attempts its link filters to are the same attempts.
The run page's Agent Results and GET /runs/{key} show them per agent; leaderboard rows per row."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from regatta_shared.eventstore import EventStore
from sqlalchemy import ColumnElement, case, func, select

from regatta_gateway.queries.cached_reads import LRU
from regatta_gateway.readmodels import tables as t

_a = t.attempts.c
# Output key -> which attempts it counts.
_COUNTED: dict[str, ColumnElement[bool]] = {
    "checked": _a.integrity_checked.is_(True),
    "not_checked": _a.integrity_checked.is_(False),
    "unexplained": _a.integrity_unexplained > 0,
    "verifier_writes": _a.integrity_writes > 0,
    "processes_alive": _a.integrity_processes > 0,
}
_SUMS = [func.sum(case((where, 1), else_=0)).label(name) for name, where in _COUNTED.items()]


def no_counts() -> dict[str, int]:
    return dict.fromkeys(_COUNTED, 0)


def _counts(row: Any) -> dict[str, int]:
    return {name: int(row[name] or 0) for name in _COUNTED}


# A run's counts by (database, run id, ingested, expected): they change only when an attempt finishes
# (which bumps `ingested`) or an errored one is run again (which raises `expected`), so an entry never
# goes stale; each is read in one statement with the two numbers it is filed under (one snapshot).
_RUN_COUNTS: LRU[tuple[str, str, int, int], dict[int, dict[str, int]]] = LRU(1024)


def run_agent_counts(
    store: EventStore, run_id: str, ingested: int | None, expected: int | None
) -> dict[int, Any]:
    """{agent index: counts} for one run; agents without a finished attempt are absent."""
    cached = _RUN_COUNTS.get((store.url, run_id, ingested or 0, expected or 0))
    if cached is not None:
        return cached
    ingested_now = select(t.runs.c.ingested).where(t.runs.c.id == run_id).scalar_subquery()
    expected_now = select(t.runs.c.expected).where(t.runs.c.id == run_id).scalar_subquery()
    query = (
        select(
            ingested_now.label("ingested"),
            expected_now.label("expected"),
            _a.agent_index,
            *_SUMS,
        )
        .where(_a.run_id == run_id, _a.outcome.is_not(None))
        .group_by(_a.agent_index)
    )
    with store.read_engine.connect() as conn:
        rows = conn.execute(query).mappings().all()
    counts = {row["agent_index"]: _counts(row) for row in rows}
    if rows:
        _RUN_COUNTS.put((store.url, run_id, rows[0]["ingested"] or 0, rows[0]["expected"] or 0), counts)
    return counts


def agent_counts(
    store: EventStore, pairs: Iterable[tuple[str, int]]
) -> dict[tuple[str, int], dict[str, int]]:
    """Counts for each (run id, agent index), in one query over the runs named (a leaderboard's rows)."""
    wanted = set(pairs)
    if not wanted:
        return {}
    query = (
        select(_a.run_id, _a.agent_index, *_SUMS)
        .where(_a.run_id.in_(sorted({run_id for run_id, _ in wanted})), _a.outcome.is_not(None))
        .group_by(_a.run_id, _a.agent_index)
    )
    with store.read_engine.connect() as conn:
        rows = conn.execute(query).mappings().all()
    found = {(row["run_id"], row["agent_index"]): _counts(row) for row in rows}
    return {pair: found.get(pair, no_counts()) for pair in wanted}
