"""Issue 16, finding 5: a sync that fails in a way nobody classified is redelivered with a growing delay
(never at once, which made a hot loop of 52,000 tracebacks in seconds), then ends `failed` naming the
kind of error. Real JetStream deliveries through the runtime's consumer, the real retry step of the
service's handler (sync_or_retry) and the real store."""

from __future__ import annotations

import asyncio
import itertools
import time
from pathlib import Path

import nats
import pytest
from nats.aio.msg import Msg
from regatta_registry_sync import sync as sync_module
from regatta_registry_sync.sync import BenchmarkSync, initial_sync_id, sync_or_retry
from regatta_shared.events import BenchmarkAdded, BenchmarkSource, BenchmarkSyncFailed
from regatta_shared.eventstore import EventStore, new_event
from regatta_shared.ids import benchmark_stream
from regatta_shared.messaging.consumer import BatchConsumer

from regatta import nats_server

pytestmark = pytest.mark.timeout(120)
DELAY_SEC = 3.0  # the backoff under test, shortened from 2 s doubling to a minute


class _NoArchives:
    """Giving up stores no archive; the sync's archive store is never reached here."""


class _FailingSync(BenchmarkSync):
    async def run(self, benchmark_id: str, sync_id: str, on_page: object = None) -> None:
        raise RuntimeError("boom: <html>a remote server's reply</html>")


async def test_unexpected_failures_back_off_then_end_the_sync_failed(
    store: EventStore, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(sync_module, "RETRY_BASE_SEC", DELAY_SEC)
    monkeypatch.setattr(sync_module, "RETRY_CAP_SEC", DELAY_SEC)
    monkeypatch.setattr(sync_module, "MAX_DELIVERIES", 3)
    benchmark_id = "bm_unexpected"
    sync_id = initial_sync_id(benchmark_id)
    added = BenchmarkAdded(
        benchmark_id=benchmark_id,
        workspace_id="ws",
        name="unexpected",
        source=BenchmarkSource(type="folder", ref="/srv/unexpected"),
    )
    store.append(benchmark_stream(benchmark_id), [new_event(added, actor="tester")], 0)
    sync = _FailingSync(store, _NoArchives())  # type: ignore[arg-type]
    deliveries: list[tuple[int, float, bool]] = []
    settled = asyncio.Event()

    async def handle(batch: list[Msg]) -> None:
        (msg,) = batch
        delivered = msg.metadata.num_delivered or 1
        deliveries.append((delivered, time.monotonic(), bool(_failed(store, benchmark_id))))
        try:
            await sync_or_retry(sync, benchmark_id, sync_id, delivered)
        finally:
            if delivered == 3:
                settled.set()

    port = nats_server.free_port()
    server = nats_server.start(tmp_path / "nats", port)
    nc = await nats.connect(server.url())
    js = nc.jetstream()
    await js.add_stream(name="T", subjects=["t.sync"])
    await js.publish("t.sync", b"{}")
    consumer = BatchConsumer(js, "T", "sync", ["t.sync"], handle, batch_size=1, max_wait=0, ack_wait=60)
    try:
        await consumer.start()
        await asyncio.wait_for(settled.wait(), 60)
        await asyncio.sleep(DELAY_SEC + 1)  # given up, the request is acked: it never comes back
        assert [(delivered, failed) for delivered, _, failed in deliveries] == [
            (1, False),
            (2, False),
            (3, False),
        ]
        # NAKed with the handler's delay each time: not redelivered at once (nor after ack_wait).
        gaps = [later - earlier for (_, earlier, _), (_, later, _) in itertools.pairwise(deliveries)]
        assert all(DELAY_SEC * 0.9 <= gap < DELAY_SEC + 10 for gap in gaps), gaps
        failed = _failed(store, benchmark_id)
        assert [e.data["reason"] for e in failed] == ["failed 3 times; last error: RuntimeError"]
    finally:
        await consumer.stop()
        await nc.close()
        server.terminate()
        server.wait(timeout=10)


def _failed(store: EventStore, benchmark_id: str) -> list:
    return [
        e
        for e in store.read_stream(benchmark_stream(benchmark_id))
        if e.type == BenchmarkSyncFailed.type_name
    ]
