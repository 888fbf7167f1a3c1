"""FastStream entrypoints of registry-sync: decode, run the sync, settle."""

from __future__ import annotations

import asyncio

import nats
from faststream.nats.annotations import NatsMessage
from nats.js.errors import NotFoundError
from regatta_shared.bus import EVENTS_STREAM, TASKS_BUCKET
from regatta_shared.codec import decode_stored
from regatta_shared.service import (
    build_app,
    configure_logging,
    durable_pull,
    make_broker,
    make_store,
    run_app,
)
from regatta_shared.settings import load_settings

from .sync import BenchmarkSync, initial_sync_id

settings = load_settings()
broker = make_broker(settings)
state: dict[str, object] = {}


async def connect() -> None:
    nc = await nats.connect(settings.nats_url, max_reconnect_attempts=-1, reconnect_time_wait=0.5)
    tasks = await nc.jetstream().object_store(TASKS_BUCKET)

    async def put_archive(digest: str, data: bytes) -> None:
        try:
            await tasks.get_info(digest)
        except NotFoundError:
            await tasks.put(digest, data)

    state["nc"] = nc
    state["sync"] = BenchmarkSync(make_store(settings), put_archive)


@broker.subscriber(
    "evt.benchmark.>",
    **durable_pull(
        EVENTS_STREAM,
        "registry-sync",
        ack_wait=300.0,
        filter_subjects=["evt.benchmark.BenchmarkAdded", "evt.benchmark.BenchmarkSyncRequested"],
    ),
)
async def sync_benchmark(msg: NatsMessage) -> None:
    event = decode_stored(msg.body)
    sync = state["sync"]
    assert isinstance(sync, BenchmarkSync)
    benchmark_id = event.data["benchmark_id"]
    sync_id = event.data.get("sync_id") or initial_sync_id(benchmark_id)
    await asyncio.shield(sync.run(benchmark_id, sync_id))


async def disconnect() -> None:
    nc = state.get("nc")
    if nc is not None:
        await nc.close()  # type: ignore[attr-defined]


app = build_app(broker, settings, after_startup=[connect], on_shutdown=[disconnect])


def main() -> None:
    configure_logging("registry-sync")
    run_app(app, settings)
