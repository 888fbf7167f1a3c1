"""Reading one Harbor task folder: validity, metadata, Harbor's content digest, and its archive."""

from __future__ import annotations

import io
import tarfile
import tomllib
from dataclasses import dataclass
from pathlib import Path

from harbor.publisher.packager import Packager
from regatta_shared.events import TaskInfo

DIFFICULTIES = {"easy", "medium", "hard"}


class TaskInvalid(Exception):
    """A task folder that cannot run; the message names the task and the problem."""


@dataclass(frozen=True)
class LoadedTask:
    info: TaskInfo
    archive: bytes


def read_task(task_dir: Path, name_hint: str) -> LoadedTask:
    label = name_hint or task_dir.name
    if not task_dir.is_dir():
        raise TaskInvalid(f"task {label!r}: folder {task_dir} does not exist")
    toml_path = task_dir / "task.toml"
    if not toml_path.is_file():
        raise TaskInvalid(f"task {label!r}: task.toml is missing")
    try:
        config = tomllib.loads(toml_path.read_text())
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as error:
        raise TaskInvalid(f"task {label!r}: task.toml is not valid TOML ({error})") from None
    if not (task_dir / "instruction.md").is_file() and not config.get("steps"):
        raise TaskInvalid(f"task {label!r}: instruction.md is missing")
    separate_verifier = bool((config.get("verifier") or {}).get("environment"))
    if not separate_verifier and not _has_test_script(task_dir):
        raise TaskInvalid(f"task {label!r}: tests/test.sh is missing")
    name = str((config.get("task") or {}).get("name") or label)
    metadata = config.get("metadata") or {}
    if not isinstance(metadata, dict):
        raise TaskInvalid(f"task {label!r}: [metadata] must be a table")
    digest, files = Packager.compute_content_hash(task_dir)
    info = TaskInfo(
        name=name,
        category=_text(metadata.get("category")),
        difficulty=_difficulty(metadata.get("difficulty")),
        tags=[str(t) for t in metadata.get("tags") or [] if isinstance(t, (str, int, float))],
        digest=f"sha256:{digest}",
    )
    return LoadedTask(info=info, archive=_archive(task_dir, files))


def _has_test_script(task_dir: Path) -> bool:
    return (task_dir / "tests" / "test.sh").is_file() or (task_dir / "tests" / "test.bat").is_file()


def _text(value: object) -> str | None:
    return str(value) if isinstance(value, (str, int, float)) and str(value).strip() else None


def _difficulty(value: object) -> str | None:
    # Only Harbor's three levels; anything else (unknown, typos) stays null, never guessed.
    text = str(value).strip().lower() if isinstance(value, str) else None
    return text if text in DIFFICULTIES else None


def _archive(task_dir: Path, files: list[Path]) -> bytes:
    buffer = io.BytesIO()
    root = task_dir.resolve()
    with tarfile.open(fileobj=buffer, mode="w:gz") as archive:
        for path in files:
            info = archive.gettarinfo(str(path), arcname=path.relative_to(root).as_posix())
            info.uid = info.gid = 0
            info.uname = info.gname = ""
            info.mtime = 0
            with path.open("rb") as handle:
                archive.addfile(info, handle)
    return buffer.getvalue()
