"""Where a benchmark's tasks come from: a Harbor registry.json or a local folder of tasks."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from harbor.registry.client.base import resolve_version
from regatta_shared.events import BenchmarkSource


class SourceInvalid(Exception):
    """The source cannot be read; the message names the file or dataset and the problem."""


@dataclass(frozen=True)
class TaskLocation:
    name: str
    path: Path


@dataclass(frozen=True)
class ResolvedDataset:
    name: str
    version: str
    tasks: list[TaskLocation]
    root: Path


def resolve(source: BenchmarkSource) -> ResolvedDataset:
    if source.type == "registry":
        return _from_registry(source)
    if source.type == "folder":
        return _from_folder(Path(source.ref))
    raise SourceInvalid(f"source type {source.type!r} is not supported by this registry-sync")


def parse_dataset_ref(ref: str) -> tuple[str, str | None]:
    name, _, version = ref.partition("@")
    return name.strip(), (version.strip() or None)


def _from_registry(source: BenchmarkSource) -> ResolvedDataset:
    path = Path(source.registry_path or "")
    registry_file = path / "registry.json" if path.is_dir() else path
    if not registry_file.is_file():
        raise SourceInvalid(f"registry {registry_file}: file not found")
    try:
        specs = json.loads(registry_file.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as error:
        raise SourceInvalid(f"registry {registry_file}: malformed JSON ({error})") from None
    if not isinstance(specs, list):
        raise SourceInvalid(f"registry {registry_file}: expected a JSON array of datasets")
    name = source.dataset or parse_dataset_ref(source.ref)[0]
    wanted = source.version or parse_dataset_ref(source.ref)[1]
    candidates = [s for s in specs if isinstance(s, dict) and s.get("name") == name]
    if not candidates:
        raise SourceInvalid(f"registry {registry_file}: dataset {name!r} does not exist")
    versions = [str(s.get("version")) for s in candidates]
    version = wanted or resolve_version(versions)
    spec = next((s for s in candidates if str(s.get("version")) == version), None)
    if spec is None:
        raise SourceInvalid(f"registry {registry_file}: dataset {name!r} has no version {version!r}")
    tasks = spec.get("tasks")
    if not isinstance(tasks, list):
        raise SourceInvalid(f"registry {registry_file}: dataset {name}@{version} has no task list")
    root = registry_file.parent.resolve()
    locations = []
    for index, task in enumerate(tasks):
        if not isinstance(task, dict) or not isinstance(task.get("path") or task.get("name"), str):
            raise SourceInvalid(f"registry {registry_file}: task #{index} of {name}@{version} is malformed")
        if task.get("git_url"):
            raise SourceInvalid(f"task {task.get('name')!r}: git tasks need the git source")
        task_path = (root / str(task.get("path") or task["name"])).resolve()
        locations.append(TaskLocation(name=str(task.get("name") or task_path.name), path=task_path))
    return ResolvedDataset(name=name, version=version, tasks=locations, root=root)


def _from_folder(folder: Path) -> ResolvedDataset:
    if not folder.is_dir():
        raise SourceInvalid(f"folder {folder}: not found")
    tasks = [
        TaskLocation(name=child.name, path=child.resolve())
        for child in sorted(folder.iterdir())
        if child.is_dir() and not child.name.startswith(".")
    ]
    return ResolvedDataset(name=folder.name, version="local", tasks=tasks, root=folder.resolve())
