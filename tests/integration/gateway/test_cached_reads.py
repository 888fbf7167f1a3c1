"""The leaderboard's cached body follows every new LeaderboardComputed (cached_reads.py)."""

from __future__ import annotations

from typing import Any

from regatta_shared.events import LeaderboardComputed
from regatta_shared.eventstore.records import new_event
from regatta_shared.ids import leaderboard_stream

from .conftest import Gateway


def _row(participant: str, pass_at_1: float, rank: int) -> dict[str, Any]:
    return {
        "participant": participant,
        "pass_at_1": {"value": pass_at_1, "ci_low": 0.0, "ci_high": 1.0},
        "cost_per_task": 1.0 - pass_at_1,
        "ranks": {"pass_at_1": {"rank": rank, "tied": False}, "cost_per_task": {"rank": 3 - rank}},
    }


def _compute(gateway: Gateway, benchmark_id: str, rows: list[dict[str, Any]]) -> None:
    event = LeaderboardComputed(benchmark_id=benchmark_id, rows=rows)
    gateway.store.append(leaderboard_stream(benchmark_id), [new_event(event, actor="scoring")])
    gateway.settle()


def _board(gateway: Gateway, benchmark_id: str, sort: str = "pass_at_1") -> list[tuple[str, Any]]:
    body = gateway.ok(gateway.v1("GET", f"/benchmarks/{benchmark_id}/leaderboard", params={"sort": sort}))
    assert body["benchmark_id"] == benchmark_id and body["sort"] == sort
    return [(row["participant"], row["rank"]) for row in body["leaderboard"]]


def test_a_new_leaderboard_replaces_the_cached_one_for_every_sort(gateway: Gateway) -> None:
    benchmark_id = gateway.benchmark("cached", ["t1"])
    assert _board(gateway, benchmark_id) == []
    _compute(gateway, benchmark_id, [_row("a", 0.5, 2), _row("b", 0.9, 1)])
    assert _board(gateway, benchmark_id) == [("b", 1), ("a", 2)]
    assert _board(gateway, benchmark_id) == [("b", 1), ("a", 2)]  # served from the cache
    assert _board(gateway, benchmark_id, "cost_per_task") == [("a", 1), ("b", 2)]

    _compute(gateway, benchmark_id, [_row("a", 0.95, 1), _row("b", 0.9, 2), _row("c", 0.1, 3)])
    assert _board(gateway, benchmark_id) == [("a", 1), ("b", 2), ("c", 3)]
    assert _board(gateway, benchmark_id, "cost_per_task") == [("c", 0), ("b", 1), ("a", 2)]

    refused = gateway.v1("GET", f"/benchmarks/{benchmark_id}/leaderboard", params={"sort": "fastest"})
    assert refused.status_code == 400 and refused.json()["field"] == "sort"
