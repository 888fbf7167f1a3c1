"""Leaderboard reads: a benchmark's leaderboard rows, one ranking in the chosen sort's rank order (each row
naming its comparison group: version, full list or recommended set, conditions), and
GET /benchmarks/{key}/leaderboard's body, cached per LeaderboardComputed."""

from __future__ import annotations

from typing import Any

from regatta_shared.eventstore import EventStore
from regatta_shared.rules import participants
from sqlalchemy import select

from regatta_gateway.errors import Invalid
from regatta_gateway.queries.cached_reads import VersionedBodies
from regatta_gateway.queries.integrity import agent_counts, no_counts
from regatta_gateway.readmodels import tables as t


def leaderboard_rows(store: EventStore, benchmark_id: str, sort: str = "pass_at_1") -> list[dict[str, Any]]:
    with store.read_engine.connect() as conn:
        row = conn.execute(
            select(t.leaderboards.c.rows).where(t.leaderboards.c.benchmark_id == benchmark_id)
        ).first()
    rows = list(row[0]) if row else []
    return sort_leaderboard(with_integrity(store, rows), sort)


def with_integrity(store: EventStore, rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Each row with `integrity`: how many of its run's attempts for its agent had unexplained changes to
    the verifier's tools, verifier files written by another hand… (queries/integrity.py). Evidence beside
    the score, never part of it: scoring ranks without it. A finished run's attempts change only when its
    errored ones run again, and its next finish recomputes the leaderboard (and so the cached body)."""
    pairs = [(r["run_id"], r["agent_index"]) for r in rows if "agent_index" in r and "run_id" in r]
    counts = agent_counts(store, pairs)
    return [
        {**r, "integrity": counts.get((r.get("run_id"), r.get("agent_index")), no_counts())} for r in rows
    ]


_LEADERBOARDS = VersionedBodies(size=256)


def leaderboard_body(store: EventStore, benchmark_id: str, sort: str) -> bytes:
    """GET /benchmarks/{key}/leaderboard as JSON, re-made only when a new LeaderboardComputed landed.
    An unknown sort is refused by sort_leaderboard before anything is cached under it."""
    with store.read_engine.connect() as conn:
        version = conn.execute(
            select(t.leaderboards.c.position).where(t.leaderboards.c.benchmark_id == benchmark_id)
        ).scalar_one_or_none()
    return _LEADERBOARDS.body(
        (store.url, benchmark_id, sort),
        version,
        lambda: {
            "benchmark_id": benchmark_id,
            "sort": sort,
            **_leaderboard_with_sections(leaderboard_rows(store, benchmark_id, sort)),
        },
    )


def _leaderboard_with_sections(rows: list[dict[str, Any]]) -> dict[str, Any]:
    sections = [
        {k: v for k, v in section.items() if k != "rows"} | {"row_count": len(section["rows"])}
        for section in leaderboard_sections(rows)
    ]
    return {"leaderboard": rows, "sections": sections}


SORTS = ("pass_at_1", "pass_at_k", "cost_per_task", "time_per_task", "tokens_per_task")


def sort_leaderboard(rows: list[dict[str, Any]], sort: str) -> list[dict[str, Any]]:
    """Every row in one ranking, in the chosen metric's rank order (statistics.md §6). Scoring ranks all
    rows together and ties only rows of one comparison group (`section`)."""
    if sort not in SORTS:
        raise Invalid(f"sort must be one of {', '.join(SORTS)}", field="sort")
    shaped = []
    for row in rows:
        ranking = (row.get("ranks") or {}).get(sort) or {}
        section = row.get("section") or _legacy_section(row)
        shaped.append(
            {
                **row,
                **_identity(row),
                "section": section,
                "rank": ranking.get("rank"),
                "tied": bool(ranking.get("tied")),
                "comparison": _with_top_identity(ranking.get("comparison")),
            }
        )
    higher_better = sort in ("pass_at_1", "pass_at_k")

    def key(item: dict[str, Any]) -> tuple[Any, ...]:
        value = _metric(item, sort)
        missing = value is None
        ordered = -(value or 0.0) if higher_better else (value or 0.0)
        return (
            item["rank"] is None,
            item["rank"] or 0,
            missing,
            ordered,
            item.get("participant", ""),
            # One participant's rows of two groups, equal in all of the above: the full list first.
            bool(item["section"].get("recommended")),
            str(item["section"].get("version") or ""),
        )

    return sorted(shaped, key=key)


def _identity(row: dict[str, Any]) -> dict[str, Any]:
    """The row's participant as identified now (regatta_shared.rules.participants), also for rows computed
    before a no-model harness had one identity, and its display name."""
    harness = str(row.get("harness") or "")
    model = participants.agent_model(harness, row.get("model"))
    return {
        "participant": participants.canonical_key(str(row.get("participant") or f"{harness}|{model}")),
        "model": model,
        "label": participants.agent_label(harness, model),
    }


def _with_top_identity(comparison: dict[str, Any] | None) -> dict[str, Any] | None:
    if not comparison or "top" not in comparison:
        return comparison
    return {**comparison, "top": participants.canonical_key(str(comparison["top"]))}


def leaderboard_sections(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The comparison groups of sorted rows, in order of their first row, each with its rows."""
    sections: dict[str, dict[str, Any]] = {}
    for row in rows:
        section = sections.setdefault(row["section"]["key"], {**row["section"], "rows": []})
        section["rows"].append(row)
    return list(sections.values())


def _legacy_section(row: dict[str, Any]) -> dict[str, Any]:
    """Rows computed before leaderboards had sections: one per task set and version."""
    task_set = row.get("task_set") or "full"
    return {
        "key": f"{row.get('version')}|{task_set}",
        "task_set": task_set,
        "recommended": task_set != "full",
        "version": row.get("version"),
        "digest": None,
        "conditions": row.get("conditions"),
    }


def _metric(row: dict[str, Any], sort: str) -> float | None:
    if sort == "pass_at_1":
        return (row.get("pass_at_1") or {}).get("value")
    if sort == "pass_at_k":
        curve = row.get("pass_at_k") or []
        return curve[-1]["value"] if curve else None
    if sort == "time_per_task":
        return row.get("mean_duration_seconds")
    return row.get(sort)
