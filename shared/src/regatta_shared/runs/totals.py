"""A run's totals (or one agent's), moved by each finished attempt that counts (attempts.attempt_change).

Pure. `cost_usd` stays None until some attempt reports a cost: "no cost reported" is not "$0".
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

# The totals the gateway's rm_runs stores; cache_tokens is kept for scoring's per-agent figures.
RUN_TOTALS = ("ingested", "input_tokens", "output_tokens", "cost_usd", "environments")


def no_totals() -> dict[str, Any]:
    return {
        "ingested": 0,
        "input_tokens": 0,
        "output_tokens": 0,
        "cache_tokens": 0,
        "cost_usd": None,
        "environments": None,
    }


def with_finished(totals: Mapping[str, Any], d: Mapping[str, Any]) -> dict[str, Any]:
    """`totals` with the AttemptFinished `d` added, as a new dict (a stored one is never changed in place).
    Keys missing from `totals` (a stored row holds only RUN_TOTALS) count as empty."""
    usage = d.get("usage") or {}
    cost = totals.get("cost_usd")
    if usage.get("cost_usd") is not None:
        cost = (cost or 0.0) + usage["cost_usd"]
    return {
        "ingested": (totals.get("ingested") or 0) + 1,
        "input_tokens": (totals.get("input_tokens") or 0) + (usage.get("input_tokens") or 0),
        "output_tokens": (totals.get("output_tokens") or 0) + (usage.get("output_tokens") or 0),
        "cache_tokens": (totals.get("cache_tokens") or 0) + (usage.get("cache_tokens") or 0),
        "cost_usd": cost,
        "environments": count_environment(totals.get("environments"), d),
    }


def count_environment(counts: Any, d: Mapping[str, Any]) -> Any:
    """Attempts per environment and how many of them ran without a built image, with one more finished
    attempt `d` (a new dict when it names one; old events name none)."""
    name = d.get("environment")
    if not name:
        return counts
    counted = dict(counts or {})
    entry = dict(counted.get(name) or {"attempts": 0, "not_built": 0})
    entry["attempts"] += 1
    entry["not_built"] += d.get("environment_built") is False
    counted[name] = entry
    return counted
