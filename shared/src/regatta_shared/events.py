"""Event contracts. Type names are stable: they are stored in the event log and used as NATS subjects.

Events are facts in the past tense. Payloads carry ids and values only; actors, workspaces and
causation travel in the envelope's metadata so every event records who caused it.
"""

from __future__ import annotations

from typing import Any, ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from .conditions import ScoringConditions

EVENT_TYPES: dict[str, type[Event]] = {}


class Event(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")
    type_name: ClassVar[str]
    category: ClassVar[str]

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if "type_name" in cls.__dict__:
            if cls.type_name in EVENT_TYPES:
                raise TypeError(f"duplicate event type {cls.type_name}")
            EVENT_TYPES[cls.type_name] = cls


def parse_event(type_name: str, data: dict[str, Any]) -> Event:
    try:
        model = EVENT_TYPES[type_name]
    except KeyError:
        raise ValueError(f"unknown event type {type_name!r}") from None
    return model.model_validate(data)


# --- identity (stream workspace-<id>) -------------------------------------------------------------


class WorkspaceCreated(Event):
    type_name = "WorkspaceCreated"
    category = "workspace"
    workspace_id: str
    name: str


class UserRegistered(Event):
    type_name = "UserRegistered"
    category = "workspace"
    user_id: str
    email: str
    name: str


class MemberAdded(Event):
    type_name = "MemberAdded"
    category = "workspace"
    workspace_id: str
    user_id: str
    role: Literal["admin", "member"]


class ApiTokenCreated(Event):
    type_name = "ApiTokenCreated"
    category = "workspace"
    token_id: str
    user_id: str
    token_hash: str
    name: str
    expires_at: str | None = None


class ApiTokenRevoked(Event):
    type_name = "ApiTokenRevoked"
    category = "workspace"
    token_id: str


class PlatformAdminGranted(Event):
    """A platform administrator: may issue tokens to any user and name any host path as a source.
    Distinct from a workspace's admin role, which rules only that workspace."""

    type_name = "PlatformAdminGranted"
    category = "workspace"
    user_id: str


# --- benchmarks (stream benchmark-<id>) -----------------------------------------------------------


class BenchmarkSource(BaseModel):
    """Where a benchmark's tasks come from (docs/benchmarks.md).

    registry: a Harbor registry.json at `registry_path` or `registry_url`, dataset `dataset`@`version`.
    folder: a local folder of task folders at `ref`. hub: Harbor hub package dataset `dataset`@`version`
    (tag, revision or sha256 digest). git: repository `git_url` at `git_ref`; its registry.json
    (`dataset`, optionally at `registry_path` inside the repo) or else the implicit dataset in `subdir`.
    `metadata` holds benchmark metadata declared by the deployment or the request (BenchmarkMetadata fields).
    """

    model_config = ConfigDict(frozen=True, extra="forbid")
    type: Literal["registry", "folder", "git", "hub"]
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
    # paths are not limited to REGATTA_SOURCE_ROOTS (regatta_shared.source_policy).
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


class TaskInfo(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")
    name: str
    category: str | None = None
    difficulty: Literal["easy", "medium", "hard"] | None = None
    tags: list[str] = Field(default_factory=list)
    digest: str


class BenchmarkTasksSynced(Event):
    type_name = "BenchmarkTasksSynced"
    category = "benchmark"
    benchmark_id: str
    sync_id: str
    page: int
    tasks: list[TaskInfo]


class BenchmarkMetadata(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")
    description: str | None = None
    default_harness: str | None = None
    supports_harness: bool = True
    requires_harness: bool = False
    requires_judge_model: bool = False
    requires_judge_api_key: bool = False
    judge_model_default: str | None = None
    pass_threshold: float = 1.0
    primary_reward_key: str | None = None
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


# --- runs (stream run-<id>) -----------------------------------------------------------------------


class ModelSpec(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")
    type: Literal["provider", "endpoint", "hosted"]
    model: str | None = None
    api_key_secret: str | None = None
    base_url: str | None = None
    extra_headers: dict[str, str] = Field(default_factory=dict)
    base_model: str | None = None
    lora_model_name: str | None = None

    @property
    def display_name(self) -> str:
        if self.type == "hosted":
            return (
                f"{self.base_model}:{self.lora_model_name}" if self.lora_model_name else str(self.base_model)
            )
        return str(self.model)


class AgentSpec(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")
    index: int
    harness: str
    model: ModelSpec
    env: dict[str, str] = Field(default_factory=dict)
    harness_api_key_secret: str | None = None

    @property
    def participant(self) -> str:
        return f"{self.harness}|{self.model.display_name}"


class ExecutionSettings(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")
    attempts_per_task: int = 1
    max_concurrent_attempts: int = 4
    timeout_multiplier: float = 1.0
    max_retries: int = 0
    pass_threshold: float | None = None
    judge_model: str | None = None
    judge_api_key_secret: str | None = None
    verifier_secrets: list[str] = Field(default_factory=list)
    cost_cap_usd: float | None = None

    @field_validator("timeout_multiplier", mode="before")
    @classmethod
    def _stored_non_finite(cls, value: Any) -> Any:
        # Submissions once accepted Infinity here, which the store wrote as null: such a run would
        # fail to load on every delivery, forever. It runs with the default multiplier instead.
        return 1.0 if value is None else value


class TaskSelection(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")
    task_set: str | None = None
    task_names: list[str] = Field(default_factory=list)
    categories: list[str] = Field(default_factory=list)

    @property
    def kind(self) -> Literal["all", "task_set", "filtered"]:
        if self.task_names or self.categories:
            return "filtered"
        return "task_set" if self.task_set else "all"


class RunTask(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")
    name: str
    digest: str
    category: str | None = None


class RunSubmitted(Event):
    type_name = "RunSubmitted"
    category = "run"
    run_id: str
    workspace_id: str
    name: str
    benchmark_id: str
    benchmark_name: str
    benchmark_version: str
    benchmark_digest: str
    selection: TaskSelection
    tasks: list[RunTask]
    agents: list[AgentSpec]
    execution: ExecutionSettings
    env: dict[str, str] = Field(default_factory=dict)
    secret_names: list[str] = Field(default_factory=list)
    secret_scopes: dict[str, str] = Field(default_factory=dict)
    sealed_secrets: str | None = None
    config_toml: str = ""
    primary_reward_key: str | None = None
    # The benchmark's standard conditions when the run was submitted (conditions.py): a run qualifies for
    # the leaderboard only under them. None on runs recorded before they were: the platform's defaults apply.
    standard_conditions: ScoringConditions | None = None
    # The benchmark's recommended task set when the run was submitted: the only named set that ranks like
    # the full task list (conditions.ranked_task_set).
    recommended_task_set: str | None = None


class RunQueued(Event):
    type_name = "RunQueued"
    category = "run"
    run_id: str
    expected_attempts: int


class RunStarted(Event):
    type_name = "RunStarted"
    category = "run"
    run_id: str


class AttemptScheduled(Event):
    type_name = "AttemptScheduled"
    category = "run"
    run_id: str
    attempt_id: str
    agent_index: int
    task: str
    attempt_index: int
    try_number: int = 1


class AttemptStarted(Event):
    type_name = "AttemptStarted"
    category = "run"
    run_id: str
    attempt_id: str
    try_number: int
    executor_id: str


class Timings(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")
    environment_setup: float | None = None
    agent_setup: float | None = None
    agent_execution: float | None = None
    verifier: float | None = None
    total: float | None = None


class Usage(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")
    input_tokens: int | None = None
    output_tokens: int | None = None
    cache_tokens: int | None = None
    cost_usd: float | None = None


class ArtifactRef(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")
    path: str
    digest: str
    size: int


Outcome = Literal["passed", "failed", "errored", "cancelled"]


class AttemptFinished(Event):
    type_name = "AttemptFinished"
    category = "run"
    run_id: str
    attempt_id: str
    agent_index: int
    task: str
    attempt_index: int
    try_number: int
    outcome: Outcome
    rewards: dict[str, float] | None = None
    primary_reward: float | None = None
    exception_type: str | None = None
    exception_message: str | None = None
    started_at: str | None = None
    finished_at: str | None = None
    timings: Timings = Field(default_factory=Timings)
    usage: Usage = Field(default_factory=Usage)
    sandbox_seconds: float | None = None
    executor_id: str | None = None
    artifacts: list[ArtifactRef] = Field(default_factory=list)
    # The environment that ran it (`local`, `container`, a Harbor type or `module:Class`); None in events
    # recorded before executors said, and for attempts that never reached one.
    environment: str | None = None
    # False when the task's declared environment (its Dockerfile or image) was not built, as under
    # `local`; None when unknown. `environment_note` says what was left out.
    environment_built: bool | None = None
    environment_note: str | None = None


class AttemptRetried(Event):
    type_name = "AttemptRetried"
    category = "run"
    run_id: str
    attempt_id: str
    try_number: int
    exception_type: str | None = None
    exception_message: str | None = None
    delay_seconds: float


class RunStopRequested(Event):
    type_name = "RunStopRequested"
    category = "run"
    run_id: str
    reason: str = "stopped by user"


class RunExecutionCompleted(Event):
    type_name = "RunExecutionCompleted"
    category = "run"
    run_id: str


class RunStopped(Event):
    type_name = "RunStopped"
    category = "run"
    run_id: str
    reason: str


class RunFailed(Event):
    type_name = "RunFailed"
    category = "run"
    run_id: str
    reason: str


class ExecutorNoted(Event):
    """Executor-side notes (sandbox created, cleaned) so Logs tell the whole lifecycle."""

    type_name = "ExecutorNoted"
    category = "run"
    run_id: str
    attempt_id: str
    note: str
    level: Literal["info", "warning", "error"] = "info"


# --- scoring --------------------------------------------------------------------------------------


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


class RunFinished(Event):
    type_name = "RunFinished"
    category = "run"
    run_id: str


class LeaderboardComputed(Event):
    type_name = "LeaderboardComputed"
    category = "leaderboard"
    benchmark_id: str
    rows: list[dict[str, Any]]


# --- secrets (stream workspace-<id>; values never appear, only names) -----------------------------


class SecretSet(Event):
    type_name = "SecretSet"
    category = "workspace"
    secret_id: str
    workspace_id: str
    name: str
    scope: Literal["workspace", "user"]
    owner_user_id: str | None = None


class SecretDeleted(Event):
    type_name = "SecretDeleted"
    category = "workspace"
    secret_id: str
    workspace_id: str
    name: str
    scope: Literal["workspace", "user"]


# --- budget and notifications (stream workspace-<id>, webhook-<id>) -------------------------------


class WorkspaceBudgetSet(Event):
    type_name = "WorkspaceBudgetSet"
    category = "workspace"
    workspace_id: str
    budget_usd: float | None


class WebhookRegistered(Event):
    type_name = "WebhookRegistered"
    category = "workspace"
    webhook_id: str
    workspace_id: str
    url: str
    kinds: list[str]


class WebhookRemoved(Event):
    type_name = "WebhookRemoved"
    category = "workspace"
    webhook_id: str
    workspace_id: str


class WebhookDeliveryRecorded(Event):
    """One delivery attempt of one notification; the delivery log is the fold of these."""

    type_name = "WebhookDeliveryRecorded"
    category = "webhook"
    webhook_id: str
    workspace_id: str
    notification_id: str
    kind: str
    attempt: int
    delivered: bool
    status_code: int | None = None
    error: str | None = None
    retry_in_seconds: float | None = None
