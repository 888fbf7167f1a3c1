"""Reading one Harbor task folder: validity, metadata, Harbor's content digest, and its archive.

Blocking file I/O: callers run these functions in a worker thread.
"""

from __future__ import annotations

import gzip
import os
import tarfile
import tempfile
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

from harbor.models.task.config import TaskConfig
from harbor.publisher.packager import Packager
from pydantic import ValidationError
from regatta_shared.events import TaskInfo
from regatta_shared.rules.ceilings import Ceilings, TaskFileBounds, task_resources

from .task_bounds import TaskTooLarge, check_task_files

DIFFICULTIES = {"easy", "medium", "hard"}
SPOOL_LIMIT_BYTES = 8 * 1024 * 1024


class TaskInvalid(Exception):
    """A task folder that cannot run; the message names the task and the problem."""


@dataclass(frozen=True)
class InspectedTask:
    info: TaskInfo
    files: list[tuple[Path, str]]


def inspect_task(task_dir: Path, name_hint: str, ceilings: Ceilings, bounds: TaskFileBounds) -> InspectedTask:
    """Validate a task as Harbor's Task.is_valid_dir does, against the operator's ceilings and the
    bounds of a task's files, and compute its content digest."""
    label = name_hint or task_dir.name
    try:
        return _inspect(task_dir, label, ceilings, bounds)
    except TaskTooLarge as error:
        raise TaskInvalid(str(error)) from None
    except OSError as error:
        # An unreadable file is a problem of the source, not of this service: retrying would not help.
        where = Path(error.filename).name if error.filename else task_dir
        raise TaskInvalid(f"task {label!r}: cannot read {where} ({error.strerror or error})") from None


def _inspect(task_dir: Path, label: str, ceilings: Ceilings, bounds: TaskFileBounds) -> InspectedTask:
    if not task_dir.is_dir():
        raise TaskInvalid(f"task {label!r}: folder {task_dir} does not exist")
    toml_path = task_dir / "task.toml"
    if not toml_path.is_file():
        raise TaskInvalid(f"task {label!r}: task.toml is missing")
    try:
        raw = tomllib.loads(toml_path.read_text())
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as error:
        raise TaskInvalid(f"task {label!r}: task.toml is not valid TOML ({error})") from None
    try:
        config = TaskConfig.model_validate(raw)
    except ValidationError as error:
        raise TaskInvalid(f"task {label!r}: task.toml {_first_error(error)}") from None
    if not config.environment.docker_image and not (task_dir / "environment").is_dir():
        raise TaskInvalid(f"task {label!r}: environment/ is missing (and no [environment].docker_image)")
    if not config.steps and not (task_dir / "instruction.md").is_file():
        raise TaskInvalid(f"task {label!r}: instruction.md is missing")
    if not config.steps and not config.verifier.environment:
        script = "tests/test.bat" if config.environment.os == "windows" else "tests/test.sh"
        if not (task_dir / script).is_file():
            raise TaskInvalid(f"task {label!r}: {script} is missing")
    resources = task_resources(config)
    over = ceilings.violations(resources)
    if over:
        raise TaskInvalid(f"task {label!r}: " + "; ".join(over))
    name = config.task.name if config.task is not None else label
    metadata = config.metadata
    root = task_dir.resolve()
    # Bounded before anything is read: the walk only stats, and stops at the first bound passed.
    check_task_files(root, label, bounds)
    sources = _sources(root, Packager.collect_files(root), label)
    # Links are followed (inside the task): what is archived is what they name, bounded again here.
    if sum(real.stat().st_size for real, _ in sources) > bounds.max_bytes:
        raise TaskInvalid(
            f"task {label!r}: its files pass {bounds.max_bytes >> 20} MiB (REGATTA_MAX_TASK_MB)"
        )
    digest, files = Packager.compute_content_hash(task_dir)
    info = TaskInfo(
        name=name,
        category=_text(metadata.get("category")),
        difficulty=_difficulty(metadata.get("difficulty")),
        tags=_tags(metadata.get("tags")),
        digest=f"sha256:{digest}",
        resources=resources,
    )
    return InspectedTask(info=info, files=_sources(root, files, label))


def _sources(root: Path, files: list[Path], label: str) -> list[tuple[Path, str]]:
    """(file to read, name in the archive) per hashed file; links are followed, but only inside the task."""
    linked: dict[Path, bool] = {root: False}

    def under_link(directory: Path) -> bool:
        if directory not in linked:
            linked[directory] = directory.is_symlink() or under_link(directory.parent)
        return linked[directory]

    sources = []
    for path in files:
        name = path.relative_to(root).as_posix()
        real = path
        if path.is_symlink() or under_link(path.parent):
            real = path.resolve()
            # A link out of the task would copy a file of this host into an archive that executors run.
            if not real.is_relative_to(root):
                raise TaskInvalid(f"task {label!r}: {name} links outside the task folder")
        sources.append((real, name))
    return sources


def build_archive(task: InspectedTask, bounds: TaskFileBounds) -> BinaryIO:
    """A reproducible tar.gz of exactly the files Harbor hashes; links are stored as the files they name.

    Refused (TaskInvalid) if it expands more than the executor's unpack allows (the same rule,
    TaskFileBounds.over_expansion): such a task would sync `ready` and then fail on every executor.

    Small archives stay in memory, large ones spill to a temporary file: a dataset of big tasks built
    several at a time must not hold them all in RAM. The caller closes the returned file.
    """
    buffer = tempfile.SpooledTemporaryFile(max_size=SPOOL_LIMIT_BYTES)  # noqa: SIM115 - returned open
    expanded = 0
    largest = ("", 0)
    try:
        with (
            gzip.GzipFile(fileobj=buffer, mode="wb", mtime=0, compresslevel=6) as compressed,
            tarfile.open(fileobj=compressed, mode="w", format=tarfile.PAX_FORMAT) as archive,
        ):
            for real, name in task.files:
                with real.open("rb") as handle:
                    stat = os.fstat(handle.fileno())
                    # Owner, group and mtime stay 0: the same files give the same archive on every host.
                    member = tarfile.TarInfo(name)
                    member.size = stat.st_size
                    member.mode = stat.st_mode & 0o7777
                    archive.addfile(member, handle)
                    expanded += stat.st_size
                    largest = max(largest, (name, stat.st_size), key=lambda pair: pair[1])
        compressed = buffer.tell()
        if bounds.over_expansion(expanded, compressed):
            raise TaskInvalid(
                f"task {task.info.name!r}: its archive of {compressed} bytes expands more than "
                f"{bounds.max_expansion:g} times (largest file: {largest[0]}) (REGATTA_MAX_TASK_EXPANSION)"
            )
    except BaseException:
        buffer.close()
        raise
    buffer.seek(0)
    return buffer  # type: ignore[return-value]


def _first_error(error: ValidationError) -> str:
    first = error.errors()[0]
    where = ".".join(str(part) for part in first["loc"]) or "(top level)"
    more = f" (and {error.error_count() - 1} more)" if error.error_count() > 1 else ""
    return f"is invalid at {where}: {first['msg']}{more}"


def _text(value: Any) -> str | None:
    return str(value).strip() if isinstance(value, (str, int, float)) and str(value).strip() else None


def _difficulty(value: Any) -> str | None:
    # Only Harbor's three levels; anything else (unknown, typos) stays null, never guessed.
    text = value.strip().lower() if isinstance(value, str) else None
    return text if text in DIFFICULTIES else None


def _tags(value: Any) -> list[str]:
    if isinstance(value, str):
        return [value] if value.strip() else []
    if not isinstance(value, list):
        return []
    return [str(t) for t in value if isinstance(t, (str, int, float)) and str(t).strip()]
