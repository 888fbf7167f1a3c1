"""How run reads fetch a run's row cheaply: the columns without the per-agent task counts, and each
run's submission parsed once per process. Shared by the run lists and the run detail."""

from __future__ import annotations

from typing import Any

from regatta_shared.eventstore import EventStore
from sqlalchemy import literal_column, select

from regatta_gateway.queries.cached_reads import LRU
from regatta_gateway.readmodels import tables as t

# What the run page reads of a big run's row, cheaply. `scores` holds every agent's per-task (n, c)
# counts, hundreds of KB on a run of thousands of tasks, which the page does not show: Postgres drops
# them before sending the row (SQLite, the embedded single-user store, reads the column whole).
# `submission` (the RunSubmitted payload, its task list included) is as big and never changes once the
# run's row exists (only the RunSubmitted handler writes it; a rebuild writes the same), so each process
# parses it once per run: it was the largest CPU cost of GET /runs/{id}.
_SCORES_WITHOUT_TASK_COUNTS = literal_column(
    "CASE WHEN jsonb_typeof(rm_runs.scores) = 'array' THEN (SELECT coalesce(jsonb_agg("
    "CASE WHEN jsonb_typeof(a) = 'object' THEN a - 'task_counts' ELSE a END ORDER BY o), '[]'::jsonb)"
    " FROM jsonb_array_elements(rm_runs.scores) WITH ORDINALITY AS x(a, o)) ELSE rm_runs.scores END",
    t.runs.c.scores.type,
).label("scores")
# By (database, run id); 64 kept: a 2,000-task submission is ~0.8 MB parsed.
_SUBMISSIONS: LRU[tuple[str, str], dict[str, Any]] = LRU(64)


def detail_columns(store: EventStore) -> list[Any]:
    scores = t.runs.c.scores if store.is_sqlite else _SCORES_WITHOUT_TASK_COUNTS
    return [*(c for c in t.runs.columns if c.name not in ("scores", "submission")), scores]


def run_submissions(store: EventStore, run_ids: list[str]) -> dict[str, dict[str, Any]]:
    """The runs' submissions by id: from the cache, the others in one query."""
    found: dict[str, dict[str, Any]] = {}
    for run_id in run_ids:
        cached = _SUBMISSIONS.get((store.url, run_id))
        if cached is not None:
            found[run_id] = cached
    missing = [run_id for run_id in run_ids if run_id not in found]
    if missing:
        with store.read_engine.connect() as conn:
            query = select(t.runs.c.id, t.runs.c.submission).where(t.runs.c.id.in_(missing))
            loaded = {
                run_id: submission for run_id, submission in conn.execute(query) if submission is not None
            }
        for run_id, submission in loaded.items():
            _SUBMISSIONS.put((store.url, run_id), submission)
        found.update(loaded)
    return found
