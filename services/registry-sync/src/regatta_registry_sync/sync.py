"""Service layer of registry-sync: one sync of one benchmark, recorded page by page.

A sync is idempotent: page events have ids derived from (sync id, page), so a redelivered request
re-appends nothing it already recorded. Nothing becomes runnable before BenchmarkSyncCompleted.
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Awaitable, Callable

from regatta_shared.events import (
    BenchmarkAdded,
    BenchmarkMetadata,
    BenchmarkSyncCompleted,
    BenchmarkSyncFailed,
    BenchmarkSyncStarted,
    BenchmarkTasksSynced,
    Event,
)
from regatta_shared.eventstore import EventStore, StoredEvent
from regatta_shared.eventstore.records import deterministic_id, new_event
from regatta_shared.ids import benchmark_stream

from .sources import ResolvedDataset, SourceInvalid, resolve
from .tasks import TaskInvalid, read_task

log = logging.getLogger("regatta.registry_sync")
PAGE_SIZE = 100
PutArchive = Callable[[str, bytes], Awaitable[None]]


def dataset_digest(task_digests: list[str]) -> str:
    """Harbor's dataset content hash: sha256 of the sorted task digests joined by commas."""
    hexes = sorted(d.removeprefix("sha256:") for d in task_digests)
    return "sha256:" + hashlib.sha256(",".join(hexes).encode()).hexdigest()


class BenchmarkSync:
    def __init__(self, store: EventStore, put_archive: PutArchive, page_size: int = PAGE_SIZE) -> None:
        self.store = store
        self.put_archive = put_archive
        self.page_size = page_size

    async def run(self, benchmark_id: str, sync_id: str) -> None:
        stream = benchmark_stream(benchmark_id)
        history = self.store.read_stream(stream)
        added = next((e.payload() for e in history if e.type == "BenchmarkAdded"), None)
        if not isinstance(added, BenchmarkAdded) or _finished(history, sync_id) or _removed(history):
            return
        try:
            dataset = resolve(added.source)
        except SourceInvalid as error:
            self._append(
                stream,
                BenchmarkSyncFailed(benchmark_id=benchmark_id, sync_id=sync_id, reason=str(error)),
                sync_id,
                "failed",
            )
            return
        self._append(
            stream,
            BenchmarkSyncStarted(
                benchmark_id=benchmark_id, sync_id=sync_id, total=len(dataset.tasks), version=dataset.version
            ),
            sync_id,
            "started",
        )
        try:
            digests = await self._pages(benchmark_id, sync_id, dataset)
        except TaskInvalid as error:
            self._append(
                stream,
                BenchmarkSyncFailed(benchmark_id=benchmark_id, sync_id=sync_id, reason=str(error)),
                sync_id,
                "failed",
            )
            return
        if not digests:
            reason = f"dataset {dataset.name}@{dataset.version} has no tasks"
            self._append(
                stream,
                BenchmarkSyncFailed(benchmark_id=benchmark_id, sync_id=sync_id, reason=reason),
                sync_id,
                "failed",
            )
            return
        digest = dataset_digest(digests)
        version = dataset.version if dataset.version != "local" else digest.removeprefix("sha256:")[:12]
        completed = BenchmarkSyncCompleted(
            benchmark_id=benchmark_id,
            sync_id=sync_id,
            version=version,
            digest=digest,
            task_count=len(digests),
            metadata=BenchmarkMetadata(),
        )
        self._append(stream, completed, sync_id, "completed")

    async def _pages(self, benchmark_id: str, sync_id: str, dataset: ResolvedDataset) -> list[str]:
        digests: list[str] = []
        seen: set[str] = set()
        for page, start in enumerate(range(0, len(dataset.tasks), self.page_size), start=1):
            infos = []
            for location in dataset.tasks[start : start + self.page_size]:
                loaded = read_task(location.path, location.name)
                if loaded.info.name in seen:
                    raise TaskInvalid(f"task {loaded.info.name!r}: listed twice in {dataset.name}")
                seen.add(loaded.info.name)
                await self.put_archive(loaded.info.digest, loaded.archive)
                infos.append(loaded.info)
                digests.append(loaded.info.digest)
            synced = BenchmarkTasksSynced(benchmark_id=benchmark_id, sync_id=sync_id, page=page, tasks=infos)
            self._append(benchmark_stream(benchmark_id), synced, sync_id, f"page-{page}")
        return digests

    def _append(self, stream: str, payload: Event, sync_id: str, step: str) -> None:
        self.store.append(
            stream, [new_event(payload, event_id=deterministic_id(sync_id, step), actor="registry-sync")]
        )


def _finished(history: list[StoredEvent], sync_id: str) -> bool:
    return any(
        e.type in ("BenchmarkSyncCompleted", "BenchmarkSyncFailed") and e.data.get("sync_id") == sync_id
        for e in history
    )


def _removed(history: list[StoredEvent]) -> bool:
    return any(e.type == "BenchmarkRemoved" for e in history)


def initial_sync_id(benchmark_id: str) -> str:
    return deterministic_id(benchmark_id, "initial-sync")
