"""Harbor's legacy registry.json (harbor.md §2.1), from a file or an http(s) URL.

Rows are validated with Harbor's own DatasetSpec; `name@version` resolves as Harbor's JSON client does
(no version: Harbor's resolve_version). Local task paths are relative to the registry file; tasks with
`git_url` (+ `git_commit_id`) are fetched at that commit with Harbor's task client.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import httpx
from harbor.models.registry import DatasetSpec
from harbor.models.task.id import GitTaskId
from harbor.registry.client.base import resolve_version
from pydantic import ValidationError
from regatta_shared.events import BenchmarkSource
from regatta_shared.rules.ceilings import TaskFileBounds
from regatta_shared.security.answers import AnswerRefused
from regatta_shared.security.outbound import OutboundRefused, guarded_async_client, reason_of
from regatta_shared.security.source_policy import SourcePolicy, SourceRefused

from .dataset import Dataset, SourceInvalid, TaskLocation
from .git_source import checked_task_id, fetch_git_tasks
from .manifest import MANIFEST_NAME, ManifestFile

MAX_REDIRECTS = 5


def parse_dataset_ref(ref: str) -> tuple[str, str | None]:
    name, _, version = ref.partition("@")
    return name.strip(), (version.strip() or None)


async def open_registry(
    source: BenchmarkSource, workdir: Path, policy: SourcePolicy, bounds: TaskFileBounds
) -> Dataset:
    name = source.dataset or parse_dataset_ref(source.ref)[0]
    wanted = source.version or parse_dataset_ref(source.ref)[1]
    if source.registry_url:
        label = f"registry {source.registry_url}"
        text = await _fetch(source.registry_url, "registry_url", policy, False)
        base: Path | None = None
    else:
        path = Path(source.registry_path or "")
        try:
            policy.check_host_path(path, "registry_path", trusted=source.trusted)
        except SourceRefused as error:
            raise SourceInvalid(str(error)) from None
        registry_file = path / "registry.json" if path.is_dir() else path
        label = f"registry {registry_file}"
        text = await asyncio.to_thread(_read, registry_file, label)
        base = registry_file.parent.resolve()
    spec = select_dataset(parse_registry(text or "", label), name, wanted, label)
    where = f"{label}: dataset {spec.name}@{spec.version}"
    locations: list[TaskLocation | None] = []
    git_tasks: list[tuple[int, str, GitTaskId]] = []
    for index, task in enumerate(spec.tasks):
        if task.git_url:
            # The registry's JSON is the registry author's: its git values are checked like a user's,
            # and only a trusted local registry may point its tasks at local repositories.
            task_id = checked_task_id(
                task.git_url,
                task.git_commit_id,
                task.path.as_posix(),
                f"{where}: task {task.name!r}",
                policy,
                trusted=source.trusted,
            )
            git_tasks.append((index, task.name, task_id))
            locations.append(None)
        elif base is None:
            raise SourceInvalid(
                f"{where}: task {task.name!r} has no git_url (a registry URL needs git tasks)"
            )
        else:
            task_path = (base / task.path).resolve()
            if not task_path.is_relative_to(base):
                raise SourceInvalid(f"{where}: task {task.name!r}: path leaves the registry's folder")
            locations.append(TaskLocation(name=task.name, path=base / task.path))
    if git_tasks:
        fetched = await fetch_git_tasks(
            [(name, t) for _, name, t in git_tasks], workdir, bounds, policy, trusted=source.trusted
        )
        for (index, _, _), location in zip(git_tasks, fetched, strict=True):
            locations[index] = location
    manifest = await _manifest_beside(source, base, spec.name, policy)
    return Dataset(
        name=spec.name,
        version=spec.version,
        tasks=[loc for loc in locations if loc is not None],
        description=spec.description or None,
        manifest=manifest,
    )


def parse_registry(text: str, label: str) -> list[DatasetSpec]:
    try:
        rows = json.loads(text)
    except json.JSONDecodeError as error:
        raise SourceInvalid(f"{label}: malformed JSON ({error})") from None
    if not isinstance(rows, list):
        raise SourceInvalid(f"{label}: expected a JSON array of datasets, got {type(rows).__name__}")
    specs = []
    for index, row in enumerate(rows):
        try:
            specs.append(DatasetSpec.model_validate(row))
        except ValidationError as error:
            first = error.errors()[0]
            at = ".".join(str(p) for p in first["loc"]) or "(row)"
            title = f" ({row['name']})" if isinstance(row, dict) and row.get("name") else ""
            raise SourceInvalid(
                f"{label}: dataset #{index}{title} is malformed at {at}: {first['msg']}"
            ) from None
    return specs


def select_dataset(specs: list[DatasetSpec], name: str, version: str | None, label: str) -> DatasetSpec:
    candidates = [s for s in specs if s.name == name]
    if not candidates:
        available = ", ".join(sorted({s.name for s in specs})[:10]) or "none"
        raise SourceInvalid(f"{label}: dataset {name!r} does not exist (available: {available})")
    versions = [s.version for s in candidates]
    chosen = version or resolve_version(versions)
    spec = next((s for s in candidates if s.version == chosen), None)
    if spec is None:
        raise SourceInvalid(
            f"{label}: dataset {name!r} has no version {chosen!r} (available: {', '.join(versions)})"
        )
    return spec


def _read(path: Path, label: str) -> str:
    if not path.is_file():
        raise SourceInvalid(f"{label}: file not found")
    try:
        return path.read_text()
    except (OSError, UnicodeDecodeError) as error:
        raise SourceInvalid(f"{label}: cannot be read ({error})") from None


async def _fetch(url: str, field: str, policy: SourcePolicy, missing_ok: bool) -> str | None:
    """GET `url` through the outbound guard: redirects followed, each hop checked, each answer read
    within the policy's bounds; the error names the field and a reason class, never what the remote
    answered."""
    try:
        async with guarded_async_client(
            policy.outbound,
            field,
            policy.answers,
            # The answer's bounds are the only time limit: httpx's own per-step default is 5 s.
            timeout=policy.answers.seconds,
            follow_redirects=True,
            max_redirects=MAX_REDIRECTS,
        ) as client:
            response = await client.get(url)
            if missing_ok and response.status_code == 404:
                return None
            response.raise_for_status()
            return response.content.decode()
    except (OutboundRefused, AnswerRefused, httpx.HTTPError, OSError) as error:
        raise SourceInvalid(f"could not fetch {field}: {reason_of(error)}") from None
    except UnicodeDecodeError:
        raise SourceInvalid(f"could not fetch {field}: not UTF-8 text") from None


async def _manifest_beside(
    source: BenchmarkSource, base: Path | None, dataset: str, policy: SourcePolicy
) -> ManifestFile | None:
    names = [f"regatta.{dataset}.toml", MANIFEST_NAME]
    if base is not None:
        for name in names:
            path = base / name
            if await asyncio.to_thread(path.is_file):
                text = await asyncio.to_thread(_read, path, f"manifest {path}")
                return ManifestFile(label=str(path), text=text)
        return None
    root = (source.registry_url or "").rsplit("/", 1)[0]
    for name in names:
        url = f"{root}/{name}"
        text = await _fetch(url, "registry_url (its manifest)", policy, True)
        if text is not None:
            return ManifestFile(label=url, text=text)
    return None


def _first_line(error: Exception) -> str:
    if isinstance(error, ValidationError):
        return error.errors()[0]["msg"]
    return str(error).strip().splitlines()[0] if str(error).strip() else repr(error)
