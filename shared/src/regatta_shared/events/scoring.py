"""Scoring events: a run's scores (stream run-<id>), a benchmark's leaderboard (leaderboard-<id>)."""

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


class RunScored(Event):
    type_name = "RunScored"
    category = "run"
    run_id: str
    final: bool
    agents: list[AgentScores]
    through_position: int = 0


class LeaderboardComputed(Event):
    type_name = "LeaderboardComputed"
    category = "leaderboard"
    benchmark_id: str
    rows: list[dict[str, Any]]
