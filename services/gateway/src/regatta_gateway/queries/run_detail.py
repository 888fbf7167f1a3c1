"""One run in full, shaped as the contract's BenchmarkRunDetail (§4.5): configuration, agents, their
metrics, progress, totals by outcome (cached per ingested count) and environments."""

from __future__ import annotations

from typing import Any

from regatta_shared.eventstore import EventStore
from regatta_shared.rules.conditions import qualification
from regatta_shared.rules.outcomes import UNSCORED
from regatta_shared.rules.participants import agent_label, stored_agent_model
from regatta_shared.rules.per_task import per_task_figures
from regatta_shared.runs.status import ENDED_EARLY, FAILED, FINISHED, STOPPED, TERMINAL
from sqlalchemy import func, select

from regatta_gateway.principals import Scope
from regatta_gateway.queries.benchmarks import find_run
from regatta_gateway.queries.cached_reads import LRU
from regatta_gateway.queries.integrity import no_counts, run_agent_counts
from regatta_gateway.queries.run_exclusions import Exclusions, run_exclusions
from regatta_gateway.queries.run_rows import detail_columns, run_submissions
from regatta_gateway.queries.runs import run_summary
from regatta_gateway.queries.runtoml import run_toml
from regatta_gateway.readmodels import tables as t


def run_detail(store: EventStore, scope: Scope, key: str, base_url: str = "") -> dict[str, Any]:
    row = find_run(store, scope, key, detail_columns(store))
    row["submission"] = run_submissions(store, [row["id"]]).get(row["id"])
    submission = row["submission"] or {}
    scores = {s["agent_index"]: s for s in (row["scores"] or [])}
    agents = []
    metrics = []
    integrity = run_agent_counts(store, row["id"], row["ingested"], row["expected"])
    for agent in submission.get("agents") or []:
        index = agent["index"]
        agent_id = f"{row['id']}:{index}"
        score = scores.get(index)
        # Per-attempt means, also for scores recorded when cost/tokens per task were per-task sums.
        figures = per_task_figures(score) if score else {}
        model = stored_agent_model(agent)
        agents.append(
            {
                "id": agent_id,
                "agent_index": index,
                "harness": agent["harness"],
                "model": model,
                "label": agent_label(agent["harness"], model),
                "model_ref": agent["model"],
                "status": _agent_status(row, score),
                "environment_variables": agent.get("env") or {},
                "aggregates": {
                    "reported_cost_usd": score.get("cost_usd") if score else None,
                    "mean_duration_seconds": figures.get("mean_duration_seconds"),
                    "tokens_per_task": figures.get("tokens_per_task"),
                },
                # Attempts with integrity evidence worth a look (queries/integrity.py).
                "integrity": integrity.get(index, no_counts()),
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
            # Written from the submission on every read, not the text stored with it: runs recorded when
            # that text held derived keys (benchmark_id, resolved_version, …) then resubmit as is too.
            "toml": run_toml(submission) if submission else "",
        },
        "leaderboard_qualification": ranking(
            row["status"], qualification(submission), scores, agents, run_exclusions(store, row, submission)
        ),
        "agents": agents,
        "progress": {"ingested": int(row["ingested"] or 0), "expected": int(row["expected"] or 0)},
        "totals": totals,
        "environments": environment_counts(row.get("environments")),
        "agent_metrics": metrics,
        "is_internal_user": False,
    }


def ranking(
    status: str,
    qualifies: dict[str, Any],
    scores: dict[int, dict[str, Any]],
    agents: list[dict[str, Any]],
    exclusions: Exclusions | None = None,
) -> dict[str, Any]:
    """The run's qualification with, for its status and per agent, whether it ranks and why not: the
    leaderboard takes a finished run's agents that have every attempt scored (scoring's leaderboard.py),
    but for the attempts of tasks excluded from its version (`exclusions`), which it is scored without."""
    if not qualifies["qualifies"]:
        summary = "Not ranked on the leaderboard: its conditions or task selection differ from the standard."
    elif status == FINISHED:
        summary = "Qualifies: its agents with every attempt scored rank on the leaderboard."
    elif status == STOPPED:
        summary = "Not ranked: the run was stopped before every attempt finished."
    elif status == FAILED:
        summary = "Not ranked: the run failed."
    else:
        summary = "Qualifies: ranks once finished with every attempt scored."
    excluded = exclusions.tasks if exclusions else {}
    per_agent = []
    for agent in agents:
        score = scores.get(agent["agent_index"])
        if exclusions:
            unscored = exclusions.unscored.get(agent["agent_index"], {})
        else:
            unscored = {kind: score[kind] for kind in UNSCORED if score and score.get(kind)}
        reason = None
        if not qualifies["qualifies"]:
            reason = "; ".join(qualifies["reasons"])
        elif status in ENDED_EARLY:
            reason = f"the run {status}"
        elif status != FINISHED:
            reason = "the run has not finished"
        elif score is None or unscored or not (score.get("complete") or excluded):
            missing = " and ".join(f"{count} {kind}" for kind, count in unscored.items())
            reason = f"{missing} attempts have no score" if missing else "not every attempt is scored"
        per_agent.append({"agent_index": agent["agent_index"], "ranks": reason is None, "reason": reason})
    excluded_tasks = [{"task": task, "reason": why} for task, why in sorted(excluded.items())]
    return {**qualifies, "summary": summary, "agents": per_agent, "excluded_tasks": excluded_tasks}


def environment_counts(counts: dict[str, Any] | None) -> list[dict[str, Any]]:
    """Finished attempts by the environment that ran them, and how many of those ran without the task's
    own environment built (rm_runs.environments)."""
    return [
        {"environment": name, "attempts": int(entry["attempts"]), "not_built": int(entry["not_built"])}
        for name, entry in sorted((counts or {}).items())
    ]


def _agent_status(row: dict[str, Any], score: dict[str, Any] | None) -> str:
    if row["status"] in TERMINAL:
        return row["status"] if not (score and score.get("complete")) else FINISHED
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
