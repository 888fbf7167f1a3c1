"""Where a benchmark's tasks come from: registry.json, a local folder, a git repository, or the Harbor hub."""

from __future__ import annotations

import asyncio
from pathlib import Path

from regatta_shared.ceilings import TaskFileBounds
from regatta_shared.events import BenchmarkSource
from regatta_shared.source_policy import SourcePolicy, SourceRefused
from regatta_shared.task_uploads import TASK_MARKERS

from .archive_store import ArchiveStore
from .dataset import Dataset, SourceInvalid, TaskLocation
from .git_source import open_git
from .hub_source import open_hub
from .manifest import MANIFEST_NAME, ManifestFile
from .registry_json import open_registry
from .upload_source import open_upload


async def open_dataset(
    source: BenchmarkSource, workdir: Path, bounds: TaskFileBounds, archives: ArchiveStore
) -> Dataset:
    """Resolve the source to local task folders; git and hub content is fetched into `workdir`.

    The source policy is checked here again (the gateway did when it was added): settings may have
    changed since, and a registry's JSON names paths and URLs of its own."""
    policy = SourcePolicy.from_settings()
    if source.type == "registry":
        return await open_registry(source, workdir, policy, bounds)
    if source.type == "folder":
        try:
            policy.check_host_path(source.ref, "path", trusted=source.trusted)
        except SourceRefused as error:
            raise SourceInvalid(str(error)) from None
        try:
            return await asyncio.to_thread(open_folder, Path(source.ref))
        except OSError as error:
            raise SourceInvalid(f"folder {source.ref}: cannot be read ({error.strerror or error})") from None
    if source.type == "git":
        return await open_git(source, workdir, policy, bounds)
    if source.type == "hub":
        return await open_hub(source, workdir, policy, bounds)
    if source.type == "upload":
        return await open_upload(source, workdir, archives, bounds)
    raise SourceInvalid(f"source type {source.type!r} is not supported")


def open_folder(folder: Path) -> Dataset:
    if not folder.is_dir():
        raise SourceInvalid(f"folder {folder}: not found")
    tasks = [
        TaskLocation(name=child.name, path=child.resolve())
        for child in sorted(folder.iterdir())
        if child.is_dir()
        and not child.name.startswith(".")
        and any((child / marker).exists() for marker in TASK_MARKERS)
    ]
    manifest_path = folder / MANIFEST_NAME
    manifest = None
    if manifest_path.is_file():
        try:
            manifest = ManifestFile(label=str(manifest_path.resolve()), text=manifest_path.read_text())
        except (OSError, UnicodeDecodeError) as error:
            raise SourceInvalid(f"manifest {manifest_path}: cannot be read ({error})") from None
    return Dataset(name=folder.resolve().name, version=None, tasks=tasks, manifest=manifest)
