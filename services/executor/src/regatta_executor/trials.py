"""Runs one attempt as a Harbor trial (`Trial.create` / `run`), in whichever environment is configured."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from regatta_shared.harnesses import NO_MODEL
from regatta_shared.jobs import AttemptJob

LOCAL_ENVIRONMENT = "regatta_executor.local_environment:LocalEnvironment"


@dataclass(frozen=True)
class EnvironmentChoice:
    """`local` is ours (bubblewrap); `module:Class` is any BaseEnvironment by import path; any other name
    is a Harbor environment type (docker, podman, daytona, modal, e2b, …). One code path for all."""

    kind: str = "local"
    kwargs: dict[str, Any] = field(default_factory=dict)

    def harbor_config(self) -> dict[str, Any]:
        if self.kind == "local":
            return {"import_path": LOCAL_ENVIRONMENT, "delete": True, "kwargs": dict(self.kwargs)}
        if ":" in self.kind:
            return {"import_path": self.kind, "delete": True, "kwargs": dict(self.kwargs)}
        return {"type": self.kind, "delete": True, "kwargs": dict(self.kwargs)}


def agent_config(job: AttemptJob, secrets: dict[str, str]) -> dict[str, Any]:
    agent = job.agent
    config: dict[str, Any] = {"name": agent.harness, "env": {**job.env, **secrets}}
    model = agent.model
    if agent.harness in NO_MODEL:
        return config  # oracle/nop ignore the model; naming one would make Harbor load litellm
    if model.type == "provider" and model.model:
        config["model_name"] = model.model
    elif model.type == "endpoint":
        config["model_name"] = model.model
        config["base_url"] = model.base_url
    elif model.type == "hosted":
        config["model_name"] = model.base_model
    return config


def trial_config(
    job: AttemptJob,
    task_dir: Path,
    trials_dir: Path,
    environment: EnvironmentChoice,
    secrets: dict[str, str],
    verifier_env: dict[str, str],
) -> dict[str, Any]:
    return {
        "task": {"path": str(task_dir)},
        "trial_name": f"{job.attempt_id}",
        "trials_dir": str(trials_dir),
        "timeout_multiplier": job.timeout_multiplier,
        "agent": agent_config(job, secrets),
        "environment": environment.harbor_config(),
        "verifier": {"env": verifier_env},
    }


async def run_trial(config: dict[str, Any]) -> dict[str, Any]:
    """Run a trial; returns its TrialResult as JSON. Harbor records trial errors in the result."""
    from harbor.models.trial.config import TrialConfig
    from harbor.trial.trial import Trial

    trial = await Trial.create(TrialConfig.model_validate(config))
    result = await trial.run()
    return json.loads(result.model_dump_json())
