"""Run events (stream run-<id>): submitted, scheduled, attempts reported, stopped, finished."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from regatta_shared import execution_defaults as defaults
from regatta_shared.conditions import ScoringConditions
from regatta_shared.outcomes import Outcome
from regatta_shared.participants import agent_model, participant_key, spec_model_name

from .base import Event
from .integrity import AttemptIntegrity, VerifierIntegrity


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
        return spec_model_name(self.model_dump())


class AgentSpec(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")
    index: int
    harness: str
    model: ModelSpec
    env: dict[str, str] = Field(default_factory=dict)
    harness_api_key_secret: str | None = None

    @property
    def participant(self) -> str:
        """Who the agent is (regatta_shared.participants): one key however a no-model harness named models."""
        return participant_key(self.harness, self.model.display_name)

    @property
    def participant_model(self) -> str:
        """The model of the agent's identity: empty for a harness that calls no model."""
        return agent_model(self.harness, self.model.display_name)


class ExecutionSettings(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")
    attempts_per_task: int = defaults.ATTEMPTS_PER_TASK
    max_concurrent_attempts: int = defaults.MAX_CONCURRENT_ATTEMPTS
    timeout_multiplier: float = defaults.TIMEOUT_MULTIPLIER
    max_retries: int = defaults.MAX_RETRIES
    pass_threshold: float | None = None
    judge_model: str | None = None
    judge_api_key_secret: str | None = None
    verifier_secrets: list[str] = Field(default_factory=list)
    cost_cap_usd: float | None = None
    # A scoring condition: runs under different policies never rank together (conditions.py).
    verifier_integrity: VerifierIntegrity = defaults.VERIFIER_INTEGRITY


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


def _timeout_multiplier_a_number(data: dict[str, Any]) -> dict[str, Any]:
    """Version 1 → 2. Submissions once accepted Infinity as a timeout multiplier, which the store wrote
    as null: such a run would fail to load on every delivery, forever. It runs with the default."""
    execution = data.get("execution")
    if isinstance(execution, dict) and execution.get("timeout_multiplier", 1.0) is None:
        data["execution"] = {**execution, "timeout_multiplier": 1.0}  # a copy: nested dicts are shared
    return data


class RunSubmitted(Event):
    type_name = "RunSubmitted"
    category = "run"
    # 2: execution.timeout_multiplier is always a number.
    schema_version = 2
    upcasters = {1: _timeout_multiplier_a_number}
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
    # A run of a scratch benchmark (tasks a member uploaded to try them): it never ranks (conditions.py).
    scratch: bool = False


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
    # Which re-run of the run's errored attempts scheduled it again (0: the run's own scheduling).
    rerun: int = 0


class AttemptStarted(Event):
    type_name = "AttemptStarted"
    category = "run"
    run_id: str
    attempt_id: str
    try_number: int
    executor_id: str
    # Which delivery of the attempt's job (1 = first; a later one after its executor stopped or died).
    delivery: int = 1


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


class AttemptImage(BaseModel):
    """The image the attempt's container ran: what the task named and what the engine had under it."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    reference: str = Field(max_length=300)
    # The engine's content id of the image (`sha256:…`): the same bytes on any engine.
    image_id: str = Field(pattern=r"^sha256:[0-9a-f]{64}$")
    # `repository@sha256:…` as pulled from its registry; None for an allow-listed local image or one
    # the platform built.
    registry_digest: str | None = Field(None, max_length=400, pattern=r"^[^\s@]+@sha256:[0-9a-f]{64}$")
    source: Literal["pulled", "local", "built"]


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
    # The main container's image (container environment); None in events recorded before executors
    # said, and for attempts that never reached an image.
    image: AttemptImage | None = None
    # What the platform saw before the verifier ran (integrity.py); None where the environment does not
    # look (and in events recorded before executors did).
    integrity: AttemptIntegrity | None = None


class AttemptRetried(Event):
    type_name = "AttemptRetried"
    category = "run"
    run_id: str
    attempt_id: str
    try_number: int
    exception_type: str | None = None
    exception_message: str | None = None
    delay_seconds: float
    # True for a retry of the platform's own budget (REGATTA_INFRA_RETRIES): a fault outside the
    # sandbox, retried without changing the run's conditions; False for one of the run's `max_retries`.
    infrastructure: bool = False
    delivery: int = 1


class RunStopRequested(Event):
    type_name = "RunStopRequested"
    category = "run"
    run_id: str
    reason: str = "stopped by user"
    # "failed" when the scheduler stops a run that can no longer produce a meaningful result (an error
    # retrying cannot cure): it then ends with RunFailed(reason) instead of RunStopped.
    ends_as: Literal["stopped", "failed"] = "stopped"


class ErroredAttemptsRerunRequested(Event):
    """A user asked a finished run to run its errored attempts again, under its unchanged conditions:
    each listed attempt keeps its slot, and its new outcome replaces the errored one (the errored one
    stays in the history). The run is running again until it is scored and finished anew."""

    type_name = "ErroredAttemptsRerunRequested"
    category = "run"
    run_id: str
    attempt_ids: list[str]
    # 1 for a run's first re-run, 2 for its second, …: the events it leads to carry ids of their own.
    rerun: int = Field(ge=1)


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


class RunFinished(Event):
    type_name = "RunFinished"
    category = "run"
    run_id: str
