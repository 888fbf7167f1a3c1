"""Messages between the scheduler and executors (JOBS and REPORTS work queues). Not stored events."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from regatta_shared.events import AgentSpec, ArtifactRef, AttemptImage, Outcome, Timings, Usage
from regatta_shared.events.integrity import AttemptIntegrity, VerifierIntegrity
from regatta_shared.rules import execution_defaults as defaults


class AttemptJob(BaseModel):
    model_config = ConfigDict(extra="forbid")
    run_id: str
    attempt_id: str
    agent: AgentSpec
    task: str
    task_digest: str
    attempt_index: int
    timeout_multiplier: float = defaults.TIMEOUT_MULTIPLIER
    max_retries: int = defaults.MAX_RETRIES
    pass_threshold: float = defaults.PASS_THRESHOLD
    primary_reward_key: str | None = None
    verifier_integrity: VerifierIntegrity = defaults.VERIFIER_INTEGRITY
    env: dict[str, str] = Field(default_factory=dict)
    verifier_env_names: list[str] = Field(default_factory=list)
    judge_model: str | None = None
    sealed_secrets: str | None = None
    # The attempt's report key sealed for executors (regatta_shared.security.attempt_auth): reports without
    # its MAC are dropped by the scheduler.
    report_key: str | None = None
    # Which re-run of the run's errored attempts this job is (0: the run's own); its reports echo it.
    rerun: int = 0


class AttemptReport(BaseModel):
    model_config = ConfigDict(extra="forbid")
    kind: Literal["started", "retrying", "finished", "note"]
    run_id: str
    attempt_id: str
    try_number: int
    executor_id: str
    outcome: Outcome | None = None
    rewards: dict[str, float] | None = None
    primary_reward: float | None = None
    exception_type: str | None = None
    exception_message: str | None = None
    started_at: str | None = None
    finished_at: str | None = None
    timings: Timings = Field(default_factory=Timings)
    usage: Usage = Field(default_factory=Usage)
    sandbox_seconds: float | None = None
    artifacts: list[ArtifactRef] = Field(default_factory=list)
    delay_seconds: float | None = None
    # On a "retrying" report: True when the retry is one of the platform's own (REGATTA_INFRA_RETRIES),
    # False when it is one of the run's `max_retries`.
    infrastructure: bool | None = None
    # The JetStream delivery of the job this report comes from (1 = first; more after an executor
    # stopped or died mid-attempt): reports of a superseded delivery change nothing (run aggregate).
    delivery: int = Field(1, ge=1, le=1_000_000)
    # The job's re-run (AttemptJob.rerun): a report of an earlier round of the attempt changes nothing.
    rerun: int = Field(0, ge=0, le=1_000_000)
    note: str | None = None
    level: Literal["info", "warning", "error"] = "info"
    # Which environment ran the attempt, and whether the task's own environment was built (events.py).
    environment: str | None = Field(None, max_length=300)
    environment_built: bool | None = None
    environment_note: str | None = Field(None, max_length=2000)
    image: AttemptImage | None = None
    integrity: AttemptIntegrity | None = None
    # Set on a "finished" report when no attempt of the run can succeed (its task archive is gone, its
    # secrets cannot be opened): the scheduler fails the run with this reason.
    run_failure: str | None = Field(None, max_length=2000)
