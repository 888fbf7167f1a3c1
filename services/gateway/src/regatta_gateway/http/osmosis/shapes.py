"""Adjustments of the shared query shapes for the Osmosis CLI's null-safety rules (contract §2.4).

The client crashes on `null` where it expects a list or a number; every field it treats as optional
may instead be left out. So optional keys whose value is null are dropped, recursively.
"""

from __future__ import annotations

from typing import Any

from regatta_shared.eventstore import EventStore
from sqlalchemy import select

from regatta_gateway.readmodels import tables as t


def drop_nulls(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: drop_nulls(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [drop_nulls(v) for v in value if v is not None]
    return value


def benchmark_page(body: dict[str, Any]) -> dict[str, Any]:
    return {**body, "benchmarks": [drop_nulls(item) for item in body["benchmarks"]]}


def benchmark_detail(body: dict[str, Any]) -> dict[str, Any]:
    return {
        "benchmark": drop_nulls(body["benchmark"]),
        "leaderboard": [drop_nulls(row) for row in body["leaderboard"] if isinstance(row, dict)],
    }


def run_page(body: dict[str, Any]) -> dict[str, Any]:
    return {**body, "benchmark_runs": [drop_nulls(item) for item in body["benchmark_runs"]]}


def run_detail(store: EventStore, body: dict[str, Any]) -> dict[str, Any]:
    """§4.5, plus the benchmark's source in `configuration` ("Source: registry: name@version")."""
    configuration = dict(body["configuration"])
    with store.read_engine.connect() as conn:
        source = conn.execute(
            select(t.benchmarks.c.source_type, t.benchmarks.c.source_ref).where(
                t.benchmarks.c.id == configuration.get("benchmark_id")
            )
        ).first()
    if source is not None:
        configuration.update(source_type=source[0], source_ref=source[1])
    return {
        "benchmark_run": drop_nulls(body["benchmark_run"]),
        "configuration": drop_nulls(configuration),
        "agents": drop_nulls(body["agents"]),
        "progress": body["progress"],
        "totals": drop_nulls(body["totals"]),
        "agent_metrics": drop_nulls(body["agent_metrics"]),
        "is_internal_user": False,
    }
