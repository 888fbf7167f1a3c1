"""FastStream entrypoints of registry-sync: decode, run the sync, settle."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os

import nats
from faststream.nats.annotations import NatsMessage
from regatta_shared.bus import EVENTS_STREAM, TASKS_BUCKET, subject_of
from regatta_shared.codec import decode_stored
from regatta_shared.events import BenchmarkAdded, BenchmarkSyncRequested
from regatta_shared.service import (
    build_app,
    configure_logging,
    durable_pull,
    make_broker,
    make_store,
    run_app,
)
from regatta_shared.settings import load_settings

from .archive_store import NatsArchiveStore
from .sync import MAX_DELIVERIES, BenchmarkSync, initial_sync_id, retry_delay

ACK_WAIT_SEC = 120.0
log = logging.getLogger("regatta.registry_sync")

settings = load_settings()
broker = make_broker(settings)
state: dict[str, object] = {}


async def connect() -> None:
    # Harbor's git calls inherit these: a repository asking for credentials fails instead of hanging.
    os.environ.setdefault("GIT_TERMINAL_PROMPT", "0")
    os.environ.setdefault("GIT_SSH_COMMAND", "ssh -o BatchMode=yes")
    nc = await nats.connect(settings.nats_url, max_reconnect_attempts=-1, reconnect_time_wait=0.5)
    bucket = await nc.jetstream().object_store(TASKS_BUCKET)
    state["nc"] = nc
    state["sync"] = BenchmarkSync(
        make_store(settings),
        NatsArchiveStore(bucket),
        page_size=settings.sync_page_size,
        workdir=settings.data_dir / "registry-sync",
    )


@broker.subscriber(
    "evt.benchmark.>",
    **durable_pull(
        EVENTS_STREAM,
        "registry-sync",
        ack_wait=ACK_WAIT_SEC,
        filter_subjects=[subject_of(BenchmarkAdded), subject_of(BenchmarkSyncRequested)],
    ),
)
async def sync_benchmark(msg: NatsMessage) -> None:
    event = decode_stored(msg.body)
    sync = state["sync"]
    assert isinstance(sync, BenchmarkSync)
    benchmark_id = event.data["benchmark_id"]
    sync_id = event.data.get("sync_id") or initial_sync_id(benchmark_id)
    # A sync of a large dataset (a git clone, a thousand archives) outlives ack_wait: keep the message ours.
    heartbeat = asyncio.create_task(_heartbeat(msg))
    try:
        await asyncio.shield(sync.run(benchmark_id, sync_id))
    except Exception as error:
        await _retry_or_give_up(msg, sync, benchmark_id, sync_id, error)
    finally:
        heartbeat.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await heartbeat


async def _retry_or_give_up(
    msg: NatsMessage, sync: BenchmarkSync, benchmark_id: str, sync_id: str, error: Exception
) -> None:
    delivered = msg.raw_message.metadata.num_delivered or 1
    what = f"{type(error).__name__}: {str(error)[:300]}"
    if delivered < MAX_DELIVERIES:
        delay = retry_delay(delivered)
        log.warning("sync %s of %s failed (%s); retry in %.0f s", sync_id, benchmark_id, what, delay)
        await msg.nack(delay=delay)
        return
    log.error("sync %s of %s failed %d times; giving up", sync_id, benchmark_id, delivered, exc_info=error)
    try:
        # The reason names the kind of error only: its text may quote what a remote server sent.
        reason = f"failed {delivered} times; last error: {type(error).__name__}"
        await sync.give_up(benchmark_id, sync_id, reason)
    except Exception:
        # The store itself is failing: try again later, still backing off.
        await msg.nack(delay=retry_delay(delivered))
        raise


async def _heartbeat(msg: NatsMessage) -> None:
    while True:
        await asyncio.sleep(ACK_WAIT_SEC / 3)
        with contextlib.suppress(Exception):
            await msg.in_progress()


async def disconnect() -> None:
    nc = state.get("nc")
    if nc is not None:
        await nc.close()  # type: ignore[attr-defined]


app = build_app(broker, settings, after_startup=[connect], on_shutdown=[disconnect])


def main() -> None:
    configure_logging("registry-sync")
    run_app(app, settings)
