"""Run lists, each run shaped as the contract's BenchmarkRun (§4.3): a workspace's or a benchmark's runs,
newest first and filtered, their task selections in brief, and who submitted them."""

from __future__ import annotations

from typing import Any

from regatta_shared.eventstore import EventStore
from regatta_shared.runs.status import ENDED_EARLY
from sqlalchemy import func, or_, select

from regatta_gateway.principals import Scope
from regatta_gateway.queries.benchmarks import page
from regatta_gateway.queries.run_rows import detail_columns, run_submissions
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
    if row.get("reason") and row["status"] in ENDED_EARLY:
        body["status_reason"] = row["reason"]
    if best is not None:
        body["best_pass_at_1"] = best
    if base_url:
        body["platform_url"] = f"{base_url}/benchmarks/runs/{row['id']}"
    return body


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
    """Newest first. `status` one of runs.status.RUN_STATUSES; `submitter` a user's name or email, exactly."""
    where = [t.runs.c.workspace_id == scope.workspace_id]
    if benchmark:
        where.append(t.runs.c.benchmark_id == benchmark)
    if status:
        where.append(t.runs.c.status == status)
    if submitter:
        where.append(or_(t.runs.c.created_by == submitter, t.runs.c.creator_email == submitter))
    with store.read_engine.connect() as conn:
        total = conn.execute(select(func.count()).select_from(t.runs).where(*where)).scalar_one()
        query = select(*detail_columns(store)).where(*where).order_by(t.runs.c.seq.desc())
        rows = [dict(r) for r in conn.execute(query.limit(limit).offset(offset)).mappings()]
    submissions = run_submissions(store, [r["id"] for r in rows])
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
