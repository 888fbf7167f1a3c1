"""What the leaderboard shows: the sorts it offers, its one ranking of rows (each naming its task set
and version) in rank order, and how a rank reads."""

from __future__ import annotations

from typing import Any

from pydantic import ValidationError
from regatta_shared.events import AgentSpec
from regatta_shared.eventstore import EventStore
from regatta_shared.rules import participants
from regatta_shared.rules.conditions import ScoringConditions, qualification
from sqlalchemy import select

from regatta_gateway.principals import Scope
from regatta_gateway.queries import leaderboards as leaderboard_queries
from regatta_gateway.queries.run_detail import ranking
from regatta_gateway.queries.run_exclusions import run_exclusions
from regatta_gateway.queries.run_rows import detail_columns, run_submissions
from regatta_gateway.readmodels import tables as t
from regatta_gateway.web.formatting import NONE
from regatta_gateway.web.labels import label

# The benchmark's latest runs a "Not ranked" list looks at: an agent's reason is its newest run's.
NOT_RANKED_RUNS = 100

SORTS: dict[str, str] = {
    "pass_at_1": "Pass@1",
    "pass_at_k": "Pass@k",
    "cost_per_task": "Cost / task",
    "time_per_task": "Time / task",
    "tokens_per_task": "Tokens / task",
}
HIGHER_IS_BETTER = ("pass_at_1", "pass_at_k")


def leaderboard(store: EventStore, benchmark: dict[str, Any], sort: str) -> list[dict[str, Any]]:
    """Every qualifying row in one ranking, in the chosen sort's rank order, each saying what it measures
    (task set, version: rows of different ones are ranked together but never tied)."""
    rows = leaderboard_queries.leaderboard_rows(store, benchmark["id"], sort)
    names: dict[str, str] = {}
    for row in rows:
        names[row.get("participant", "")] = row["label"]
        curve = row.get("pass_at_k") or []
        row["pass_at_k_last"] = curve[-1] if curve else None
        section = row["section"]
        task_set = section.get("task_set")
        row["task_set_label"] = "Full list" if task_set in (None, "full") else f"Recommended: {task_set}"
        version = section.get("version")
        earlier = bool(version and benchmark.get("version") and version != benchmark["version"])
        row["version_label"] = (version or "—") + (" (earlier)" if earlier else "")
    for row in rows:
        comparison = row.get("comparison")
        if comparison:
            row["top_label"] = names.get(comparison.get("top", ""), comparison.get("top", ""))
    return rows


def same_conditions(row: dict[str, Any], standard: dict[str, Any]) -> bool:
    """Whether a row was scored at the benchmark's standard conditions. Rows computed before a condition
    existed lack its key: they were scored at its default, which the model fills in."""
    try:
        return ScoringConditions.model_validate(row) == ScoringConditions.model_validate(standard)
    except ValidationError:
        return False


def rank_text(row: dict[str, Any]) -> str:
    """`1` or `1=` (the `=` marks a rank shared with another participant), as the CLI writes it too."""
    return participants.rank_text(row.get("rank"), bool(row.get("tied")), missing=NONE)


def not_ranked(
    store: EventStore, scope: Scope, benchmark_id: str, rows: list[dict[str, Any]]
) -> list[dict[str, Any]]:
    """Each participant of the workspace's latest runs of the benchmark that has no leaderboard row, with
    why its newest run does not rank (the run page's per-agent reason, queries.run_detail.ranking)."""
    ranked = {row.get("participant") for row in rows}
    columns = [c for c in detail_columns(store) if c.name in ("id", "name", "status", "scores")]
    query = (
        select(*columns)
        .where(t.runs.c.workspace_id == scope.workspace_id, t.runs.c.benchmark_id == benchmark_id)
        .order_by(t.runs.c.seq.desc())
        .limit(NOT_RANKED_RUNS)
    )
    with store.read_engine.connect() as conn:
        runs = [dict(run) for run in conn.execute(query).mappings()]
    submissions = run_submissions(store, [run["id"] for run in runs])
    found: dict[str, dict[str, Any] | None] = {}
    for run in runs:
        submission = submissions.get(run["id"]) or {}
        agents = submission.get("agents") or []
        scores = {s["agent_index"]: s for s in (run["scores"] or [])}
        run["benchmark_id"] = benchmark_id
        reasons = ranking(
            run["status"],
            qualification(submission),
            scores,
            [{"agent_index": a["index"]} for a in agents],
            run_exclusions(store, run, submission),
        )
        for agent, why in zip(agents, reasons["agents"], strict=True):
            try:
                spec = AgentSpec.model_validate(agent)
            except ValidationError:
                continue
            if spec.participant in ranked or spec.participant in found:
                continue
            if why["reason"] is None:
                found[spec.participant] = None  # its newest run ranks: the leaderboard is being recomputed
                continue
            found[spec.participant] = {
                "label": label(spec.harness, spec.participant_model),
                "run_id": run["id"],
                "run_name": run["name"],
                "status": run["status"],
                "reason": why["reason"],
            }
    return [entry for entry in found.values() if entry is not None]
