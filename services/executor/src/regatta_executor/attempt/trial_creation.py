"""Making the Harbor trial of an attempt, and what Harbor's refusal to make one is.

First the task's `${VAR}` are checked against what the platform offers (task_variables.py), and Harbor's
own resolution is kept to that. Then, while it makes the trial (`Trial.create`), Harbor checks what the
task asks for against what the environment declares it can do, and raises: a per-phase
`network_mode`/`allowed_hosts` that differs from the environment's (neither of Regatta's environments
switches a policy after start), `os = "windows"`, sidecars referenced where no compose file or
compose-capable environment is, a task.toml its models refuse, a file it needs that the task lacks.
Each is decided from the task and the job alone, so every try and every executor would refuse it
again: it is the attempt's `errored` outcome with Harbor's message, recorded once
(TaskEnvironmentError), not a fault of the executor redelivered until REGATTA_EXECUTOR_MAX_DELIVERIES.
"""

from __future__ import annotations

from typing import Any

from harbor.models.trial.config import TrialConfig
from harbor.trial.trial import Trial

from ..tasks.environment import TaskEnvironmentError
from ..tasks.loading import ContentAddressedTrial
from ..tasks.variables import check_task_variables, scrub_harbor_environment

# What Harbor raises for a trial it will not make. FileNotFoundError: a file of the task's folder, which
# never changes once unpacked (task_cache.py). A failing engine or network raises none of these (the
# docker SDK's errors, other OSErrors), and goes on to be retried.
REFUSALS: tuple[type[Exception], ...] = (ValueError, RuntimeError, NotImplementedError, FileNotFoundError)


async def create_trial(config: dict[str, Any]) -> Trial:
    """The trial of `config` (trials.trial_config); TaskEnvironmentError when Harbor refuses to make it
    or the task's `${VAR}` would be filled from nothing."""
    scrub_harbor_environment()  # outside the try: a Harbor this module no longer fits is no task's fault
    try:
        trial_config = TrialConfig.model_validate(config)
        task, _ = await ContentAddressedTrial._load_task(trial_config)
        check_task_variables(task.config, config)
        return await ContentAddressedTrial.create(trial_config)
    except REFUSALS as error:
        raise TaskEnvironmentError(str(error) or type(error).__name__) from error
