"""Cost/task, tokens/task and time/task: one meaning everywhere (run page, leaderboard, downloads, API).

Each is the mean, over an agent's finished attempts, of what one attempt of one task took. Computed from
the totals a RunScored stores for each agent, so scores recorded before this definition read the same way:
a run of 3 attempts per task costs 3× per task under a per-task sum, the same per attempt here, and only
the per-attempt figure compares runs of different `attempts_per_task`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from regatta_shared.rules.outcomes import OUTCOMES


def finished_attempts(scores: Mapping[str, Any]) -> int:
    return sum(int(scores.get(outcome) or 0) for outcome in OUTCOMES)


def per_task_figures(scores: Mapping[str, Any]) -> dict[str, float | None]:
    """`cost_per_task` (USD; None when no attempt reported a cost), `tokens_per_task` (input + output)
    and `mean_duration_seconds` (time/task: the mean over attempts that recorded their duration)."""
    attempts = finished_attempts(scores)
    cost = scores.get("cost_usd")
    tokens = int(scores.get("input_tokens") or 0) + int(scores.get("output_tokens") or 0)
    return {
        "cost_per_task": float(cost) / attempts if cost is not None and attempts else None,
        "tokens_per_task": tokens / attempts if attempts else None,
        "mean_duration_seconds": scores.get("mean_duration_seconds"),
    }
