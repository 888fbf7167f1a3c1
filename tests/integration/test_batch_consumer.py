"""BatchConsumer: what is waiting settles in one batch; a lone message is not held for the top-up."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import nats
import pytest
from nats.aio.msg import Msg
from regatta_shared.bus import EVENTS_STREAM, ensure_streams
from regatta_shared.consumer import BatchConsumer

from regatta import nats_server

pytestmark = pytest.mark.timeout(60)


async def test_waiting_messages_come_in_one_batch_and_a_lone_one_is_not_held(tmp_path: Path) -> None:
    port = nats_server.free_port()
    server = nats_server.start(tmp_path / "nats", port)
    nc = await nats.connect(server.url())
    batches: list[tuple[float, list[bytes]]] = []
    arrived = asyncio.Event()

    async def handle(batch: list[Msg]) -> None:
        batches.append((time.monotonic(), [msg.data for msg in batch]))
        arrived.set()

    # A top-up that lingered for max_wait would hold the lone message for 30 s.
    consumer = BatchConsumer(nc.jetstream(), EVENTS_STREAM, "batch-test", ["evt.test.>"], handle, max_wait=30)
    try:
        js = nc.jetstream()
        await ensure_streams(js)
        for index in range(5):
            await js.publish("evt.test.Burst", str(index).encode(), stream=EVENTS_STREAM)
        await consumer.start()
        await asyncio.wait_for(arrived.wait(), 10)
        assert [data for _, data in batches] == [[b"0", b"1", b"2", b"3", b"4"]]
        arrived.clear()
        sent = time.monotonic()
        await js.publish("evt.test.Lone", b"lone", stream=EVENTS_STREAM)
        await asyncio.wait_for(arrived.wait(), 10)
        handled_at, data = batches[-1]
        assert data == [b"lone"] and handled_at - sent < 10
    finally:
        await consumer.stop()
        await nc.close()
        server.terminate()
        server.wait(timeout=10)
