"""Harbor's legacy registry.json (harbor.md §2.1), from a file or an http(s) URL.

Rows are validated with Harbor's own DatasetSpec; `name@version` resolves as Harbor's JSON client does
(no version: Harbor's resolve_version). Local task paths are relative to the registry file; tasks with
`git_url` (+ `git_commit_id`) are fetched at that commit with Harbor's task client.
"""

from __future__ import annotations

import asyncio
import http.client
import json
import urllib.error
import urllib.request
from pathlib import Path

from harbor.models.registry import DatasetSpec
from harbor.models.task.id import GitTaskId
from harbor.registry.client.base import resolve_version
from pydantic import ValidationError
from regatta_shared.events import BenchmarkSource

from .dataset import Dataset, SourceInvalid, TaskLocation
from .git_source import fetch_git_tasks, git_url_of
from .manifest import MANIFEST_NAME, ManifestFile

HTTP_TIMEOUT_SEC = 60.0


def parse_dataset_ref(ref: str) -> tuple[str, str | None]:
    name, _, version = ref.partition("@")
    return name.strip(), (version.strip() or None)


async def open_registry(source: BenchmarkSource, workdir: Path) -> Dataset:
    name = source.dataset or parse_dataset_ref(source.ref)[0]
    wanted = source.version or parse_dataset_ref(source.ref)[1]
    if source.registry_url:
        label = f"registry {source.registry_url}"
        if not source.registry_url.startswith(("http://", "https://")):
            raise SourceInvalid(f"{label}: only http(s) URLs are fetched")
        text = await asyncio.to_thread(_fetch, source.registry_url, label, False)
        base: Path | None = None
    else:
        path = Path(source.registry_path or "")
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
            try:
                task_id = GitTaskId(
                    git_url=git_url_of(task.git_url), git_commit_id=task.git_commit_id, path=task.path
                )
            except ValueError as error:
                raise SourceInvalid(f"{where}: task {task.name!r}: {_first_line(error)}") from None
            git_tasks.append((index, task.name, task_id))
            locations.append(None)
        elif base is None:
            raise SourceInvalid(
                f"{where}: task {task.name!r} has no git_url (a registry URL needs git tasks)"
            )
        else:
            locations.append(TaskLocation(name=task.name, path=base / task.path))
    if git_tasks:
        paths = await fetch_git_tasks([t for _, _, t in git_tasks], workdir)
        for (index, task_name, _), fetched in zip(git_tasks, paths, strict=True):
            locations[index] = TaskLocation(name=task_name, path=fetched)
    manifest = await asyncio.to_thread(_manifest_beside, source, base, spec.name)
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


def _fetch(url: str, label: str, missing_ok: bool) -> str | None:
    try:
        with urllib.request.urlopen(url, timeout=HTTP_TIMEOUT_SEC) as response:
            return response.read().decode()
    except urllib.error.HTTPError as error:
        if missing_ok and error.code == 404:
            return None
        raise SourceInvalid(f"{label}: HTTP {error.code} {error.reason}") from None
    except (urllib.error.URLError, TimeoutError, OSError) as error:
        raise SourceInvalid(f"{label}: unreachable ({getattr(error, 'reason', error)})") from None
    except http.client.HTTPException:
        # A server that does not speak HTTP (a banner, garbage) will not start to on a retry.
        raise SourceInvalid(f"{label}: the server did not answer HTTP") from None
    except UnicodeDecodeError:
        raise SourceInvalid(f"{label}: not UTF-8 text") from None


def _manifest_beside(source: BenchmarkSource, base: Path | None, dataset: str) -> ManifestFile | None:
    names = [f"regatta.{dataset}.toml", MANIFEST_NAME]
    if base is not None:
        for name in names:
            path = base / name
            if path.is_file():
                return ManifestFile(label=str(path), text=_read(path, f"manifest {path}"))
        return None
    root = (source.registry_url or "").rsplit("/", 1)[0]
    for name in names:
        url = f"{root}/{name}"
        text = _fetch(url, f"manifest {url}", True)
        if text is not None:
            return ManifestFile(label=url, text=text)
    return None


def _first_line(error: Exception) -> str:
    if isinstance(error, ValidationError):
        return error.errors()[0]["msg"]
    return str(error).strip().splitlines()[0] if str(error).strip() else repr(error)
