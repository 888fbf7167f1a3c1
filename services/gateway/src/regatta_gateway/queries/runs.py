"""Run reads shaped as the contract's BenchmarkRun (§4.3) and BenchmarkRunDetail (§4.5)."""

from __future__ import annotations

from typing import Any

from regatta_shared.conditions import qualification
from regatta_shared.eventstore import EventStore
from regatta_shared.per_task import per_task_figures
from sqlalchemy import func, literal_column, or_, select

from regatta_gateway.http.auth import Scope
from regatta_gateway.http.errors import ApiError
from regatta_gateway.queries.benchmarks import find_run, page
from regatta_gateway.queries.cached_reads import LRU
from regatta_gateway.readmodels import tables as t


def run_summary(row: dict[str, Any], base_url: str = "") -> dict[str, Any]:
    submission = row["submission"] or {}
    scores = row["scores"] or []
    best = max((s["pass_at_1"]["value"] for s in scores if s.get("pass_at_1")), default=None)
    body: dict[str, Any] = {
        "id": row["id"],
        "name": row["name"],
        "status": row["status"],
        "benchmark_name": submission.get("benchmark_name", ""),
        "benchmark_id": row["benchmark_id"],
        "benchmark": {"id": row["benchmark_id"], "name": submission.get("benchmark_name", "")},
        "created_at": row["created_at"],
        "creator_name": row["created_by"] or "",
        "agent_count": len(submission.get("agents") or []),
        "task_selection": task_selection(submission),
        "ingested_results": int(row["ingested"] or 0),
        "expected_results": int(row["expected"] or 0),
    }
    if row["creator_email"]:
        body["creator_email"] = row["creator_email"]
    if row["started_at"]:
        body["started_at"] = row["started_at"]
    if row["completed_at"]:
        body["completed_at"] = row["completed_at"]
    if row.get("reason") and row["status"] in ("failed", "stopped"):
        body["status_reason"] = row["reason"]
    if best is not None:
        body["best_pass_at_1"] = best
    if base_url:
        body["platform_url"] = f"{base_url}/benchmarks/runs/{row['id']}"
    return body


RUN_STATUSES = ("pending", "queued", "running", "finished", "failed", "stopped")
SHOWN_TASK_NAMES = 10


def task_selection(submission: dict[str, Any]) -> dict[str, Any]:
    """Which tasks a run chose, for lists: `kind` (all, task_set, categories, task_names), what was
    named (at most SHOWN_TASK_NAMES task names, with their count) and how many tasks that made."""
    selection = submission.get("selection") or {}
    names = list(selection.get("task_names") or [])
    categories = list(selection.get("categories") or [])
    body: dict[str, Any] = {"task_count": len(submission.get("tasks") or [])}
    if names:
        body.update(kind="task_names", task_names=names[:SHOWN_TASK_NAMES], task_name_count=len(names))
    elif categories:
        body.update(kind="categories")
    elif selection.get("task_set"):
        body.update(kind="task_set", task_set=selection["task_set"])
    else:
        body.update(kind="all")
    if categories:
        body["categories"] = categories
    return body


def list_runs(
    store: EventStore,
    scope: Scope,
    limit: int,
    offset: int,
    benchmark: str | None = None,
    base_url: str = "",
    *,
    status: str | None = None,
    submitter: str | None = None,
) -> dict[str, Any]:
    """Newest first. `status` one of RUN_STATUSES; `submitter` a user's name or email, exactly."""
    where = [t.runs.c.workspace_id == scope.workspace_id]
    if benchmark:
        where.append(t.runs.c.benchmark_id == benchmark)
    if status:
        where.append(t.runs.c.status == status)
    if submitter:
        where.append(or_(t.runs.c.created_by == submitter, t.runs.c.creator_email == submitter))
    with store.read_engine.connect() as conn:
        total = conn.execute(select(func.count()).select_from(t.runs).where(*where)).scalar_one()
        query = select(*_detail_columns(store)).where(*where).order_by(t.runs.c.seq.desc())
        rows = [dict(r) for r in conn.execute(query.limit(limit).offset(offset)).mappings()]
    submissions = _submissions(store, [r["id"] for r in rows])
    for row in rows:
        row["submission"] = submissions.get(row["id"])
    return page("benchmark_runs", [run_summary(r, base_url) for r in rows], total, limit, offset)


def run_submitters(store: EventStore, scope: Scope, benchmark: str) -> list[dict[str, str]]:
    """Everyone who submitted a run of the benchmark (name and email), for the runs list's filter."""
    query = (
        select(t.runs.c.created_by, t.runs.c.creator_email)
        .where(t.runs.c.workspace_id == scope.workspace_id, t.runs.c.benchmark_id == benchmark)
        .group_by(t.runs.c.created_by, t.runs.c.creator_email)
        .order_by(t.runs.c.created_by)
    )
    with store.read_engine.connect() as conn:
        return [
            {"name": name or "", "email": email or ""} for name, email in conn.execute(query) if name or email
        ]


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
_ID = (t.runs.c.id,)
# By (database, run id); 64 kept: a 2,000-task submission is ~0.8 MB parsed.
_SUBMISSIONS: LRU[tuple[str, str], dict[str, Any]] = LRU(64)


def _detail_columns(store: EventStore) -> list[Any]:
    scores = t.runs.c.scores if store.is_sqlite else _SCORES_WITHOUT_TASK_COUNTS
    return [*(c for c in t.runs.columns if c.name not in ("scores", "submission")), scores]


def _submissions(store: EventStore, run_ids: list[str]) -> dict[str, dict[str, Any]]:
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


def run_detail(store: EventStore, scope: Scope, key: str, base_url: str = "") -> dict[str, Any]:
    row = find_run(store, scope, key, _detail_columns(store))
    row["submission"] = _submissions(store, [row["id"]]).get(row["id"])
    submission = row["submission"] or {}
    scores = {s["agent_index"]: s for s in (row["scores"] or [])}
    agents = []
    metrics = []
    for agent in submission.get("agents") or []:
        index = agent["index"]
        agent_id = f"{row['id']}:{index}"
        score = scores.get(index)
        # Per-attempt means, also for scores recorded when cost/tokens per task were per-task sums.
        figures = per_task_figures(score) if score else {}
        model = agent["model"]
        display = model.get("model") or model.get("base_model") or ""
        agents.append(
            {
                "id": agent_id,
                "agent_index": index,
                "harness": agent["harness"],
                "model": display,
                "model_ref": model,
                "status": _agent_status(row, score),
                "environment_variables": agent.get("env") or {},
                "aggregates": {
                    "reported_cost_usd": score.get("cost_usd") if score else None,
                    "mean_duration_seconds": figures.get("mean_duration_seconds"),
                    "tokens_per_task": figures.get("tokens_per_task"),
                },
            }
        )
        if score:
            metrics.append(
                {
                    "benchmark_run_agent_id": agent_id,
                    "agent_index": index,
                    "rank": score.get("rank"),
                    "tied": bool(score.get("tied")),
                    "n_tasks": len(submission.get("tasks") or []),
                    "pass_at_1": score.get("pass_at_1"),
                    "pass_at_k": [
                        {"k": p["k"], "value": p["value"], "ci_low": p["ci_low"], "ci_high": p["ci_high"]}
                        for p in score.get("pass_at_k") or []
                    ],
                    "categories": score.get("categories") or [],
                    "passed": score["passed"],
                    "failed": score["failed"],
                    "errored": score["errored"],
                    "cancelled": score["cancelled"],
                    **figures,
                    "final": bool(row["scores_final"]),
                }
            )
    totals = _totals(store, row)
    selection = submission.get("selection") or {}
    return {
        "benchmark_run": run_summary(row, base_url),
        "configuration": {
            "benchmark_name": submission.get("benchmark_name"),
            "benchmark_id": row["benchmark_id"],
            "resolved_version": submission.get("benchmark_version"),
            "resolved_digest": submission.get("benchmark_digest"),
            "task_filters": {k: v for k, v in selection.items() if v} or {"task_set": "all"},
            "config": submission.get("execution"),
            "resolved_secret_scopes": submission.get("secret_scopes") or {},
            "toml": submission.get("config_toml", ""),
        },
        "leaderboard_qualification": qualification(submission),
        "agents": agents,
        "progress": {"ingested": int(row["ingested"] or 0), "expected": int(row["expected"] or 0)},
        "totals": totals,
        "environments": environment_counts(row.get("environments")),
        "agent_metrics": metrics,
        "is_internal_user": False,
    }


def environment_counts(counts: dict[str, Any] | None) -> list[dict[str, Any]]:
    """Finished attempts by the environment that ran them, and how many of those ran without the task's
    own environment built (rm_runs.environments)."""
    return [
        {"environment": name, "attempts": int(entry["attempts"]), "not_built": int(entry["not_built"])}
        for name, entry in sorted((counts or {}).items())
    ]


def _agent_status(row: dict[str, Any], score: dict[str, Any] | None) -> str:
    if row["status"] in ("finished", "stopped", "failed"):
        return row["status"] if not (score and score.get("complete")) else "finished"
    return row["status"]


# A run's attempt counts by outcome, by (database, run id, rm_runs.ingested). Counting is an index scan
# of every attempt of the run (100k on a big run) per page view; but outcomes change only through
# AttemptFinished, whose handler also bumps the run's `ingested`, and the projection is deterministic, so
# the counts are a function of (run, ingested): a cached entry never goes stale. Each entry is computed
# with its `ingested` in one statement (one snapshot), so the pair is consistent.
_COUNTS: LRU[tuple[str, str, int], dict[str, int]] = LRU(1024)


def _count_by_outcome(run_id: str) -> Any:
    # The run's `ingested` as a scalar subquery: the same statement, so the same snapshot as the counts.
    # Filtering rm_attempts by the literal run id keeps ix_rm_attempts_run_outcome an index-only scan.
    ingested = select(t.runs.c.ingested).where(t.runs.c.id == run_id).scalar_subquery()
    return (
        select(ingested, t.attempts.c.outcome, func.count())
        .where(t.attempts.c.run_id == run_id, t.attempts.c.outcome.is_not(None))
        .group_by(t.attempts.c.outcome)
    )


def _outcome_counts(store: EventStore, run_id: str, ingested: int | None) -> dict[str, int]:
    cached = _COUNTS.get((store.url, run_id, ingested or 0))
    if cached is not None:
        return cached
    with store.read_engine.connect() as conn:
        rows = conn.execute(_count_by_outcome(run_id)).all()
    counts = {outcome: count for _, outcome, count in rows}
    if rows:
        _COUNTS.put((store.url, run_id, rows[0][0] or 0), counts)
    return counts


def _totals(store: EventStore, row: dict[str, Any]) -> dict[str, Any]:
    counts = _outcome_counts(store, row["id"], row["ingested"])
    return {
        "passed": counts.get("passed", 0),
        "failed": counts.get("failed", 0),
        "errored": counts.get("errored", 0),
        "cancelled": counts.get("cancelled", 0),
        "total_input_tokens": int(row["input_tokens"] or 0),
        "total_output_tokens": int(row["output_tokens"] or 0),
        "total_cost_usd": float(row["cost_usd"] or 0.0),
    }


def list_attempts(
    store: EventStore,
    scope: Scope,
    key: str,
    *,
    limit: int | None = None,
    offset: int = 0,
    task: str | None = None,
    agent_index: int | None = None,
    outcome: str | None = None,
) -> list[dict[str, Any]]:
    """The run's attempts in (task, agent, attempt) order: all of them by default; `limit`/`offset`
    page through them and the filters narrow them, so a run of 100k attempts need not be one response.
    The order is ix_rm_attempts_run_order's, so a page is an index range scan."""
    run = find_run(store, scope, key, _ID)
    query = select(t.attempts).where(t.attempts.c.run_id == run["id"])
    if task is not None:
        query = query.where(t.attempts.c.task == task)
    if agent_index is not None:
        query = query.where(t.attempts.c.agent_index == agent_index)
    if outcome is not None:
        query = query.where(t.attempts.c.outcome == outcome)
    query = query.order_by(t.attempts.c.task, t.attempts.c.agent_index, t.attempts.c.attempt_index)
    if limit is not None:
        query = query.limit(limit)
    if offset:
        query = query.offset(offset)
    with store.read_engine.connect() as conn:
        rows = conn.execute(query).mappings().all()
    return [
        {
            k: r[k]
            for k in (
                "attempt_id",
                "agent_index",
                "task",
                "attempt_index",
                "status",
                "outcome",
                "try_number",
                "scheduled_at",
                "started_at",
                "finished_at",
            )
        }
        | {"result": r["result"]}
        for r in rows
    ]


def attempts_page(
    store: EventStore,
    scope: Scope,
    key: str,
    *,
    limit: int | None = None,
    offset: int = 0,
    task: str | None = None,
    agent_index: int | None = None,
    outcome: str | None = None,
) -> dict[str, Any]:
    """GET /runs/{key}/attempts: `{"attempts": [...]}` as always; asked for a page (`limit` or `offset`),
    also `next_offset`, the offset of the next page or null after the last one."""
    filters = {"task": task, "agent_index": agent_index, "outcome": outcome}
    if limit is None and not offset:
        return {"attempts": list_attempts(store, scope, key, **filters)}
    # One row more than asked tells whether another page follows, without counting the run's attempts.
    rows = list_attempts(
        store, scope, key, limit=None if limit is None else limit + 1, offset=offset, **filters
    )
    more = limit is not None and len(rows) > limit
    rows = rows[:limit] if limit is not None else rows
    return {"attempts": rows, "next_offset": offset + len(rows) if more else None}


MAX_POSITION = 2**63 - 1  # the log's positions are BIGINT: a larger cursor overflows the database


def _log_cursor(cursor: str) -> int:
    """A cursor is a log position this API handed out: a positive integer that fits a BIGINT."""
    if not (cursor.isascii() and cursor.isdigit()) or len(cursor) > 19 or not 0 < int(cursor) <= MAX_POSITION:
        raise ApiError(
            400, f"cursor must be a log position (1..{MAX_POSITION})", code="VALIDATION", field="cursor"
        )
    return int(cursor)


def run_logs(store: EventStore, scope: Scope, key: str, limit: int, cursor: str | None) -> dict[str, Any]:
    """Newest page first, oldest first within a page (contract §2.8); the cursor is a position."""
    run = find_run(store, scope, key, _ID)
    query = select(t.run_logs).where(t.run_logs.c.run_id == run["id"])
    if cursor:
        query = query.where(t.run_logs.c.position < _log_cursor(cursor))
    with store.read_engine.connect() as conn:
        rows = conn.execute(query.order_by(t.run_logs.c.position.desc()).limit(limit + 1)).mappings().all()
    more = len(rows) > limit
    rows = list(reversed(rows[:limit]))
    logs = [
        {
            "timestamp": r["timestamp"],
            "level": r["level"],
            "step": r["step"],
            "message": r["message"],
            "details": r["details"],
        }
        for r in rows
    ]
    return {"logs": logs, "next_cursor": str(rows[0]["position"]) if more and rows else None}
