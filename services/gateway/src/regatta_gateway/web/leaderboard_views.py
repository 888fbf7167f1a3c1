"""What the leaderboard shows: the sorts it offers, its sections (task list or recommended set, per
version) with rows in rank order, and how a rank reads."""

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
