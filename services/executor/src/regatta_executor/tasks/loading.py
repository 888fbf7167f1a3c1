"""Harbor's work on a task folder, once per folder instead of once per trial.

Per trial, Harbor parses and validates the task folder (every path checked against the task's ignore
rules), the oracle loads it a second time, the trial's lock hashes every file of it, the oracle and the
verifier filter its solution and tests again, and each result hashes it once more (`Task.checksum`):
together about half of an executor's CPU on short attempts. Here a task folder is the unpacked archive
of a content digest (task_cache.py) and never changes, so every one of those results is computed for
the first trial of a folder and reused by the later ones:
- the loaded `Task`, its checksum and its file filter's answers live on a per-process `ContentAddressedTask`;
- the oracle and the trial lock reach Harbor's `Task(...)` and `Packager.compute_content_hash` by name,
  so `install()` points those two names at lookups that answer from the same per-folder records, and
  at Harbor's own code for any folder not loaded through `ContentAddressedTrial`.
Harbor never changes a Task after loading it; a Trial only reads it.
"""

from __future__ import annotations

import functools
import os
import threading
from collections import OrderedDict
from pathlib import Path
from typing import Any

import harbor.agents.oracle as harbor_oracle
import harbor.models.job.lock as harbor_lock
from harbor.models.task.file_filter import TaskFileFilter
from harbor.models.task.task import Task
from harbor.models.trial.config import TrialConfig
from harbor.publisher.packager import Packager
from harbor.trial.trial import Trial
from harbor.utils.file_selection import FileSelection

_KEPT = 256  # task folders; a Task holds its config and instruction, a few KB


class SettledFileFilter(TaskFileFilter):
    """Harbor's filter with its answers kept: the folder it filters never changes."""

    def __init__(self, task_dir: Path | str) -> None:
        super().__init__(task_dir)
        self._excluded: dict[str, bool] = {}
        self._selected: dict[str, FileSelection] = {}

    def is_excluded(self, path: Path) -> bool:
        key = os.fspath(path)
        found = self._excluded.get(key)
        if found is None:
            found = self._excluded[key] = super().is_excluded(path)
        return found

    def select(self, source_dir: Path) -> FileSelection:
        # FileSelection is frozen (a tuple of paths): callers share one safely.
        key = os.fspath(source_dir)
        found = self._selected.get(key)
        if found is None:
            found = self._selected[key] = super().select(source_dir)
        return found


class ContentAddressedTask(Task):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.file_filter = SettledFileFilter(self.paths.task_dir)

    @functools.cached_property
    def checksum(self) -> str:  # type: ignore[override]
        return super().checksum


class _Folder:
    """What is known of one content-addressed folder: its plain Task and its content hash."""

    def __init__(self, task_dir: Path) -> None:
        self.task_dir = task_dir
        self._lock = threading.Lock()
        self._task: Task | None = None
        self._hash: tuple[str, list[Path]] | None = None

    def task(self) -> Task:
        with self._lock:
            if self._task is None:
                self._task = ContentAddressedTask(self.task_dir)
            return self._task

    def content_hash(self) -> tuple[str, list[Path]]:
        with self._lock:
            if self._hash is None:
                self._hash = _harbor_content_hash(self.task_dir)
            digest, files = self._hash
            return digest, list(files)


_FOLDERS: OrderedDict[Path, _Folder] = OrderedDict()
_FOLDERS_LOCK = threading.Lock()


def _folder(task_dir: Path | str, *, add: bool = False) -> _Folder | None:
    resolved = Path(task_dir).resolve()
    with _FOLDERS_LOCK:
        found = _FOLDERS.get(resolved)
        if found is None and add:
            found = _FOLDERS[resolved] = _Folder(resolved)
            while len(_FOLDERS) > _KEPT:
                _FOLDERS.popitem(last=False)
        elif found is not None:
            _FOLDERS.move_to_end(resolved)
        return found


class ContentAddressedTrial(Trial):
    """A Trial whose task comes from the per-process cache below."""

    _loaded: OrderedDict[tuple[Any, ...], tuple[Task, Any]] = OrderedDict()

    @staticmethod
    async def _load_task(config: TrialConfig) -> tuple[Task, Any]:
        install()
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
            _folder(task.paths.task_dir, add=True)
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


# --- the two names Harbor looks up per trial --------------------------------------------------------
_harbor_task = harbor_oracle.Task
_harbor_content_hash = Packager.compute_content_hash


def _oracle_task(task_dir: Path, *args: Any, **kwargs: Any) -> Task:
    """`Task(task_dir)` as the oracle agent calls it; a plain load for any other folder or argument."""
    folder = None if args or kwargs else _folder(task_dir)
    return folder.task() if folder is not None else _harbor_task(task_dir, *args, **kwargs)


def _content_hash(task_dir: Path) -> tuple[str, list[Path]]:
    """`Packager.compute_content_hash` as the trial lock calls it."""
    folder = _folder(task_dir)
    return folder.content_hash() if folder is not None else _harbor_content_hash(task_dir)


class _Packager(Packager):
    compute_content_hash = staticmethod(_content_hash)


def install() -> None:
    """Idempotent. Only the oracle module's and the lock module's own names are rebound: Harbor's
    `Task` and `Packager` classes, and every other caller of them, stay as they are."""
    harbor_oracle.Task = _oracle_task  # type: ignore[misc,assignment]
    harbor_lock.Packager = _Packager  # type: ignore[misc]
