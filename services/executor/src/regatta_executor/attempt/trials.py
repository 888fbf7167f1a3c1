"""Runs one attempt as a Harbor trial (`Trial.create` / `run`), in whichever environment is configured."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from regatta_shared.messaging.jobs import AttemptJob
from regatta_shared.messaging.live import Phase
from regatta_shared.rules.harnesses import HARNESS_KEY_NAMES, NO_MODEL
from regatta_shared.rules.hosted_models import is_key_name, key_name

from ..environments.choice import LOCAL_ENVIRONMENT, EnvironmentChoice

__all__ = ["LOCAL_ENVIRONMENT", "EnvironmentChoice", "run_trial", "trial_config"]

# Options Regatta passes to a harness unless the run says otherwise. terminus-2 would otherwise try to
# install asciinema in the sandbox (~25 s, and it fails offline) to record the terminal (harbor.md §10).
HARNESS_DEFAULT_KWARGS: dict[str, dict[str, Any]] = {"terminus-2": {"record_terminal_session": False}}
# What a hosted endpoint declared without a key gets as its key (vLLM's and SGLang's convention).
HOSTED_WITHOUT_KEY = "EMPTY"


def model_name(job: AttemptJob) -> str | None:
    """The litellm-style `provider/model` Harbor gives the harness. An endpoint is OpenAI-compatible by
    definition, so its model goes through litellm's `openai/` provider with the endpoint's base URL."""
    model = job.agent.model
    if model.type == "endpoint" and model.model:
        return model.model if model.model.startswith("openai/") else f"openai/{model.model}"
    if model.type == "hosted" and model.base_url:
        # A declared serving endpoint (vLLM, SGLang) serves a LoRA adapter under the adapter's name.
        return f"openai/{model.lora_model_name or model.base_model}"
    if model.type == "hosted":
        return model.base_model  # a label only (a harness that calls no model)
    return model.model


def provider_key_names(name: str | None) -> tuple[str, ...]:
    """The variables in which Harbor looks for the model provider's key (`openai/…` → OPENAI_API_KEY)."""
    if not name or "/" not in name:
        return ()
    from harbor.agents.agent_auth_resolution import PROVIDERS

    access = PROVIDERS.get(name.split("/", 1)[0])
    return tuple(access.api_key_candidate_names) if access else ()


def agent_env(job: AttemptJob, secrets: dict[str, str]) -> dict[str, str]:
    """The run's env, every secret the agent may see under its own name, and the keys that the agent's
    model and harness name copied to where Harbor looks for them. Verifier-only secrets stay out."""
    agent = job.agent
    hidden = set(job.verifier_env_names) - {agent.model.api_key_secret, agent.harness_api_key_secret}
    env = {
        **job.env,
        **{name: value for name, value in secrets.items() if name not in hidden and not is_key_name(name)},
    }
    model_key = secrets.get(agent.model.api_key_secret or "")
    if agent.model.type == "hosted" and agent.model.base_url:
        # The operator's key for the endpoint, sealed into the run under a name of its own; an endpoint
        # without one still needs a placeholder, or the OpenAI client refuses to start.
        model_key = secrets.get(key_name(agent.index)) or HOSTED_WITHOUT_KEY
    if model_key is not None and agent.harness not in NO_MODEL:
        for name in provider_key_names(model_name(job))[:1]:
            env[name] = model_key
    harness_key = secrets.get(agent.harness_api_key_secret or "")
    if harness_key is not None:
        for name in HARNESS_KEY_NAMES.get(agent.harness, ()):
            env[name] = harness_key
    return env


def verifier_env(job: AttemptJob, secrets: dict[str, str]) -> dict[str, str]:
    return {name: secrets[name] for name in job.verifier_env_names if name in secrets}


def agent_config(job: AttemptJob, secrets: dict[str, str]) -> dict[str, Any]:
    agent = job.agent
    config: dict[str, Any] = {"name": agent.harness, "env": agent_env(job, secrets)}
    if agent.harness in NO_MODEL:
        return config  # oracle/nop ignore the model; naming one would make Harbor load litellm
    config["kwargs"] = dict(HARNESS_DEFAULT_KWARGS.get(agent.harness, {}))
    name = model_name(job)
    if name:
        config["model_name"] = name
    if agent.model.type in ("endpoint", "hosted") and agent.model.base_url:
        config["base_url"] = agent.model.base_url
    return config


def trial_config(
    job: AttemptJob,
    task_dir: Path,
    trials_dir: Path,
    environment: EnvironmentChoice,
    secrets: dict[str, str],
) -> dict[str, Any]:
    return {
        "task": {"path": str(task_dir)},
        "trial_name": f"{job.attempt_id}",
        "trials_dir": str(trials_dir),
        "timeout_multiplier": job.timeout_multiplier,
        "agent": agent_config(job, secrets),
        "environment": _environment_config(job, environment),
        "verifier": {"env": verifier_env(job, secrets)},
    }


def _environment_config(job: AttemptJob, environment: EnvironmentChoice) -> dict[str, Any]:
    config = environment.harbor_config()
    if environment.traits.takes_run_id:
        # A build that failed is not repeated within its run (container/image/build_failures.py).
        config["kwargs"]["run_id"] = job.run_id
    if environment.traits.takes_verifier_policy:
        config["kwargs"]["verifier_integrity"] = job.verifier_integrity
    return config


def _prints_in_sandbox(agent: object) -> bool:
    """Whether the agent's commands' output is what it does: an installed agent runs its CLI in the
    sandbox, which prints its progress (and tees it to its log). An agent that drives the sandbox from
    this host (terminus-2) reads screens through its commands, so their output is its view repeated; it
    writes its trajectory and logs here, which are followed anyway."""
    from harbor.agents.installed.base import BaseInstalledAgent

    return isinstance(agent, BaseInstalledAgent)


def import_harness(name: str) -> None:
    """Import a harness' module before Harbor's factory does, from a worker thread: terminus-2 brings in
    litellm, seconds of CPU (tens on a loaded host) that on the event loop would stall this executor's
    job heartbeats, and the job would be delivered again while its attempt runs."""
    from harbor.agents.factory import AgentFactory
    from harbor.models.agent.name import AgentName
    from harbor.utils.import_path import import_class

    try:
        path = getattr(AgentFactory, "_AGENT_MAP", {}).get(AgentName(name))
    except ValueError:
        return  # not a built-in name: Harbor's factory says what is wrong with it
    if path:
        import_class(path, label="agent")


async def run_trial(
    config: dict[str, Any],
    on_phase: Callable[[Phase], Awaitable[None]] | None = None,
    on_log: Callable[[Any], Awaitable[None]] | None = None,
    on_environment: Callable[[Any], None] | None = None,
) -> dict[str, Any]:
    """Run a trial; returns its TrialResult as JSON. Harbor records trial errors in the result; a trial
    that cannot be made from the task raises TaskEnvironmentError (trial_creation.py).
    `on_phase` hears the agent's and the verifier's phases as they begin (it must not raise: Harbor's
    hooks propagate errors); `on_log` the output of an installed agent's commands as the environment
    streams it (Harbor's LogEntry, for environments that stream it); `on_environment` gets the agent's
    environment once made, before it starts (the live view reads its log folders: live_sources.py)."""
    from harbor.trial.hooks import TrialEvent

    from .trial_creation import create_trial

    await asyncio.to_thread(import_harness, str(config["agent"].get("name") or ""))
    trial = await create_trial(config)
    if on_phase is not None:
        phases: dict[TrialEvent, Phase] = {
            TrialEvent.AGENT_START: "agent",
            TrialEvent.VERIFICATION_START: "verifier",
        }
        for event, phase in phases.items():
            trial.add_hook(event, lambda _event, phase=phase: on_phase(phase))
    if on_log is not None and _prints_in_sandbox(trial.agent):
        trial.add_log_callback(on_log)
    if on_environment is not None:
        on_environment(trial.agent_environment)
    result = await trial.run()
    return json.loads(result.model_dump_json())
