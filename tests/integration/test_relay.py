"""The relay (the store is the outbox): every event reaches JetStream once, also across a crash that
lost the last second of checkpoints (docs/reference/architecture.md invariants 2 and 3)."""

from __future__ import annotations

from pathlib import Path

import nats
import pytest
from regatta_relay import relay
from regatta_relay.relay import Relay
from regatta_shared.events import RunStarted, RunStopRequested
from regatta_shared.eventstore import EventStore, EventTooLarge, new_event
from regatta_shared.messaging.bus import EVENTS_STREAM, ensure_streams

from regatta import nats_server

pytestmark = pytest.mark.timeout(60)


async def test_a_relay_restarted_after_unsaved_progress_publishes_each_event_once(
    store: EventStore, tmp_path: Path
) -> None:
    port = nats_server.free_port()
    server = nats_server.start(tmp_path / "nats", port)
    nc = await nats.connect(server.url())
    try:
        store.append("run-a", [new_event(RunStarted(run_id="a")) for _ in range(3)])
        await ensure_streams(nc.jetstream())
        first = Relay(store, nc)
        assert await first.run_once() == 3
        store.append("run-a", [new_event(RunStarted(run_id="a")) for _ in range(2)])
        assert await first.run_once() == 2
        # The first position was saved with the next read; the second is within the save interval, so
        # a crash now loses it.
        assert store.checkpoint(relay.CHECKPOINT) == 3
        second = Relay(store, nc)
        assert await second.run_once() == 2, "everything after the saved position is sent again"
        info = await nc.jetstream().stream_info(EVENTS_STREAM)
        assert info.state.messages == 5, "JetStream kept one copy of each (Nats-Msg-Id = event id)"
        await second.save_checkpoint()
        assert store.checkpoint(relay.CHECKPOINT) == store.last_position()
        assert await Relay(store, nc).run_once() == 0
    finally:
        await nc.close()
        server.terminate()
        server.wait(timeout=10)


async def test_an_event_larger_than_max_payload_is_set_aside_and_the_rest_flow(
    store: EventStore, tmp_path: Path
) -> None:
    """Issue 16, finding 4: one undeliverable event (written past the gateway) never stops the log."""
    port = nats_server.free_port()
    server = nats_server.start(tmp_path / "nats", port)
    nc = await nats.connect(server.url())
    try:
        await ensure_streams(nc.jetstream())
        huge = RunStopRequested(run_id="a", reason="x" * (nc.max_payload + 1))
        store.append("run-a", [new_event(RunStarted(run_id="a"))])
        store.append("run-a", [new_event(huge)])
        store.append("run-a", [new_event(RunStarted(run_id="a")) for _ in range(2)])
        first = Relay(store, nc)
        assert await first.run_once() == 4
        assert first.set_aside == 1
        info = await nc.jetstream().stream_info(EVENTS_STREAM)
        assert info.state.messages == 3, "every event but the undeliverable one was published"
        aside = store.set_aside_events()
        assert [(row["position"], row["type"]) for row in aside] == [(2, "RunStopRequested")]
        # A relay restarted before its checkpoint moved sets it aside again, recorded once.
        assert await Relay(store, nc).run_once() == 4
        assert len(store.set_aside_events()) == 1
        # A writer that knows the limit refuses such an event instead (the gateway sets it).
        store.max_event_bytes = nc.max_payload - relay.HEADERS_BYTES
        with pytest.raises(EventTooLarge) as refused:
            store.append("run-a", [new_event(huge)])
        assert refused.value.field == "reason"
        assert store.last_position() == 4
    finally:
        await nc.close()
        server.terminate()
        server.wait(timeout=10)
