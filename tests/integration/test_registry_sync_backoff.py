"""Issue 16, finding 5: a sync that fails in a way nobody classified is redelivered with a growing delay
(never at once, which made a hot loop of 52,000 tracebacks in seconds), then ends `failed` naming the
kind of error. Real JetStream deliveries, the real service handler's retry step and the real store."""

from __future__ import annotations

from pathlib import Path

import nats
import nats.errors
import pytest
from faststream.nats.message import NatsMessage
from nats.js.api import ConsumerConfig
from regatta_registry_sync import app as service
from regatta_registry_sync import sync as sync_module
from regatta_registry_sync.sync import BenchmarkSync, initial_sync_id
from regatta_shared.events import BenchmarkAdded, BenchmarkSource
from regatta_shared.eventstore import EventStore, new_event
from regatta_shared.ids import benchmark_stream

from regatta import nats_server

pytestmark = pytest.mark.timeout(120)
DELAY_SEC = 3.0  # the backoff under test, shortened from 2 s doubling to a minute


class _NoArchives:
    """Giving up stores no archive; the sync's archive store is never reached here."""


async def test_unexpected_failures_back_off_then_end_the_sync_failed(
    store: EventStore, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(sync_module, "RETRY_BASE_SEC", DELAY_SEC)
    monkeypatch.setattr(sync_module, "RETRY_CAP_SEC", DELAY_SEC)
    monkeypatch.setattr(service, "MAX_DELIVERIES", 3)
    benchmark_id = "bm_unexpected"
    sync_id = initial_sync_id(benchmark_id)
    added = BenchmarkAdded(
        benchmark_id=benchmark_id,
        workspace_id="ws",
        name="unexpected",
        source=BenchmarkSource(type="folder", ref="/srv/unexpected"),
    )
    store.append(benchmark_stream(benchmark_id), [new_event(added, actor="tester")], 0)
    sync = BenchmarkSync(store, _NoArchives())  # type: ignore[arg-type]

    port = nats_server.free_port()
    server = nats_server.start(tmp_path / "nats", port)
    nc = await nats.connect(server.url())
    try:
        js = nc.jetstream()
        await js.add_stream(name="T", subjects=["t.sync"])
        await js.publish("t.sync", b"{}")
        sub = await js.pull_subscribe(
            "t.sync", durable="sync", config=ConsumerConfig(ack_wait=60, max_deliver=-1)
        )
        for delivery in (1, 2, 3):
            (msg,) = await sub.fetch(1, timeout=30)
            assert msg.metadata.num_delivered == delivery
            error = RuntimeError("boom: <html>a remote server's reply</html>")
            await service._retry_or_give_up(
                NatsMessage(raw_message=msg, body=msg.data), sync, benchmark_id, sync_id, error
            )
            if delivery < 3:
                assert not _failed(store, benchmark_id)
                # NAKed with a delay: not redelivered at once.
                with pytest.raises(nats.errors.TimeoutError):
                    await sub.fetch(1, timeout=DELAY_SEC / 3)
        failed = _failed(store, benchmark_id)
        assert [e.data["reason"] for e in failed] == ["failed 3 times; last error: RuntimeError"]
    finally:
        await nc.close()
        server.terminate()
        server.wait(timeout=10)


def _failed(store: EventStore, benchmark_id: str) -> list:
    return [e for e in store.read_stream(benchmark_stream(benchmark_id)) if e.type == "BenchmarkSyncFailed"]
