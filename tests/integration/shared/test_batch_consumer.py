"""BatchConsumer: what is waiting settles in one batch; a lone message is not held for the top-up."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import nats
import pytest
from nats.aio.msg import Msg
from regatta_shared.messaging.bus import EVENTS_STREAM, ensure_streams
from regatta_shared.messaging.consumer import BatchConsumer

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


async def test_a_stop_lets_work_under_way_finish_takes_no_more_and_hands_back_what_outlives_the_grace(
    tmp_path: Path,
) -> None:
    """An executor's stop: the handler running when the stop begins finishes within the grace and is
    acked; nothing new is fetched meanwhile; a handler still running at the end of the grace is
    cancelled and its message comes back at once, not after ack_wait (30 s here)."""
    port = nats_server.free_port()
    server = nats_server.start(tmp_path / "nats", port)
    nc = await nats.connect(server.url())
    js = nc.jetstream()
    await ensure_streams(js)
    handled: list[bytes] = []
    started: dict[bytes, asyncio.Event] = {b"quick": asyncio.Event(), b"endless": asyncio.Event()}
    cancelled: list[bytes] = []

    async def handle(batch: list[Msg]) -> None:
        (msg,) = batch
        started.setdefault(msg.data, asyncio.Event()).set()
        try:
            await asyncio.sleep(1.0 if msg.data == b"quick" else 3600)
        except asyncio.CancelledError:
            cancelled.append(msg.data)
            raise
        handled.append(msg.data)

    def consumer(handler, slots: int = 1) -> BatchConsumer:
        return BatchConsumer(
            js,
            EVENTS_STREAM,
            "drain-test",
            ["evt.drain.>"],
            handler,
            batch_size=1,
            max_wait=0,
            ack_wait=30,
            slots=slots,
            heartbeat=True,
        )

    stopping = consumer(handle)
    try:
        await js.publish("evt.drain.Quick", b"quick", stream=EVENTS_STREAM)
        await stopping.start()
        await asyncio.wait_for(started[b"quick"].wait(), 10)
        await js.publish("evt.drain.Endless", b"endless", stream=EVENTS_STREAM)
        began = time.monotonic()
        await stopping.stop(grace=10.0)
        assert handled == [b"quick"] and cancelled == [], "the quick one finished within the grace"
        assert time.monotonic() - began < 5, "the stop did not wait longer than the work under way"
        assert not started[b"endless"].is_set(), "no new message was taken while stopping"

        # The endless one, taken by a fresh consumer, outlives a short grace. Its idle second slot leaves
        # a pull request waiting at the server: the message handed back must not go to that.
        second = consumer(handle, slots=2)
        await second.start()
        await asyncio.wait_for(started[b"endless"].wait(), 10)
        await second.stop(grace=0.5)
        assert cancelled == [b"endless"]

        redelivered: asyncio.Queue[tuple[bytes, int]] = asyncio.Queue()

        async def record(batch: list[Msg]) -> None:
            for msg in batch:
                await redelivered.put((msg.data, msg.metadata.num_delivered))

        began = time.monotonic()
        third = consumer(record)
        await third.start()
        try:
            data, delivered = await asyncio.wait_for(redelivered.get(), 10)
        finally:
            await third.stop()
        assert (data, delivered) == (b"endless", 2), "the quick one was acked; the endless one came back"
        assert time.monotonic() - began < 10, "handed back at once, not after ack_wait"
    finally:
        await nc.close()
        server.terminate()
        server.wait(timeout=10)
