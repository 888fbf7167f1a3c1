"""A scratch benchmark's tasks: the archive a member uploaded, fetched from the task archive bucket and
unpacked under the same bounds again (the settings may have been lowered since the gateway took it)."""

from __future__ import annotations

import asyncio
from pathlib import Path

from regatta_shared.ceilings import TaskFileBounds
from regatta_shared.events import BenchmarkSource
from regatta_shared.task_archives import TaskArchiveRefused, unpack_file
from regatta_shared.task_uploads import UPLOAD_KEY, locate_tasks

from .archive_store import ArchiveStore
from .dataset import Dataset, SourceInvalid, TaskLocation


async def open_upload(
    source: BenchmarkSource, workdir: Path, archives: ArchiveStore, bounds: TaskFileBounds
) -> Dataset:
    label = source.dataset or "upload"
    if not UPLOAD_KEY.fullmatch(source.ref):
        raise SourceInvalid(f"upload {label!r}: {source.ref!r} is not an upload's key")
    archive = workdir / "upload.tar.gz"
    if not await archives.fetch(source.ref, archive):
        raise SourceInvalid(f"upload {label!r}: its archive is no longer in the object store")
    staging = workdir / "upload"
    staging.mkdir()
    try:
        await asyncio.to_thread(unpack_file, archive, staging, bounds, label)
        name, tasks = await asyncio.to_thread(locate_tasks, staging, label)
    except TaskArchiveRefused as refused:
        raise SourceInvalid(str(refused)) from None
    return Dataset(
        name=name, version=None, tasks=[TaskLocation(name=task, path=path.resolve()) for task, path in tasks]
    )
