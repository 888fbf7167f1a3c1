"""Tasks a member uploads (`regatta task try`, the web UI's upload): where the archive is kept and which
of its folders are tasks. The gateway reads an upload by these rules before it stores anything, and
registry-sync by the same rules when it syncs the scratch benchmark, so both find the same tasks.

An upload is one tar.gz: of one task folder (`my-task/task.toml`, or `task.toml` at its top), or of a
folder of tasks (`tasks/a/task.toml`, `tasks/b/…`, or `a/…`, `b/…` at its top). It is held, as a whole,
to one task's bounds (TaskFileBounds: REGATTA_MAX_TASK_MB, _FILES, _EXPANSION) and to the rules of
task_archives (no links, devices, absolute or `..` names).
"""

from __future__ import annotations

import re
from pathlib import Path

from .task_archives import TaskArchiveRefused

# The uploaded archive, kept as it came in the task archive bucket beside the tasks' own archives; its
# key can never be a task's (those are `sha256:<hex>`).
UPLOAD_KEY_PREFIX = "upload:sha256:"
UPLOAD_KEY = re.compile(r"upload:sha256:[0-9a-f]{64}")

# A sub-folder with none of these is not a task (docs/, assets/); one with some of them but no task.toml
# is a broken task, listed with its reason.
TASK_MARKERS = ("task.toml", "instruction.md", "tests", "solution", "environment", "steps")


def upload_key(archive_sha256: str) -> str:
    return UPLOAD_KEY_PREFIX + archive_sha256


def locate_tasks(staging: Path, fallback_name: str) -> tuple[str, list[tuple[str, Path]]]:
    """(the upload's own name, [(task name, folder)]) of an unpacked upload. A lone top folder is
    descended into (`tar czf x.tgz my-task` puts everything under `my-task/`) and names the upload;
    `fallback_name` names an archive of loose files."""
    root, name = staging, fallback_name
    entries = [child for child in staging.iterdir() if not child.name.startswith(".")]
    if not (staging / "task.toml").exists() and len(entries) == 1 and entries[0].is_dir():
        root, name = entries[0], entries[0].name
    if _is_task(root):
        return name, [(name, root)]
    tasks = [
        (child.name, child)
        for child in sorted(root.iterdir())
        if child.is_dir() and not child.name.startswith(".") and _is_task(child)
    ]
    if not tasks:
        raise TaskArchiveRefused(
            f"upload {name!r}: no task in it (a task is a folder holding task.toml, instruction.md, tests/ …)"
        )
    return name, tasks


def _is_task(folder: Path) -> bool:
    return any((folder / marker).exists() for marker in TASK_MARKERS)
