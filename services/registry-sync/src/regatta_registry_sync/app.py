"""Entrypoint of registry-sync: one sync request at a time, decoded and handed to the sync; the runtime
keeps it in progress while it runs and settles it (sync_or_retry chooses the retry delay)."""

from __future__ import annotations

import os

from nats.aio.msg import Msg
from regatta_shared.events import BenchmarkAdded, BenchmarkSyncRequested
from regatta_shared.events.codec import decode_stored
from regatta_shared.messaging.bus import EVENTS_STREAM, TASKS_BUCKET, subject_of
from regatta_shared.settings import load_settings
from regatta_shared.system.runtime import Service

from .archive_store import NatsArchiveStore
from .sync import BenchmarkSync, initial_sync_id, sync_or_retry

# A sync of a large dataset (a git clone, a thousand archives) outlives this; the heartbeat keeps it ours.
ACK_WAIT_SEC = 120.0


async def setup(service: Service) -> None:
    sync = BenchmarkSync(
        service.store,
        NatsArchiveStore(await service.js.object_store(TASKS_BUCKET)),
        page_size=service.settings.sync_page_size,
        workdir=service.settings.data_dir / "registry-sync",
    )

    async def sync_benchmark(msg: Msg) -> None:
        event = decode_stored(msg.data)
        benchmark_id = event.data["benchmark_id"]
        sync_id = event.data.get("sync_id") or initial_sync_id(benchmark_id)
        await sync_or_retry(sync, benchmark_id, sync_id, msg.metadata.num_delivered or 1)

    requests = [subject_of(BenchmarkAdded), subject_of(BenchmarkSyncRequested)]
    service.consume_each(EVENTS_STREAM, "registry-sync", requests, sync_benchmark, ack_wait=ACK_WAIT_SEC)


def main() -> None:
    # Harbor's git calls inherit these: a repository asking for credentials fails instead of hanging.
    os.environ.setdefault("GIT_TERMINAL_PROMPT", "0")
    os.environ.setdefault("GIT_SSH_COMMAND", "ssh -o BatchMode=yes")
    Service("registry-sync", load_settings()).run(setup)
