"""The leaderboard's cached body follows every new LeaderboardComputed (cached_reads.py). The leaderboards
come from the real scoring code, recomputed as each seeded run finishes."""

from __future__ import annotations

from typing import Any

import pytest

from .conftest import Gateway, demo_config


@pytest.fixture
def gateway(gateway_on_both: Gateway) -> Gateway:
    """Both backends: the cache follows each store's projection of LeaderboardComputed."""
    return gateway_on_both


TASKS = [f"t{i}" for i in range(6)]
NOP_ONLY = [{"harness": "nop", "model": {"type": "hosted", "base_model": "none", "lora_model_name": "none"}}]


def _board(gateway: Gateway, benchmark_id: str, sort: str = "pass_at_1") -> list[tuple[str, Any]]:
    body = gateway.ok(gateway.v1("GET", f"/benchmarks/{benchmark_id}/leaderboard", params={"sort": sort}))
    assert body["benchmark_id"] == benchmark_id and body["sort"] == sort
    return [(row["harness"], row["rank"]) for row in body["leaderboard"]]


def test_a_new_leaderboard_replaces_the_cached_one_for_every_sort(gateway: Gateway) -> None:
    benchmark_id = gateway.benchmark("cached", TASKS)
    assert _board(gateway, benchmark_id) == []
    # oracle passes all 6 tasks, nop none: 6 discordant tasks, p = 1/32, so nop ranks below.
    gateway.progress(gateway.submit(demo_config("cached"))["id"])
    assert _board(gateway, benchmark_id) == [("oracle", 1), ("nop", 2)]
    assert _board(gateway, benchmark_id) == [("oracle", 1), ("nop", 2)]  # served from the cache
    assert _board(gateway, benchmark_id, "cost_per_task") == [("nop", 1), ("oracle", 1)]  # equal costs

    # nop re-run, now passing every task: its row is replaced and it ties with oracle.
    gateway.progress(gateway.submit(demo_config("cached", agents=NOP_ONLY))["id"], passes=lambda *_: True)
    assert _board(gateway, benchmark_id) == [("nop", 1), ("oracle", 1)]
    assert _board(gateway, benchmark_id, "pass_at_k") == [("nop", 1), ("oracle", 1)]

    refused = gateway.v1("GET", f"/benchmarks/{benchmark_id}/leaderboard", params={"sort": "fastest"})
    assert refused.status_code == 400 and refused.json()["field"] == "sort"
