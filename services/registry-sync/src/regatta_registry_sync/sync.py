"""Service layer of registry-sync: one sync of one benchmark, recorded page by page.

A sync is idempotent: every event it appends has an id derived from (sync id, step), so a redelivered
request re-appends nothing it already recorded, and a redelivery that computes a different page (the
source changed in between) fails the sync instead of mixing two versions. Nothing becomes runnable
before BenchmarkSyncCompleted; a failed sync leaves the last completed version's tasks and archives as
they were, so runs that locked it are unaffected.
"""

from __future__ import annotations

import asyncio
import logging
import shutil
import tempfile
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from regatta_shared.ceilings import Ceilings, TaskFileBounds
from regatta_shared.consumer import Redeliver
from regatta_shared.envelope import deterministic_id, new_event
from regatta_shared.events import (
    BenchmarkAdded,
    BenchmarkRemoved,
    BenchmarkSyncCompleted,
    BenchmarkSyncFailed,
    BenchmarkSyncRequested,
    BenchmarkSyncStarted,
    BenchmarkTasksSynced,
    Event,
    InvalidTask,
    TaskInfo,
)
from regatta_shared.eventstore import EventStore, StoredEvent
from regatta_shared.ids import benchmark_stream
from regatta_shared.settings import load_settings

from .archive_store import ArchiveStore
from .dataset import Dataset, SourceInvalid, TaskLocation, dataset_digest
from .manifest import DeclaredMetadata, ManifestInvalid, from_deployment, parse_manifest, resolve_metadata
from .sources import open_dataset
from .tasks import TaskInvalid, build_archive, inspect_task

log = logging.getLogger("regatta.registry_sync")
PAGE_SIZE = 100
CONCURRENCY = 8
OnPage = Callable[[int, int], Awaitable[None]]
SYNC_ERRORS = (SourceInvalid, TaskInvalid, ManifestInvalid)
# An unexpected failure (a bug, a source that breaks in a way nobody classified, a database outage) is
# retried with exponential backoff, then the sync ends `failed`: a request that fails every time must
# not be redelivered at once, forever (one such URL logged 52,000 tracebacks in seconds).
RETRY_BASE_SEC = 2.0
RETRY_CAP_SEC = 60.0
MAX_DELIVERIES = 8


def retry_delay(delivered: int) -> float:
    """Seconds before redelivery `delivered + 1`: 2, 4, 8, ... capped at a minute."""
    return min(RETRY_BASE_SEC * 2 ** max(delivered - 1, 0), RETRY_CAP_SEC)


async def sync_or_retry(sync: BenchmarkSync, benchmark_id: str, sync_id: str, delivered: int) -> None:
    """One delivery of a sync request: run the sync; if it fails unexpectedly, have the request back
    after a growing delay (`Redeliver`), and on the last delivery end the sync `failed` instead."""
    try:
        # Shielded: a cancelled delivery (the service stopping) does not cancel the sync between its
        # idempotent steps; the request comes back after ack_wait.
        await asyncio.shield(sync.run(benchmark_id, sync_id))
    except Exception as error:
        what = f"{type(error).__name__}: {str(error)[:300]}"
        if delivered < MAX_DELIVERIES:
            delay = retry_delay(delivered)
            log.warning("sync %s of %s failed (%s); retry in %.0f s", sync_id, benchmark_id, what, delay)
            raise Redeliver(delay) from error
        log.error(
            "sync %s of %s failed %d times; giving up", sync_id, benchmark_id, delivered, exc_info=error
        )
        try:
            # The reason names the kind of error only: its text may quote what a remote server sent.
            await sync.give_up(
                benchmark_id, sync_id, f"failed {delivered} times; last error: {type(error).__name__}"
            )
        except Exception as store_error:
            # The store itself is failing: try again later, still backing off.
            log.exception("sync %s of %s: recording the failure failed", sync_id, benchmark_id)
            raise Redeliver(retry_delay(delivered)) from store_error


class BenchmarkSync:
    def __init__(
        self,
        store: EventStore,
        archives: ArchiveStore,
        page_size: int = PAGE_SIZE,
        concurrency: int = CONCURRENCY,
        workdir: Path | None = None,
        ceilings: Ceilings | None = None,
        bounds: TaskFileBounds | None = None,
    ) -> None:
        self.store = store
        self.archives = archives
        self.page_size = page_size
        self.concurrency = concurrency
        self.workdir = workdir
        settings = load_settings() if ceilings is None or bounds is None else None
        self.ceilings = ceilings or Ceilings.of_host(settings)  # type: ignore[arg-type]
        self.bounds = bounds or TaskFileBounds.from_settings(settings)  # type: ignore[arg-type]

    async def run(self, benchmark_id: str, sync_id: str, on_page: OnPage | None = None) -> None:
        stream = benchmark_stream(benchmark_id)
        history = await asyncio.to_thread(self.store.read_stream, stream)
        added = next((e.payload() for e in history if e.type == BenchmarkAdded.type_name), None)
        if not isinstance(added, BenchmarkAdded) or _finished(history, sync_id) or _removed(history):
            return
        if current_sync_id(history, benchmark_id) != sync_id:
            log.info("sync %s of %s was superseded by a later request; skipped", sync_id, benchmark_id)
            return
        if self.workdir is not None:
            self.workdir.mkdir(parents=True, exist_ok=True)
        workdir = Path(tempfile.mkdtemp(prefix="sync-", dir=self.workdir))
        try:
            await self._sync(added, sync_id, history, workdir, on_page)
        except SYNC_ERRORS as error:
            log.info("sync %s of %s failed: %s", sync_id, benchmark_id, error)
            failed = BenchmarkSyncFailed(benchmark_id=benchmark_id, sync_id=sync_id, reason=str(error))
            await self._append(stream, failed, sync_id, "failed")
        finally:
            await asyncio.to_thread(shutil.rmtree, workdir, True)

    async def give_up(self, benchmark_id: str, sync_id: str, reason: str) -> None:
        """End the sync `failed` with `reason` (it failed on every delivery)."""
        failed = BenchmarkSyncFailed(benchmark_id=benchmark_id, sync_id=sync_id, reason=reason)
        await self._append(benchmark_stream(benchmark_id), failed, sync_id, "failed")

    async def _sync(
        self,
        added: BenchmarkAdded,
        sync_id: str,
        history: list[StoredEvent],
        workdir: Path,
        on_page: OnPage | None,
    ) -> None:
        benchmark_id = added.benchmark_id
        stream = benchmark_stream(benchmark_id)
        dataset = await open_dataset(added.source, workdir, self.bounds, self.archives)
        label = f"dataset {dataset.name}" + (f"@{dataset.version}" if dataset.version else "")
        if not dataset.tasks:
            raise SourceInvalid(f"{label} has no tasks")
        layers = [
            parse_manifest(dataset.manifest) if dataset.manifest else DeclaredMetadata(),
            from_deployment(added.source.metadata),
        ]
        started = _recorded(history, BenchmarkSyncStarted.type_name, sync_id)
        if started and started[0]["total"] != len(dataset.tasks):
            raise SourceInvalid(f"{label} changed while this sync was retried; request a new sync")
        total = len(dataset.tasks)
        await self._append(
            stream,
            BenchmarkSyncStarted(
                benchmark_id=benchmark_id, sync_id=sync_id, total=total, version=dataset.version
            ),
            sync_id,
            "started",
        )
        pages = {
            d["page"]: {"tasks": d["tasks"], "invalid": d.get("invalid") or []}
            for d in _recorded(history, BenchmarkTasksSynced.type_name, sync_id)
        }
        infos, first_invalid = await self._pages(benchmark_id, sync_id, dataset, pages, on_page)
        if not infos:
            raise SourceInvalid(f"{label} has no valid task; the first: {first_invalid}")
        digest = dataset_digest([i.digest for i in infos], dataset.files)
        if dataset.expected_digest and digest != dataset.expected_digest:
            raise SourceInvalid(
                f"{label}: content digest {digest} does not match the source's {dataset.expected_digest}"
            )
        metadata = resolve_metadata(layers, [i.name for i in infos], dataset.description)
        completed = BenchmarkSyncCompleted(
            benchmark_id=benchmark_id,
            sync_id=sync_id,
            version=dataset.version or digest.removeprefix("sha256:")[:12],
            digest=digest,
            task_count=len(infos),
            metadata=metadata,
            source_commit=dataset.commit,
        )
        await self._append(stream, completed, sync_id, "completed")

    async def _pages(
        self,
        benchmark_id: str,
        sync_id: str,
        dataset: Dataset,
        recorded: dict[int, dict[str, Any]],
        on_page: OnPage | None,
    ) -> tuple[list[TaskInfo], str]:
        limit = asyncio.Semaphore(self.concurrency)
        everything: list[TaskInfo] = []
        first_invalid = ""
        listed = 0
        names: set[str] = set()
        total = len(dataset.tasks)
        for page, start in enumerate(range(0, total, self.page_size), start=1):
            chunk = dataset.tasks[start : start + self.page_size]
            # Every task of the page finishes before an error is reported, so the reason is the first
            # broken task in list order, the same on every delivery.
            results = await asyncio.gather(
                *(self._task(location, limit, page not in recorded) for location in chunk),
                return_exceptions=True,
            )
            failure = next((r for r in results if isinstance(r, BaseException)), None)
            if failure is not None:
                raise failure
            infos = [r for r in results if isinstance(r, TaskInfo)]
            invalid = [r for r in results if isinstance(r, InvalidTask)]
            for info in [*infos, *invalid]:
                if info.name in names:
                    raise TaskInvalid(f"task {info.name!r}: listed twice in dataset {dataset.name}")
                names.add(info.name)
            if invalid and not first_invalid:
                first_invalid = invalid[0].reason
            everything.extend(infos)
            listed += len(chunk)
            if page in recorded:
                if recorded[page] != _page_data(infos, invalid):
                    raise SourceInvalid(
                        f"dataset {dataset.name} changed while this sync was retried (page {page}); "
                        "request a new sync"
                    )
            else:
                synced = BenchmarkTasksSynced(
                    benchmark_id=benchmark_id, sync_id=sync_id, page=page, tasks=infos, invalid=invalid
                )
                await self._append(benchmark_stream(benchmark_id), synced, sync_id, f"page-{page}")
            if on_page is not None:
                await on_page(listed, total)
        return everything, first_invalid

    async def _task(
        self, location: TaskLocation, limit: asyncio.Semaphore, upload: bool
    ) -> TaskInfo | InvalidTask:
        if location.refused is not None:
            return InvalidTask(name=location.name, reason=location.refused)
        async with limit:
            try:
                task = await asyncio.to_thread(
                    inspect_task, location.path, location.name, self.ceilings, self.bounds
                )
            except TaskInvalid as error:
                # One broken task is listed with its reason; the dataset's other tasks stay runnable.
                return InvalidTask(name=location.name, reason=str(error))
            digest = task.info.digest
            if location.expected_digest and digest != location.expected_digest:
                raise TaskInvalid(
                    f"task {location.name!r}: content digest {digest} does not match the source's "
                    f"{location.expected_digest}"
                )
            # Archives are written before the page that names them, so a recorded digest always resolves.
            if upload and not await self.archives.exists(digest):
                try:
                    archive = await asyncio.to_thread(build_archive, task, self.bounds)
                except TaskInvalid as error:
                    return InvalidTask(name=location.name, reason=str(error))
                try:
                    await self.archives.put(digest, archive)
                finally:
                    archive.close()
            return task.info

    async def _append(self, stream: str, payload: Event, sync_id: str, step: str) -> None:
        event = new_event(payload, event_id=deterministic_id(sync_id, step), actor="registry-sync")
        await asyncio.to_thread(self.store.append, stream, [event])


def _page_data(infos: list[TaskInfo], invalid: list[InvalidTask]) -> dict[str, Any]:
    return {
        "tasks": [i.model_dump(mode="json") for i in infos],
        "invalid": [i.model_dump(mode="json") for i in invalid],
    }


def current_sync_id(history: list[StoredEvent], benchmark_id: str) -> str:
    """The latest requested sync; an older request redelivered later must not run over it."""
    requested = [e.data["sync_id"] for e in history if e.type == BenchmarkSyncRequested.type_name]
    return requested[-1] if requested else initial_sync_id(benchmark_id)


def _recorded(history: list[StoredEvent], event_type: str, sync_id: str) -> list[dict[str, Any]]:
    return [e.data for e in history if e.type == event_type and e.data.get("sync_id") == sync_id]


def _finished(history: list[StoredEvent], sync_id: str) -> bool:
    return any(
        e.type in (BenchmarkSyncCompleted.type_name, BenchmarkSyncFailed.type_name)
        and e.data.get("sync_id") == sync_id
        for e in history
    )


def _removed(history: list[StoredEvent]) -> bool:
    return any(e.type == BenchmarkRemoved.type_name for e in history)


def initial_sync_id(benchmark_id: str) -> str:
    return deterministic_id(benchmark_id, "initial-sync")
