"""Upload a task archive as a scratch benchmark of the workspace (`regatta task try`, the web UI's
upload): the body is streamed to a file under one task's bounds, read (admission/uploaded_tasks.py),
kept in the task archive bucket and recorded as `BenchmarkAdded` with an `upload` source; registry-sync
then syncs it like any other benchmark, so executors fetch its tasks as they fetch every task.

Nothing is stored or recorded unless the whole archive passed. The same archive uploaded again to the
same workspace is the benchmark it already made (its runs, its leaderboard), not a second one.
"""

from __future__ import annotations

import asyncio
import hashlib
import shutil
import tempfile
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any, Protocol

from regatta_shared.ceilings import TaskFileBounds
from regatta_shared.envelope import new_event
from regatta_shared.events import BenchmarkAdded, BenchmarkSource
from regatta_shared.eventstore import EventStore
from regatta_shared.ids import benchmark_stream, new_id
from regatta_shared.task_uploads import upload_key

from regatta_gateway.admission.uploaded_tasks import read_upload
from regatta_gateway.commands.benchmarks import checked_name
from regatta_gateway.errors import Invalid, Refused, TooLarge, Unsupported
from regatta_gateway.principals import Scope
from regatta_gateway.queries.benchmarks import benchmark_with_source

_MIB = 1024 * 1024
DEFAULT_NAME = "upload"
MEDIA_TYPES = frozenset({"application/gzip", "application/x-gzip", "application/octet-stream"})


class Bucket(Protocol):
    """The task archive bucket (a NATS object store): what an upload needs of it."""

    async def put(self, name: str, data: Any) -> Any: ...


async def upload_tasks(
    store: EventStore,
    bucket: Bucket,
    scope: Scope,
    body: AsyncIterator[bytes],
    bounds: TaskFileBounds,
    name: str | None = None,
    content_type: str | None = None,
    content_length: str | None = None,
    workdir: Path | None = None,
) -> dict[str, Any]:
    """The scratch benchmark made of the tar.gz `body`: {id, name, tasks, existing}. A body in another
    media type, or declaring a length past the bound, is refused before it is read."""
    refused = header_problem(content_type, content_length, bounds)
    if refused is not None:
        raise refused
    given = checked_name(name, DEFAULT_NAME) if name is not None else None
    if workdir is not None:
        workdir.mkdir(parents=True, exist_ok=True)
    # Under the data folder when given: an upload and its unpacked copy may each reach the task bound,
    # more than a RAM-backed /tmp should hold.
    folder = Path(tempfile.mkdtemp(prefix="upload-", dir=workdir))
    try:
        archive = folder / "upload.tar.gz"
        digest = await _spool(body, archive, bounds)
        upload_name, tasks = await asyncio.to_thread(
            read_upload, archive, folder / "tasks", bounds, given or DEFAULT_NAME
        )
        source = BenchmarkSource(type="upload", ref=upload_key(digest), dataset=upload_name)
        benchmark_name = checked_name(given, upload_name)
        existing = await asyncio.to_thread(benchmark_with_source, store, scope, source.model_dump())
        if existing is not None:
            return {"id": existing["id"], "name": existing["name"], "tasks": tasks, "existing": True}
        with archive.open("rb") as data:
            # Written before the event that names it, so registry-sync always finds it.
            await bucket.put(source.ref, data)
        benchmark_id = new_id("bm")
        added = BenchmarkAdded(
            benchmark_id=benchmark_id, workspace_id=scope.workspace_id, name=benchmark_name, source=source
        )
        event = new_event(added, actor=scope.principal.user_id, workspace_id=scope.workspace_id)
        await asyncio.to_thread(store.append, benchmark_stream(benchmark_id), [event], 0)
        return {"id": benchmark_id, "name": benchmark_name, "tasks": tasks, "existing": False}
    finally:
        await asyncio.to_thread(shutil.rmtree, folder, True)


def header_problem(
    content_type: str | None, content_length: str | None, bounds: TaskFileBounds
) -> Refused | None:
    media = (content_type or "").split(";", 1)[0].strip().lower()
    if media not in MEDIA_TYPES:
        shown = (media or "(none)").encode("unicode_escape").decode("ascii")[:100]
        return Unsupported(
            f"Content-Type {shown!r} is not accepted here; send application/gzip (a tar.gz of a task folder)",
            code="UNSUPPORTED_MEDIA_TYPE",
            field="Content-Type",
        )
    if content_length is None:
        return None
    if not content_length.strip().isdigit():
        return Invalid("Content-Length must be a number", code="VALIDATION", field="Content-Length")
    if int(content_length) > bounds.max_bytes:
        return _too_large(bounds)
    return None


def _too_large(bounds: TaskFileBounds) -> TooLarge:
    return TooLarge(
        f"The task archive is larger than {bounds.max_bytes // _MIB} MiB (REGATTA_MAX_TASK_MB)",
        code="PAYLOAD_TOO_LARGE",
        field="archive",
    )


async def _spool(body: AsyncIterator[bytes], target: Path, bounds: TaskFileBounds) -> str:
    """Write the body to `target`, refusing it as soon as it passes the bound; its sha256 hex."""
    digest = hashlib.sha256()
    size = 0
    with target.open("wb") as out:
        async for chunk in body:
            size += len(chunk)
            if size > bounds.max_bytes:
                raise _too_large(bounds)
            digest.update(chunk)
            out.write(chunk)
    return digest.hexdigest()
