"""The runtime every service runs in (regatta_shared.system.runtime.Service): /health answers while it runs, a
long job is kept in progress past ack_wait (never redelivered while its handler works), and each slot
fetches only once it is free."""

from __future__ import annotations

import asyncio
from pathlib import Path

import httpx
import pytest
from nats.aio.msg import Msg
from regatta_shared.messaging.bus import EVENTS_STREAM
from regatta_shared.settings import Settings
from regatta_shared.system.runtime import Service

from regatta import nats_server

pytestmark = pytest.mark.timeout(90)
ACK_WAIT_SEC = 1.5


async def test_long_jobs_stay_in_progress_one_per_free_slot_and_health_answers(tmp_path: Path) -> None:
    server = nats_server.start(tmp_path / "nats", nats_server.free_port())
    health_port = nats_server.free_port()
    settings = Settings(nats_url=server.url(), health_port=health_port, data_dir=tmp_path / "data")
    service = Service("runtime-test", settings, store=False)
    deliveries: list[tuple[bytes, int]] = []
    in_flight, most_in_flight = 0, 0
    done = asyncio.Event()

    async def slow_job(msg: Msg) -> None:
        nonlocal in_flight, most_in_flight
        deliveries.append((msg.data, msg.metadata.num_delivered or 0))
        in_flight += 1
        most_in_flight = max(most_in_flight, in_flight)
        try:
            await asyncio.sleep(ACK_WAIT_SEC * 2.5)  # far past ack_wait: only the heartbeat keeps it ours
        finally:
            in_flight -= 1
        if len(deliveries) >= 3:
            done.set()

    async def setup(service: Service) -> None:
        service.consume_each(
            EVENTS_STREAM, "runtime-test", ["evt.test.Job"], slow_job, ack_wait=ACK_WAIT_SEC, slots=2
        )

    try:
        await service.start(setup)
        async with httpx.AsyncClient() as http:
            assert (await http.get(f"http://127.0.0.1:{health_port}/health")).status_code == 204
            assert (await http.get(f"http://127.0.0.1:{health_port}/other")).status_code == 404
        for index in range(3):
            await service.js.publish("evt.test.Job", str(index).encode(), stream=EVENTS_STREAM)
        await asyncio.wait_for(done.wait(), 60)
        await asyncio.sleep(ACK_WAIT_SEC * 2)  # a job not kept in progress would come back meanwhile
        assert sorted(deliveries) == [(b"0", 1), (b"1", 1), (b"2", 1)]
        assert most_in_flight == 2
    finally:
        await service.stop()
        server.terminate()
        server.wait(timeout=10)
    with pytest.raises(httpx.ConnectError):
        httpx.get(f"http://127.0.0.1:{health_port}/health", timeout=2)
