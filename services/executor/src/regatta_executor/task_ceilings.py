"""The executor's own check of a task against the operator's ceilings (regatta_shared.ceilings).

Registry-sync and the gateway refused such a task already; this is defence in depth for a job queued
before a ceiling was lowered, or written by anything else: a task asking for more than this host allows
is refused, never clamped silently to something it did not ask for.
"""

from __future__ import annotations

import logging
import tomllib
from pathlib import Path

from harbor.models.task.config import TaskConfig
from pydantic import ValidationError
from regatta_shared.ceilings import Ceilings, task_resources
from regatta_shared.events import TaskResources
from regatta_shared.sandbox_disk import LOCAL
from regatta_shared.settings import Settings

from .environments import EnvironmentChoice
from .task_environment import TaskEnvironmentError

MAX_TASK_TOML_BYTES = 1024 * 1024
log = logging.getLogger(__name__)


def executor_ceilings(settings: Settings, environment: EnvironmentChoice) -> Ceilings:
    """The ceilings of an executor running `environment` (resolved: never `auto`): storage_mb against
    the disk its sandboxes write on, or half the RAM for one that runs on this host in tmpfs (`local`,
    or a class built on it), said once at start."""
    kind = LOCAL if environment.traits.runs_on_host else environment.kind
    ceilings = Ceilings.of_host(settings, kind)
    storage = ceilings.values["storage_mb"]
    log.info("ceiling of [environment].storage_mb: %s", storage.exceeded())
    return ceilings


def check_ceilings(
    ceilings: Ceilings, task_dir: Path, timeout_multiplier: float, max_processes: object = None
) -> None:
    """`max_processes`: the environment's per-sandbox process limit (REGATTA_EXECUTOR_ENVIRONMENT_KWARGS),
    which no task sets but which must stay within REGATTA_MAX_PROCESSES all the same."""
    if isinstance(max_processes, int) and max_processes > ceilings.max_processes:
        raise TaskEnvironmentError(
            f"the environment's max_processes = {max_processes} exceeds the operator's ceiling of "
            f"{ceilings.max_processes} (REGATTA_MAX_PROCESSES)"
        )
    over = ceilings.violations(resources_asked(task_dir), timeout_multiplier)
    if over:
        raise TaskEnvironmentError("refused by this executor: " + "; ".join(over))


def resources_asked(task_dir: Path) -> TaskResources:
    """What the task's task.toml asks for; TaskEnvironmentError when it cannot be read."""
    path = task_dir / "task.toml"
    try:
        with path.open("rb") as handle:
            raw = handle.read(MAX_TASK_TOML_BYTES + 1)
        if len(raw) > MAX_TASK_TOML_BYTES:
            raise TaskEnvironmentError(f"task.toml is larger than {MAX_TASK_TOML_BYTES} bytes")
        config = TaskConfig.model_validate(tomllib.loads(raw.decode()))
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError, ValidationError) as error:
        raise TaskEnvironmentError(f"task.toml cannot be read ({type(error).__name__})") from None
    return task_resources(config)
