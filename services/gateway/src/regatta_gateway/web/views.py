"""What each page shows, assembled from the gateway's own query functions (the same ones `/api/v1` uses).

Nothing here reads events or writes anything: pages are views of the read models, shaped for templates.
"""

from __future__ import annotations

import re
from collections import defaultdict
from typing import Any
from urllib.parse import urlencode

from fastapi import FastAPI
from regatta_shared.eventstore import EventStore
from regatta_shared.runs import TERMINAL, attempts_per_agent
from sqlalchemy import select

from regatta_gateway.http.auth import Scope
from regatta_gateway.queries import benchmarks as benchmark_queries
from regatta_gateway.queries import leaderboards as leaderboard_queries
from regatta_gateway.queries import run_activity
from regatta_gateway.queries import runs as run_queries
from regatta_gateway.queries.run_detail import run_detail
from regatta_gateway.readmodels import tables as t
from regatta_gateway.web import charts
from regatta_gateway.web.formatting import elapsed, parse_time

SORTS: dict[str, str] = {
    "pass_at_1": "Pass@1",
    "pass_at_k": "Pass@k",
    "cost_per_task": "Cost / task",
    "time_per_task": "Time / task",
    "tokens_per_task": "Tokens / task",
}
HIGHER_IS_BETTER = ("pass_at_1", "pass_at_k")
OUTCOMES = ("passed", "failed", "errored", "cancelled")


# --- benchmarks -----------------------------------------------------------------------------------


def benchmark_rows(store: EventStore, scope: Scope) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = []
    offset = 0
    while True:  # pages of 200, the API's maximum, so a big workspace still lists everything
        page = benchmark_queries.list_benchmarks(store, scope, 200, offset)
        rows += page["benchmarks"]
        if not page["has_more"]:
            return rows
        offset = page["next_offset"]


def is_syncing(benchmark: dict[str, Any]) -> bool:
    return benchmark.get("sync_status") in ("pending", "syncing")


def benchmark_source(store: EventStore, scope: Scope, key: str) -> dict[str, Any]:
    """The stored source of a benchmark (registry path, dataset, version or folder) for "View source"."""
    row = benchmark_queries.find_benchmark(store, scope, key)
    source = dict(row.get("source") or {})
    source.setdefault("type", row["source_type"])
    source.setdefault("ref", row["source_ref"])
    return {k: v for k, v in source.items() if v not in (None, "", [], {})}


def is_url(value: Any) -> bool:
    return isinstance(value, str) and bool(re.match(r"^https?://", value))


RUNS_PAGE = 50


def runs_of(
    store: EventStore,
    scope: Scope,
    benchmark_id: str,
    base_url: str,
    *,
    page: int = 1,
    status: str | None = None,
    submitter: str | None = None,
) -> dict[str, Any]:
    """One page of the benchmark's runs (newest first) with the filters applied, and what the pager
    and the filter form need."""
    status = status if status in run_queries.RUN_STATUSES else None
    page = max(1, page)
    listed = run_queries.list_runs(
        store,
        scope,
        RUNS_PAGE,
        (page - 1) * RUNS_PAGE,
        benchmark_id,
        base_url,
        status=status,
        submitter=submitter or None,
    )
    runs = listed["benchmark_runs"]
    agents = _agent_names(store, [r["id"] for r in runs])
    for run in runs:
        run["agent_names"] = agents.get(run["id"], [])
        run["selection_text"] = selection_text(run["task_selection"])
    total = listed["total_count"]
    first = (page - 1) * RUNS_PAGE + 1
    return {
        "rows": runs,
        "total": total,
        "page": page,
        "pages": max(1, -(-total // RUNS_PAGE)),
        "first": first if runs else 0,
        "last": first + len(runs) - 1 if runs else 0,
        "status": status or "",
        "submitter": submitter or "",
        "statuses": run_queries.RUN_STATUSES,
        "submitters": run_queries.run_submitters(store, scope, benchmark_id),
    }


def page_query(current: dict[str, str], **changes: Any) -> str:
    """`?a=1&b=2`: the page's own query string (fragment requests aside) with `changes`, empty values
    dropped, so pager and filter links keep the sort and the other filters."""
    merged = {k: v for k, v in current.items() if k != "fragment"}
    merged.update({k: str(v) for k, v in changes.items()})
    return "?" + urlencode({k: v for k, v in merged.items() if v not in ("", None)})


def plural(count: int, word: str) -> str:
    return f"{count} {word}{'' if count == 1 else 's'}"


def selection_text(selection: dict[str, Any]) -> str:
    """A run's task selection in words, as the runs list shows it."""
    count = plural(int(selection.get("task_count") or 0), "task")
    kind = selection.get("kind")
    if kind == "task_set":
        return f"Set {selection.get('task_set')} · {count}"
    if kind == "categories":
        categories = selection.get("categories") or []
        word = "Category" if len(categories) == 1 else "Categories"
        return f"{word} {', '.join(categories)} · {count}"
    if kind == "task_names":
        names = selection.get("task_names") or []
        more = int(selection.get("task_name_count") or len(names)) - len(names)
        return f"Named: {', '.join(names)}{f' and {more} more' if more > 0 else ''} · {count}"
    return f"All · {count}"


def _agent_names(store: EventStore, run_ids: list[str]) -> dict[str, list[str]]:
    if not run_ids:
        return {}
    with store.read_engine.connect() as conn:
        rows = conn.execute(select(t.runs.c.id, t.runs.c.submission).where(t.runs.c.id.in_(run_ids))).all()
    return {run_id: [agent_label(a) for a in (sub or {}).get("agents") or []] for run_id, sub in rows}


def agent_label(agent: dict[str, Any]) -> str:
    """An agent of a submission (AgentSpec as stored), labelled as everywhere else (`label`)."""
    return label(agent.get("harness"), model_name(agent.get("model")))


def model_name(model: Any) -> str:
    """ModelSpec.display_name of a stored model spec: `base:lora` for a hosted LoRA, else the model."""
    if not isinstance(model, dict):
        return str(model or "")
    if model.get("type") == "hosted" or (model.get("base_model") and not model.get("model")):
        base, lora = model.get("base_model") or "", model.get("lora_model_name") or ""
        return f"{base}:{lora}" if lora else base
    return str(model.get("model") or "")


def label(harness: Any, model: Any) -> str:
    """The one way every page names an agent: `harness · model` (the leaderboard's participant)."""
    harness = str(harness or "default")
    return f"{harness} · {model}" if model else harness


# --- leaderboard ----------------------------------------------------------------------------------


def leaderboard(store: EventStore, benchmark: dict[str, Any], sort: str) -> list[dict[str, Any]]:
    """The leaderboard's sections (full task list, recommended set; per version and conditions), each
    with its rows in the chosen sort's rank order and a title saying what it measures."""
    rows = leaderboard_queries.leaderboard_rows(store, benchmark["id"], sort)
    names: dict[str, str] = {}
    for row in rows:
        row["label"] = label(row.get("harness"), row.get("model"))
        names[row.get("participant", "")] = row["label"]
        curve = row.get("pass_at_k") or []
        row["pass_at_k_last"] = curve[-1] if curve else None
    for row in rows:
        comparison = row.get("comparison")
        if comparison:
            row["top_label"] = names.get(comparison.get("top", ""), comparison.get("top", ""))
    sections = leaderboard_queries.leaderboard_sections(rows)
    for section in sections:
        task_set = section.get("task_set")
        section["title"] = "Full task list" if task_set in (None, "full") else f"Recommended set: {task_set}"
        count = len(section["rows"])
        notes = [f"{count} agent{'' if count == 1 else 's'}"]
        if section.get("version"):
            earlier = benchmark.get("version") and section["version"] != benchmark.get("version")
            notes.append(f"version {section['version']}" + (" (earlier)" if earlier else ""))
        section["note"] = " · ".join(notes)
    return sections


def rank_text(row: dict[str, Any]) -> str:
    """`1` or `1=` (the `=` marks a rank shared with another participant)."""
    if row.get("rank") is None:
        return "—"
    return f"{row['rank']}{'=' if row.get('tied') else ''}"


# --- run page -------------------------------------------------------------------------------------


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
        name = label(agent["harness"], model_name(agent.get("model_ref")) or agent.get("model"))
        done = progress[agent["agent_index"]]
        agents.append(
            {
                **agent,
                "label": name,
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
        "execution": execution,
        "n_tasks": n_tasks,
        "agents": agents,
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


# --- which optional API routes exist --------------------------------------------------------------


DOWNLOADS_ROUTE = "/api/v1/runs/{key}/downloads"
SECRETS_ROUTE = "/api/v1/secrets"


def route_features(app: FastAPI) -> dict[str, Any]:
    """Secrets and downloads belong to another part of the gateway: the UI links them only if registered.

    The downloads route answers a manifest of the run's files (summary, results, logs, artifacts) with a
    signed URL each; artifact links and trajectories in Task Results are read through it as well.
    """
    # The OpenAPI document lists every /api/v1 route whatever way routers were included (and is cached).
    paths = app.openapi().get("paths", {})

    def has(path: str, method: str) -> bool:
        return method in paths.get(path, {})

    return {
        "secrets": has(SECRETS_ROUTE, "get") and has(SECRETS_ROUTE, "post"),
        "downloads": DOWNLOADS_ROUTE if has(DOWNLOADS_ROUTE, "get") else None,
    }


# --- secrets (names only: values never reach the read models) --------------------------------------


def secret_names(store: EventStore, scope: Scope) -> list[dict[str, Any]]:
    """Secret records this user can use: every workspace record and the user's personal ones."""
    with store.read_engine.connect() as conn:
        rows = (
            conn.execute(
                select(t.secrets)
                .where(t.secrets.c.workspace_id == scope.workspace_id)
                .order_by(t.secrets.c.name, t.secrets.c.scope)
            )
            .mappings()
            .all()
        )
    return [
        {
            "id": r["id"],
            "name": r["name"],
            "scope": r["scope"],
            "updated_at": r["updated_at"] or r["created_at"],
            "updater_name": r["updater_name"] or r["creator_name"],
        }
        for r in rows
        if r["scope"] == "workspace" or r["owner_user_id"] == scope.principal.user_id
    ]


def newest_first(values: list[str | None]) -> str | None:
    parsed = [(parse_time(v), v) for v in values if v]
    return max(parsed)[1] if parsed else None
