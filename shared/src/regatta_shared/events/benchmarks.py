"""Benchmark events (stream benchmark-<id>): added, synced from their source, removed."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from regatta_shared.rules.execution_defaults import PASS_THRESHOLD, VERIFIER_INTEGRITY

from .base import Event
from .integrity import VerifierIntegrity


class BenchmarkSource(BaseModel):
    """Where a benchmark's tasks come from (docs/benchmarks.md).

    registry: a Harbor registry.json at `registry_path` or `registry_url`, dataset `dataset`@`version`.
    folder: a local folder of task folders at `ref`. hub: Harbor hub package dataset `dataset`@`version`
    (tag, revision or sha256 digest). git: repository `git_url` at `git_ref`; its registry.json
    (`dataset`, optionally at `registry_path` inside the repo) or else the implicit dataset in `subdir`.
    upload: a member's scratch benchmark, the tar.gz they uploaded kept in the task archive bucket at key
    `ref` (regatta_shared.security.task_uploads); only the gateway's upload records one, never a request body.
    `metadata` holds benchmark metadata declared by the deployment or the request (BenchmarkMetadata fields).
    """

    model_config = ConfigDict(frozen=True, extra="forbid")
    type: Literal["registry", "folder", "git", "hub", "upload"]
    ref: str
    registry_path: str | None = None
    dataset: str | None = None
    version: str | None = None
    registry_url: str | None = None
    git_url: str | None = None
    git_ref: str | None = None
    subdir: str | None = None
    metadata: dict[str, Any] | None = None
    # Set by the gateway only: added by a platform administrator or the deployment (hosted), so its host
    # paths are not limited to REGATTA_SOURCE_ROOTS (regatta_shared.security.source_policy).
    trusted: bool = False


class BenchmarkAdded(Event):
    type_name = "BenchmarkAdded"
    category = "benchmark"
    benchmark_id: str
    workspace_id: str
    name: str
    source: BenchmarkSource
    hosted: bool = False


class BenchmarkSyncRequested(Event):
    type_name = "BenchmarkSyncRequested"
    category = "benchmark"
    benchmark_id: str
    sync_id: str


class BenchmarkSyncStarted(Event):
    type_name = "BenchmarkSyncStarted"
    category = "benchmark"
    benchmark_id: str
    sync_id: str
    total: int
    version: str | None = None


class TaskResources(BaseModel):
    """What a task's task.toml asks for (the largest value over its steps and verifier environment);
    None where it asks nothing. Checked against the operator's ceilings (regatta_shared.rules.ceilings) at
    sync, again at run submission (ceilings may have been lowered since) and by the executor."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    memory_mb: int | None = None
    cpus: float | None = None
    storage_mb: int | None = None
    agent_timeout_sec: float | None = None
    verifier_timeout_sec: float | None = None
    build_timeout_sec: float | None = None


class TaskInfo(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")
    name: str
    category: str | None = None
    difficulty: Literal["easy", "medium", "hard"] | None = None
    tags: list[str] = Field(default_factory=list)
    digest: str
    resources: TaskResources | None = None


class InvalidTask(BaseModel):
    """A task of the dataset that cannot run (no instruction.md, a bad task.toml, over a ceiling, too
    large): listed with its reason, never scheduled; the benchmark's other tasks stay runnable."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    name: str
    reason: str


class BenchmarkTasksSynced(Event):
    type_name = "BenchmarkTasksSynced"
    category = "benchmark"
    benchmark_id: str
    sync_id: str
    page: int
    tasks: list[TaskInfo]
    invalid: list[InvalidTask] = Field(default_factory=list)


class BenchmarkMetadata(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")
    description: str | None = None
    default_harness: str | None = None
    supports_harness: bool = True
    requires_harness: bool = False
    requires_judge_model: bool = False
    requires_judge_api_key: bool = False
    judge_model_default: str | None = None
    pass_threshold: float = PASS_THRESHOLD
    primary_reward_key: str | None = None
    # The policy a run gets when it names none, and the one it must keep to rank (conditions.py).
    verifier_integrity: VerifierIntegrity = VERIFIER_INTEGRITY
    # False: a task's solution/ is not shown to members (page, API, CLI); admins still see it.
    show_solutions: bool = True
    task_sets: dict[str, list[str]] = Field(default_factory=dict)
    recommended_task_set: str | None = None


class BenchmarkSyncCompleted(Event):
    type_name = "BenchmarkSyncCompleted"
    category = "benchmark"
    benchmark_id: str
    sync_id: str
    version: str
    digest: str
    task_count: int
    metadata: BenchmarkMetadata = Field(default_factory=BenchmarkMetadata)
    source_commit: str | None = None


class BenchmarkSyncFailed(Event):
    type_name = "BenchmarkSyncFailed"
    category = "benchmark"
    benchmark_id: str
    sync_id: str
    reason: str


class BenchmarkRemoved(Event):
    type_name = "BenchmarkRemoved"
    category = "benchmark"
    benchmark_id: str


class BenchmarkTaskExcluded(Event):
    """A workspace admin took a broken task (a task defect, a wrong verifier) out of the benchmark's
    `version`: the leaderboard ranks every run of that version on its remaining tasks and names the
    exclusion (docs/benchmarks.md, "Excluded tasks"). Who excluded it is the envelope's actor."""

    type_name = "BenchmarkTaskExcluded"
    category = "benchmark"
    benchmark_id: str
    version: str
    task: str
    reason: str
