"""A consumer started while nats-server restarts waits for it instead of failing the service's start."""

from __future__ import annotations

import asyncio
from pathlib import Path

import nats
import pytest
from nats.aio.msg import Msg
from regatta_shared.messaging.bus import EVENTS_STREAM, ensure_streams
from regatta_shared.messaging.consumer import BatchConsumer

from regatta import nats_server

pytestmark = pytest.mark.timeout(90)


async def test_a_consumer_started_during_a_nats_restart_waits_and_then_consumes(tmp_path: Path) -> None:
    port = nats_server.free_port()
    server = nats_server.start(tmp_path / "nats", port)
    nc = await nats.connect(server.url(), max_reconnect_attempts=-1, reconnect_time_wait=0.2)
    received: list[bytes] = []

    async def handle(batch: list[Msg]) -> None:
        received.extend(msg.data for msg in batch)

    try:
        await ensure_streams(nc.jetstream())
        server.terminate()
        server.wait(timeout=10)
        consumer = BatchConsumer(nc.jetstream(), EVENTS_STREAM, "restart-test", ["evt.test.>"], handle)
        starting = asyncio.create_task(consumer.start())
        await asyncio.sleep(3.0)
        assert not starting.done(), "start must keep trying while nats-server is down, not fail"
        server = nats_server.start(tmp_path / "nats", port)
        await asyncio.wait_for(starting, timeout=30)
        await nc.jetstream().publish("evt.test.Happened", b"after the restart", stream=EVENTS_STREAM)
        for _ in range(100):
            if received:
                break
            await asyncio.sleep(0.1)
        assert received == [b"after the restart"]
        await consumer.stop()
    finally:
        await nc.close()
        server.terminate()
        server.wait(timeout=10)
