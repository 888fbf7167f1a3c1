"""What the run page shows: the run, each agent's progress and scores, the attempts (Task Results), the
charts (pass@k curve, cost against pass@1, categories) and the first page of logs."""

from __future__ import annotations

from collections import defaultdict
from typing import Any

from fastapi import FastAPI
from regatta_shared.eventstore import EventStore
from regatta_shared.rules.outcomes import ERRORED
from regatta_shared.rules.task_defects import attempt_is_task_defect
from regatta_shared.runs import TERMINAL, attempts_per_agent

from regatta_gateway.commands.annotations import SUGGESTED_LABELS
from regatta_gateway.principals import Scope
from regatta_gateway.queries import benchmarks as benchmark_queries
from regatta_gateway.queries import run_activity
from regatta_gateway.queries.run_detail import run_detail
from regatta_gateway.web import charts
from regatta_gateway.web.features import route_features
from regatta_gateway.web.formatting import elapsed
from regatta_gateway.web.integrity_views import integrity_view, policy_label
from regatta_gateway.web.labels import label, model_name


def run_page(store: EventStore, scope: Scope, key: str, base_url: str, app: FastAPI) -> dict[str, Any]:
    detail = run_detail(store, scope, key, base_url)
    run = detail["benchmark_run"]
    row = benchmark_queries.find_run(store, scope, run["id"])
    submission = row.get("submission") or {}
    execution = submission.get("execution") or {}
    n_tasks = len(submission.get("tasks") or [])
    per_agent = attempts_per_agent(submission)
    attempts = run_activity.list_attempts(store, scope, run["id"])
    metrics = {m["agent_index"]: m for m in detail.get("agent_metrics") or []}
    progress = _agent_progress(attempts)
    agents = []
    for index, agent in enumerate(detail.get("agents") or []):
        done = progress[agent["agent_index"]]
        agents.append(
            {
                **agent,
                "colour": charts.colour(index),
                "metric": metrics.get(agent["agent_index"]),
                "done": done["done"],
                "running": done["running"],
                "expected": per_agent,
                "first_started": done["first_started"],
                "last_finished": done["last_finished"] if done["done"] >= per_agent else None,
            }
        )
    labels = {a["agent_index"]: a["label"] for a in agents}
    terminal = run["status"] in TERMINAL
    return {
        "detail": detail,
        "run": run,
        "row": row,
        "reason": row.get("reason"),
        "stop_requested": bool(row.get("stop_requested")),
        "terminal": terminal,
        # Errored attempts a finished run offers to run again (commands/rerun.py): a task's own
        # defect would fail the same way, so it is not offered.
        "errored": sum(a.get("outcome") == ERRORED and not attempt_is_task_defect(a) for a in attempts),
        "execution": execution,
        "n_tasks": n_tasks,
        "agents": agents,
        "labels": labels,
        "scores_final": any((m or {}).get("final") for m in metrics.values()),
        "duration": elapsed(run.get("started_at"), run.get("completed_at")),
        "attempts": [_attempt_view(a, labels) for a in attempts],
        "not_built": _not_built(attempts),
        "tasks": sorted({a["task"] for a in attempts} | {t["name"] for t in submission.get("tasks") or []}),
        "curve": _curve(agents),
        "pareto": _pareto(agents),
        "categories": _categories(agents),
        "logs": run_activity.run_logs(store, scope, run["id"], 50, None),
        "routes": route_features(app),
        "suggested_labels": list(SUGGESTED_LABELS),
    }


def _agent_progress(attempts: list[dict[str, Any]]) -> dict[int, dict[str, Any]]:
    progress: dict[int, dict[str, Any]] = defaultdict(
        lambda: {"done": 0, "running": 0, "first_started": None, "last_finished": None}
    )
    for attempt in attempts:
        entry = progress[attempt["agent_index"]]
        if attempt.get("outcome"):
            entry["done"] += 1
        elif attempt.get("status") == "running":
            entry["running"] += 1
        started, finished = attempt.get("started_at"), attempt.get("finished_at")
        if started and (entry["first_started"] is None or started < entry["first_started"]):
            entry["first_started"] = started
        if finished and (entry["last_finished"] is None or finished > entry["last_finished"]):
            entry["last_finished"] = finished
    return progress


def _attempt_view(attempt: dict[str, Any], labels: dict[int, str]) -> dict[str, Any]:
    result = attempt.get("result") or {}
    timings = result.get("timings") or {}
    usage = result.get("usage") or {}
    seconds = timings.get("total")
    if seconds is None and attempt.get("started_at") and attempt.get("finished_at"):
        seconds = elapsed(attempt["started_at"], attempt["finished_at"])
    token_count = None
    if usage.get("input_tokens") is not None or usage.get("output_tokens") is not None:
        token_count = (usage.get("input_tokens") or 0) + (usage.get("output_tokens") or 0)
    artifacts = result.get("artifacts") or []
    return {
        **attempt,
        "agent": labels.get(attempt["agent_index"], f"agent {attempt['agent_index'] + 1}"),
        "state": attempt.get("outcome") or attempt.get("status") or "scheduled",
        "reward": result.get("primary_reward"),
        "rewards": result.get("rewards") or {},
        "exception_type": result.get("exception_type"),
        "exception_message": result.get("exception_message"),
        "timings": {k: v for k, v in timings.items() if v is not None},
        "usage": usage,
        "tokens": token_count,
        "seconds": seconds,
        "artifacts": artifacts,
        "trajectory": next((a for a in artifacts if a.get("path", "").endswith("trajectory.json")), None),
        "executor_id": result.get("executor_id"),
        "environment": result.get("environment"),
        "environment_built": result.get("environment_built"),
        "environment_note": result.get("environment_note"),
        "sandbox_seconds": result.get("sandbox_seconds"),
    }


def _not_built(attempts: list[dict[str, Any]]) -> dict[str, Any]:
    """Attempts that ran without their task's own environment built (say, under `local`), and their
    tasks: the run page says so above everything else (never silent)."""
    affected = [a for a in attempts if (a.get("result") or {}).get("environment_built") is False]
    return {
        "attempts": len(affected),
        "tasks": len({a["task"] for a in affected}),
        "environments": sorted({str(a["result"].get("environment")) for a in affected}),
    }


def _curve(agents: list[dict[str, Any]]) -> str | None:
    """Shown once some agent has at least two attempts per task (a curve of one point says nothing)."""
    series = []
    for agent in agents:
        points = [
            charts.CurvePoint(p["k"], p["value"], p.get("ci_low"), p.get("ci_high"))
            for p in (agent["metric"] or {}).get("pass_at_k") or []
            if p.get("value") is not None
        ]
        if points:
            series.append(charts.Series(agent["label"], agent["colour"], points))
    if not any(len(s.points) > 1 for s in series):
        return None
    return charts.pass_at_k_curve(series)


def _pareto(agents: list[dict[str, Any]]) -> dict[str, Any]:
    points, missing = [], []
    for agent in agents:
        metric = agent["metric"] or {}
        value = (metric.get("pass_at_1") or {}).get("value")
        cost = metric.get("cost_per_task")
        if value is None:
            continue
        if cost is None:
            missing.append(agent["label"])
        else:
            key = str(agent["agent_index"] + 1)
            point = charts.ScatterPoint(agent["label"], agent["colour"], float(cost), float(value), key)
            points.append(point)
    frontier = {p.label for p in charts.pareto_frontier(points)}
    legend = [
        {"key": p.key, "label": p.label, "colour": p.colour, "cost": p.cost, "value": p.value}
        | {"frontier": p.label in frontier}
        for p in points
    ]
    return {"svg": charts.cost_vs_pass(points) if points else None, "legend": legend, "missing": missing}


def _categories(agents: list[dict[str, Any]]) -> dict[str, Any]:
    names: list[str] = []
    cells: dict[tuple[str, int], dict[str, Any]] = {}
    sizes: dict[str, int] = {}
    for agent in agents:
        for entry in (agent["metric"] or {}).get("categories") or []:
            name = entry.get("category") or "—"
            if name not in names:
                names.append(name)
            sizes[name] = entry.get("n_tasks") or (entry.get("pass_at_1") or {}).get("n") or 0
            cells[(name, agent["agent_index"])] = entry.get("pass_at_1") or {}
    return {"names": sorted(names), "cells": cells, "sizes": sizes}


def attempt_page(store: EventStore, scope: Scope, key: str, attempt_id: str) -> dict[str, Any]:
    attempt = run_activity.attempt_detail(store, scope, key, attempt_id)
    run = benchmark_queries.find_run(store, scope, attempt["run_id"])
    submission = run.get("submission") or {}
    agents = submission.get("agents") or []
    agent = agents[attempt["agent_index"]] if attempt["agent_index"] < len(agents) else {}
    harness = agent.get("harness") or f"agent {attempt['agent_index'] + 1}"
    agent_label = label(harness, model_name(agent.get("model")))
    return {
        "attempt": attempt,
        "run": {"id": run["id"], "name": run["name"], "benchmark_id": run.get("benchmark_id")},
        "agent_label": agent_label,
        "state": attempt.get("outcome") or attempt.get("status") or "scheduled",
        # The run's policy: what the evidence below was recorded under, or will be.
        "policy": policy_label((submission.get("execution") or {}).get("verifier_integrity")),
        "integrity": integrity_view((attempt.get("result") or {}).get("integrity")),
        "labels": attempt["labels"],
        "suggested_labels": list(SUGGESTED_LABELS),
        # The key the primary reward was taken from (queries/grading.py marks it among the rewards).
        "primary_key": submission.get("primary_reward_key"),
    }
