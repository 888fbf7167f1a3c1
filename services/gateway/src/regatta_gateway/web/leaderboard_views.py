"""What the leaderboard shows: the sorts it offers, its one ranking of rows (each naming its task set
and version) in rank order, and how a rank reads."""

from __future__ import annotations

from typing import Any

from regatta_shared.eventstore import EventStore

from regatta_gateway.queries import leaderboards as leaderboard_queries
from regatta_gateway.web.labels import label

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
        row["label"] = label(row.get("harness"), row.get("model"))
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


def rank_text(row: dict[str, Any]) -> str:
    """`1` or `1=` (the `=` marks a rank shared with another participant)."""
    if row.get("rank") is None:
        return "—"
    return f"{row['rank']}{'=' if row.get('tied') else ''}"
