"""The size and file count of a task, bounded before anything reads its content.

A task folder is the dataset author's: a 1 GiB file of zeros (a few KB in a git pack or a sparse file)
or 100,000 tiny files would otherwise be hashed, archived, stored and unpacked on every executor. The
walk below only lists and stats (never reads) the folders Harbor packages, and stops at the first bound
it passes, so a hostile task costs this service a bounded walk; the message names the file or count.
"""

from __future__ import annotations

import os
from pathlib import Path

from harbor.models.task.paths import TaskPaths
from regatta_shared.rules.ceilings import TaskFileBounds

_MIB = 1024 * 1024


class TaskTooLarge(Exception):
    """The task's files pass a bound; the message names the file (or the count) and the setting."""


def check_task_files(task_dir: Path, label: str, bounds: TaskFileBounds) -> None:
    paths = TaskPaths(task_dir)
    entries = 0
    total = 0
    singles = (paths.config_path, paths.instruction_path, paths.readme_path, paths.trajectory_path)
    folders = (paths.environment_dir, paths.tests_dir, paths.solution_dir, paths.steps_dir)

    def account(path: Path) -> None:
        nonlocal entries, total
        entries += 1
        if entries > bounds.max_files:
            raise TaskTooLarge(
                f"task {label!r}: more than {bounds.max_files} files and folders (REGATTA_MAX_TASK_FILES)"
            )
        try:
            # stat follows a link: what an archive would store is the file it names.
            size = path.stat().st_size if not path.is_dir() else 0
        except OSError:
            return  # a dangling link is not archived; inspect_task reports unreadable files
        total += size
        if total > bounds.max_bytes:
            name = path.relative_to(task_dir).as_posix()
            raise TaskTooLarge(
                f"task {label!r}: its files pass {bounds.max_bytes // _MIB} MiB at {name} "
                f"({human_size(size)}) (REGATTA_MAX_TASK_MB)"
            )

    for single in singles:
        if single.exists():
            account(single)
    for folder in folders:
        if not folder.is_dir():
            continue
        for root, dirs, files in os.walk(folder):
            dirs.sort()
            for name in sorted(dirs) + sorted(files):
                account(Path(root) / name)


def human_size(size: int) -> str:
    if size >= 1024 * _MIB:
        return f"{size / (1024 * _MIB):.1f} GiB"
    if size >= _MIB:
        return f"{size / _MIB:.1f} MiB"
    return f"{size} bytes"
