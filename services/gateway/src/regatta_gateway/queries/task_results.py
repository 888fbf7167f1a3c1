"""One task's results by agent across the workspace's runs of its benchmark: per participant (harness and
model, `regatta_shared.rules.participants`, the identity the leaderboard ranks), its attempts, how many were
scored and passed, its mean primary reward over scored attempts, and when it last ran the task."""

from __future__ import annotations

from typing import Any

from regatta_shared.eventstore import EventStore
from regatta_shared.rules.outcomes import PASSED, SCORED
from regatta_shared.rules.participants import agent_label, participant_key, stored_agent_model
from sqlalchemy import func, select

from regatta_gateway.principals import Scope
from regatta_gateway.queries.run_rows import run_submissions
from regatta_gateway.readmodels import tables as t


def results_by_agent(store: EventStore, scope: Scope, benchmark_id: str, task: str) -> list[dict[str, Any]]:
    a, r = t.attempts.c, t.runs.c
    at = func.coalesce(a.finished_at, a.started_at, a.scheduled_at, r.created_at)
    query = (
        select(a.run_id, a.agent_index, a.outcome, a.result, at.label("at"))
        .select_from(t.attempts.join(t.runs, a.run_id == r.id))
        .where(r.workspace_id == scope.workspace_id, r.benchmark_id == benchmark_id, a.task == task)
    )
    with store.read_engine.connect() as conn:
        rows = conn.execute(query).mappings().all()
    submissions = run_submissions(store, sorted({row["run_id"] for row in rows}))
    totals: dict[str, dict[str, Any]] = {}
    for row in rows:
        agents = {x["index"]: x for x in (submissions.get(row["run_id"]) or {}).get("agents") or []}
        agent = agents.get(row["agent_index"]) or {}
        harness, model = agent.get("harness", ""), stored_agent_model(agent)
        total = totals.setdefault(
            participant_key(harness, model),
            {"agent": agent_label(harness, model), "attempts": 0, "scored": 0, "passed": 0, "rewards": []},
        )
        total["attempts"] += 1
        if row["outcome"] in SCORED:
            total["scored"] += 1
            total["passed"] += row["outcome"] == PASSED
            reward = (row["result"] or {}).get("primary_reward")
            if isinstance(reward, int | float) and not isinstance(reward, bool):
                total["rewards"].append(float(reward))
        if row["at"] and (total.get("last_run_at") is None or row["at"] > total["last_run_at"]):
            total["last_run_at"] = row["at"]
    return sorted((_result(key, total) for key, total in totals.items()), key=lambda x: x["agent"])


def _result(key: str, total: dict[str, Any]) -> dict[str, Any]:
    rewards = total.pop("rewards")
    scored = total["scored"]
    return {
        "participant": key,
        **total,
        "last_run_at": total.get("last_run_at"),
        "pass_rate": total["passed"] / scored if scored else None,
        "mean_reward": sum(rewards) / len(rewards) if rewards else None,
    }
