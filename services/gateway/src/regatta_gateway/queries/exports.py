"""Run outputs as files: summary.csv (one row per agent), results.csv (one row per attempt), logs.txt.

Pure functions of read-model shapes, so the CLI downloads, /api/v1 and the web UI export the same bytes:
- `submission`: a RunSubmitted payload (rm_runs.submission);
- `scores`: RunScored agents (rm_runs.scores), [] before the first score;
- `attempts`: rows shaped like run_activity.list_attempts (with `result` = the AttemptFinished payload);
- `logs`: LogEntry rows (run_activity.run_logs), oldest first.
Agents and attempts are numbered from 1, as in the logs and the web UI.
"""

from __future__ import annotations

import json
from typing import Any

from regatta_shared.rules.outcomes import OUTCOMES
from regatta_shared.rules.participants import stored_agent_model
from regatta_shared.rules.per_task import per_task_figures
from regatta_shared.runs import integrity_columns
from regatta_shared.security.csv_export import csv_text

SUMMARY_COLUMNS = [
    "agent",
    "harness",
    "model",
    "n_tasks",
    "attempts_per_task",
    "pass_at_1",
    "pass_at_1_ci_low",
    "pass_at_1_ci_high",
    "pass_at_1_n",
    "k",
    "pass_at_k",
    "pass_at_k_ci_low",
    "pass_at_k_ci_high",
    "rank",
    "tied",
    *OUTCOMES,  # how many attempts ended so, each
    "input_tokens",
    "output_tokens",
    "tokens_per_task",
    "cost_usd",
    "cost_per_task_usd",
    "time_per_task_seconds",
    "final",
]
RESULTS_COLUMNS = [
    "task",
    "category",
    "agent",
    "harness",
    "model",
    "attempt",
    "attempt_id",
    "status",
    "outcome",
    "primary_reward",
    "rewards",
    "try_number",
    "started_at",
    "finished_at",
    "duration_seconds",
    "input_tokens",
    "output_tokens",
    "cost_usd",
    "exception_type",
    "exception_message",
    "executor_id",
    "environment",
    "environment_built",
    "environment_note",
    "artifact_count",
    # What the platform saw before the verifier ran (docs/runs.md, Verifier integrity): `checked`, `not
    # checked`, or empty where the environment does not look; then the counts (numbers only: the paths
    # and names, an attacker's text, are on the attempt's page and in the API, never in a cell).
    "integrity",
    "integrity_unexplained",
    "integrity_processes_alive",
    "integrity_verifier_writes",
    "labels",
    "label_notes",
]


def _cell(value: Any) -> Any:
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (dict, list)):
        return json.dumps(value, sort_keys=True, separators=(",", ":"))
    return value


def _write(columns: list[str], rows: list[dict[str, Any]]) -> str:
    return csv_text(columns, ([_cell(row.get(column)) for column in columns] for row in rows))


def summary_csv(submission: dict[str, Any], scores: list[dict[str, Any]], final: bool = False) -> str:
    by_index = {score["agent_index"]: score for score in scores or []}
    attempts = (submission.get("execution") or {}).get("attempts_per_task")
    rows = []
    for agent in submission.get("agents") or []:
        score = by_index.get(agent["index"]) or {}
        figures = per_task_figures(score)
        one = score.get("pass_at_1") or {}
        curve = score.get("pass_at_k") or []
        last = curve[-1] if curve else {}
        rows.append(
            {
                "agent": agent["index"] + 1,
                "harness": agent["harness"],
                "model": stored_agent_model(agent),
                "n_tasks": len(submission.get("tasks") or []),
                "attempts_per_task": attempts,
                "pass_at_1": one.get("value"),
                "pass_at_1_ci_low": one.get("ci_low"),
                "pass_at_1_ci_high": one.get("ci_high"),
                "pass_at_1_n": one.get("n"),
                "k": last.get("k"),
                "pass_at_k": last.get("value"),
                "pass_at_k_ci_low": last.get("ci_low"),
                "pass_at_k_ci_high": last.get("ci_high"),
                "rank": score.get("rank"),
                "tied": score.get("tied") if score else None,
                "passed": score.get("passed", 0),
                "failed": score.get("failed", 0),
                "errored": score.get("errored", 0),
                "cancelled": score.get("cancelled", 0),
                "input_tokens": score.get("input_tokens", 0),
                "output_tokens": score.get("output_tokens", 0),
                "tokens_per_task": figures["tokens_per_task"],
                "cost_usd": score.get("cost_usd"),
                "cost_per_task_usd": figures["cost_per_task"],
                "time_per_task_seconds": figures["mean_duration_seconds"],
                "final": final,
            }
        )
    return _write(SUMMARY_COLUMNS, rows)


def results_csv(submission: dict[str, Any], attempts: list[dict[str, Any]]) -> str:
    agents = {agent["index"]: agent for agent in submission.get("agents") or []}
    categories = {task["name"]: task.get("category") for task in submission.get("tasks") or []}
    rows = []
    for attempt in attempts:
        agent = agents.get(attempt["agent_index"]) or {"harness": "", "model": {}}
        result = attempt.get("result") or {}
        usage = result.get("usage") or {}
        seen = integrity_columns(result)
        checked = seen["integrity_checked"]
        rows.append(
            {
                "task": attempt["task"],
                "category": categories.get(attempt["task"]),
                "agent": attempt["agent_index"] + 1,
                "harness": agent["harness"],
                "model": stored_agent_model(agent),
                "attempt": attempt["attempt_index"] + 1,
                "attempt_id": attempt["attempt_id"],
                "status": attempt.get("status"),
                "outcome": attempt.get("outcome"),
                "primary_reward": result.get("primary_reward"),
                "rewards": result.get("rewards"),
                "try_number": attempt.get("try_number"),
                "started_at": result.get("started_at") or attempt.get("started_at"),
                "finished_at": result.get("finished_at") or attempt.get("finished_at"),
                "duration_seconds": (result.get("timings") or {}).get("total"),
                "input_tokens": usage.get("input_tokens"),
                "output_tokens": usage.get("output_tokens"),
                "cost_usd": usage.get("cost_usd"),
                "exception_type": result.get("exception_type"),
                "exception_message": result.get("exception_message"),
                "executor_id": result.get("executor_id"),
                "environment": result.get("environment"),
                "environment_built": result.get("environment_built"),
                "environment_note": result.get("environment_note"),
                "artifact_count": len(result.get("artifacts") or []),
                "integrity": None if checked is None else ("checked" if checked else "not checked"),
                "integrity_unexplained": seen["integrity_unexplained"],
                "integrity_processes_alive": seen["integrity_processes"],
                "integrity_verifier_writes": seen["integrity_writes"],
                "labels": "; ".join(x["label"] for x in attempt.get("labels") or []),
                "label_notes": " | ".join(
                    f"{x['label']}: {x['note']}" for x in attempt.get("labels") or [] if x.get("note")
                ),
            }
        )
    return _write(RESULTS_COLUMNS, rows)


def logs_txt(logs: list[dict[str, Any]]) -> str:
    return "".join(
        f"{entry.get('timestamp') or ''} {(entry.get('level') or '').upper():<7} "
        f"[{entry.get('step') or ''}] {entry.get('message') or ''}\n"
        for entry in logs
    )
