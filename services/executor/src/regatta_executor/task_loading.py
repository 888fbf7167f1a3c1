"""Harbor's task loading, once per task folder instead of once per trial.

Harbor's `Trial.create` reads, parses and validates the task folder (every path checked against the
task's ignore rules) and each trial's result hashes the whole folder again (`Task.checksum`): a fifth of
an executor's CPU on short attempts. Here a task folder is the unpacked archive of a content digest
(task_cache.py) and never changes, so the loaded `Task` and its checksum are reused by every later
trial of that folder. Harbor never changes a Task after loading it; a Trial only reads it.
"""

from __future__ import annotations

import functools
from collections import OrderedDict
from typing import Any

from harbor.models.task.task import Task
from harbor.models.trial.config import TrialConfig
from harbor.trial.trial import Trial

_KEPT = 256  # task folders; a Task holds its config and instruction, a few KB


class ContentAddressedTask(Task):
    @functools.cached_property
    def checksum(self) -> str:  # type: ignore[override]
        return super().checksum


class ContentAddressedTrial(Trial):
    """A Trial whose task comes from the per-process cache below."""

    _loaded: OrderedDict[tuple[Any, ...], tuple[Task, Any]] = OrderedDict()

    @staticmethod
    async def _load_task(config: TrialConfig) -> tuple[Task, Any]:
        key = (
            str(config.task.path),
            tuple(str(p) for p in config.extra_instruction_paths or ()),
            tuple(config.extra_instructions or ()),
            config.verifier.disable,
        )
        cache = ContentAddressedTrial._loaded
        found = cache.get(key)
        if found is None:
            # Two trials of a new folder may both load it; either result is the same Task.
            task, download = await Trial._load_task(config)
            found = cache[key] = (_content_addressed(task, config), download)
            while len(cache) > _KEPT:
                cache.popitem(last=False)
        else:
            cache.move_to_end(key)
        return found


def _content_addressed(task: Task, config: TrialConfig) -> Task:
    return ContentAddressedTask(
        task_dir=task.paths.task_dir,
        extra_instruction_paths=config.extra_instruction_paths,
        extra_instructions=config.extra_instructions,
        disable_verification=config.verifier.disable,
    )
