"""An uploaded task archive, read before anything of it is stored: unpacked under one task's bounds
(regatta_shared.task_archives: no links, devices, absolute or `..` names; REGATTA_MAX_TASK_MB, _FILES,
_EXPANSION), its tasks found (regatta_shared.task_uploads) and each task.toml checked against Harbor's
own TaskConfig. Everything else a task needs (instruction.md, tests, the operator's ceilings) is judged
by registry-sync at sync, as for every other source, and listed as an invalid task with its reason.

Blocking file I/O: the caller runs it in a worker thread.
"""

from __future__ import annotations

import tomllib
from pathlib import Path

from harbor.models.task.config import TaskConfig
from pydantic import ValidationError
from regatta_shared.ceilings import TaskFileBounds
from regatta_shared.task_archives import TaskArchiveRefused, unpack_file
from regatta_shared.task_uploads import locate_tasks

from regatta_gateway.errors import Invalid

MAX_TASK_TOML_BYTES = 1024 * 1024


def read_upload(archive: Path, staging: Path, bounds: TaskFileBounds, name: str) -> tuple[str, list[str]]:
    """(the upload's name, its task names) of the tar.gz at `archive`, unpacked into `staging`;
    Invalid naming the archive entry (or task.toml field) and the bound or rule otherwise."""
    staging.mkdir()
    try:
        unpack_file(archive, staging, bounds, name)
        upload_name, tasks = locate_tasks(staging, name)
    except TaskArchiveRefused as refused:
        raise Invalid(str(refused), code="VALIDATION", field=refused.entry or "archive") from None
    for task, folder in tasks:
        _check_task_toml(folder, f"{task}/task.toml" if folder != staging else "task.toml")
    return upload_name, [task for task, _ in tasks]


def _check_task_toml(folder: Path, shown: str) -> None:
    path = folder / "task.toml"
    if not path.is_file():
        raise Invalid(f"{shown} is missing", code="VALIDATION", field=shown)
    if path.stat().st_size > MAX_TASK_TOML_BYTES:
        raise Invalid(f"{shown} is larger than 1 MiB", code="VALIDATION", field=shown)
    try:
        raw = tomllib.loads(path.read_text(encoding="utf-8"))
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as error:
        raise Invalid(f"{shown} is not valid TOML ({error})", code="VALIDATION", field=shown) from None
    try:
        TaskConfig.model_validate(raw)
    except ValidationError as error:
        first = error.errors()[0]
        where = ".".join(str(part) for part in first["loc"]) or "(top level)"
        raise Invalid(
            f"{shown}: {where}: {first['msg']}", code="VALIDATION", field=f"{shown}:{where}"
        ) from None
