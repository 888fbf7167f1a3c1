"""Scoring events: a run's scores (stream run-<id>), a benchmark's leaderboard and rescoring
(leaderboard-<id>)."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from .base import Event


class MetricValue(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")
    value: float
    ci_low: float
    ci_high: float
    n: int


class CategoryScore(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")
    category: str
    pass_at_1: MetricValue
    n_tasks: int


class AgentScores(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")
    agent_index: int
    pass_at_1: MetricValue | None = None
    pass_at_k: list[dict[str, Any]] = Field(default_factory=list)
    k: int
    categories: list[CategoryScore] = Field(default_factory=list)
    task_counts: dict[str, list[int]] = Field(default_factory=dict)
    passed: int = 0
    failed: int = 0
    errored: int = 0
    cancelled: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    cache_tokens: int = 0
    cost_usd: float | None = None
    cost_per_task: float | None = None
    mean_duration_seconds: float | None = None
    tokens_per_task: float | None = None
    complete: bool = False
    rank: int | None = None
    tied: bool = False


def _rules_version_named(data: dict[str, Any]) -> dict[str, Any]:
    """Version 1 → 2. Scores recorded before they named their rules were computed under rules version 1
    (regatta_shared.rules.scoring_rules)."""
    data.setdefault("rules_version", 1)
    return data


class RunScored(Event):
    type_name = "RunScored"
    category = "run"
    # 2: names the scoring rules' version.
    schema_version = 2
    upcasters = {1: _rules_version_named}
    run_id: str
    final: bool
    agents: list[AgentScores]
    through_position: int = 0
    # The version of the outcome and statistics rules these scores were computed under
    # (regatta_shared.rules.scoring_rules.RULES_VERSION); a leaderboard ranks only one version together.
    rules_version: int


class LeaderboardComputed(Event):
    type_name = "LeaderboardComputed"
    category = "leaderboard"
    benchmark_id: str
    rows: list[dict[str, Any]]


class RescoreRequested(Event):
    """A platform administrator asked for a benchmark's runs scored under an older rules version to be
    scored again under the current one (all its versions, or only runs of `benchmark_version`)."""

    type_name = "RescoreRequested"
    category = "leaderboard"
    rescore_id: str
    benchmark_id: str
    benchmark_version: str | None = None
