"""Making the Harbor trial of an attempt: first the task's `${VAR}` are checked against what the
platform offers (task_variables.py), and Harbor's own resolution is kept to that, then Harbor makes it."""

from __future__ import annotations

from typing import Any

from harbor.models.trial.config import TrialConfig
from harbor.trial.trial import Trial

from .task_loading import ContentAddressedTrial
from .task_variables import check_task_variables, scrub_harbor_environment


async def create_trial(config: dict[str, Any]) -> Trial:
    """The trial of `config` (trials.trial_config); TaskEnvironmentError when the task's `${VAR}` would
    be filled from nothing."""
    scrub_harbor_environment()
    trial_config = TrialConfig.model_validate(config)
    task, _ = await ContentAddressedTrial._load_task(trial_config)
    check_task_variables(task.config, config)
    return await ContentAddressedTrial.create(trial_config)
