"""Run reads shaped as the contract's BenchmarkRun (§4.3) and BenchmarkRunDetail (§4.5)."""

from __future__ import annotations

from typing import Any

from regatta_shared.eventstore import EventStore
from sqlalchemy import func, select

from .auth import Scope
from .queries import find_run, page
from .readmodels import tables as t


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
        "ingested_results": int(row["ingested"] or 0),
        "expected_results": int(row["expected"] or 0),
    }
    if row["creator_email"]:
        body["creator_email"] = row["creator_email"]
    if row["started_at"]:
        body["started_at"] = row["started_at"]
    if row["completed_at"]:
        body["completed_at"] = row["completed_at"]
    if best is not None:
        body["best_pass_at_1"] = best
    if base_url:
        body["platform_url"] = f"{base_url}/benchmarks/runs/{row['id']}"
    return body


def list_runs(
    store: EventStore, scope: Scope, limit: int, offset: int, benchmark: str | None = None, base_url: str = ""
) -> dict[str, Any]:
    where = [t.runs.c.workspace_id == scope.workspace_id]
    if benchmark:
        where.append(t.runs.c.benchmark_id == benchmark)
    with store.read_engine.connect() as conn:
        total = conn.execute(select(func.count()).select_from(t.runs).where(*where)).scalar_one()
        rows = (
            conn.execute(
                select(t.runs).where(*where).order_by(t.runs.c.seq.desc()).limit(limit).offset(offset)
            )
            .mappings()
            .all()
        )
    return page("benchmark_runs", [run_summary(dict(r), base_url) for r in rows], total, limit, offset)


def run_detail(store: EventStore, scope: Scope, key: str, base_url: str = "") -> dict[str, Any]:
    row = find_run(store, scope, key)
    submission = row["submission"] or {}
    scores = {s["agent_index"]: s for s in (row["scores"] or [])}
    agents = []
    metrics = []
    for agent in submission.get("agents") or []:
        index = agent["index"]
        agent_id = f"{row['id']}:{index}"
        score = scores.get(index)
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
                    "mean_duration_seconds": score.get("mean_duration_seconds") if score else None,
                    "tokens_per_task": score.get("tokens_per_task") if score else None,
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
                    "cost_per_task": score.get("cost_per_task"),
                    "mean_duration_seconds": score.get("mean_duration_seconds"),
                    "tokens_per_task": score.get("tokens_per_task"),
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
        "agents": agents,
        "progress": {"ingested": int(row["ingested"] or 0), "expected": int(row["expected"] or 0)},
        "totals": totals,
        "agent_metrics": metrics,
        "is_internal_user": False,
    }


def _agent_status(row: dict[str, Any], score: dict[str, Any] | None) -> str:
    if row["status"] in ("finished", "stopped", "failed"):
        return row["status"] if not (score and score.get("complete")) else "finished"
    return row["status"]


def _totals(store: EventStore, row: dict[str, Any]) -> dict[str, Any]:
    with store.read_engine.connect() as conn:
        counts = dict(
            conn.execute(
                select(t.attempts.c.outcome, func.count())
                .where(t.attempts.c.run_id == row["id"], t.attempts.c.outcome.is_not(None))
                .group_by(t.attempts.c.outcome)
            ).all()
        )
    return {
        "passed": counts.get("passed", 0),
        "failed": counts.get("failed", 0),
        "errored": counts.get("errored", 0),
        "cancelled": counts.get("cancelled", 0),
        "total_input_tokens": int(row["input_tokens"] or 0),
        "total_output_tokens": int(row["output_tokens"] or 0),
        "total_cost_usd": float(row["cost_usd"] or 0.0),
    }


def list_attempts(store: EventStore, scope: Scope, key: str) -> list[dict[str, Any]]:
    run = find_run(store, scope, key)
    with store.read_engine.connect() as conn:
        rows = (
            conn.execute(
                select(t.attempts)
                .where(t.attempts.c.run_id == run["id"])
                .order_by(t.attempts.c.task, t.attempts.c.agent_index, t.attempts.c.attempt_index)
            )
            .mappings()
            .all()
        )
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


def run_logs(store: EventStore, scope: Scope, key: str, limit: int, cursor: str | None) -> dict[str, Any]:
    """Newest page first, oldest first within a page (contract §2.8); the cursor is a position."""
    run = find_run(store, scope, key)
    query = select(t.run_logs).where(t.run_logs.c.run_id == run["id"])
    if cursor:
        try:
            query = query.where(t.run_logs.c.position < int(cursor))
        except ValueError:
            from .errors import ApiError

            raise ApiError(400, "cursor is invalid", field="cursor") from None
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
