"""The relay: tails the event store (which is the outbox) and publishes every event to JetStream.

At-least-once: the checkpoint is saved only after JetStream acknowledged the batch; a crash in between
republishes the batch, and JetStream drops the copies because `Nats-Msg-Id` is the event id.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging

from nats.aio.client import Client as NATS

from regatta_shared.bus import EVENTS_STREAM, ensure_streams, event_subject
from regatta_shared.codec import encode_stored
from regatta_shared.events import EVENT_TYPES
from regatta_shared.eventstore import EventStore, StoredEvent
from regatta_shared.nudge import wake_on_commit

log = logging.getLogger("regatta.relay")
CHECKPOINT = "relay"


def subject_for(event: StoredEvent) -> str:
    model = EVENT_TYPES.get(event.type)
    category = model.category if model else event.stream_id.split("-", 1)[0]
    return event_subject(category, event.type)


class Relay:
    def __init__(
        self, store: EventStore, nc: NATS, batch_size: int = 500, max_idle_sleep: float = 0.1
    ) -> None:
        self.store = store
        self.nc = nc
        self.js = nc.jetstream()
        self.batch_size = batch_size
        self.max_idle_sleep = max_idle_sleep
        self.published = 0
        self._position: int | None = None

    async def run_once(self) -> int:
        if self._position is None:
            # Read once: this relay is the only writer of its checkpoint while it runs.
            self._position = await asyncio.to_thread(self.store.checkpoint, CHECKPOINT)
        batch = await asyncio.to_thread(self.store.read_all, self._position, self.batch_size)
        if not batch:
            return 0
        await asyncio.gather(*(self._publish(event) for event in batch))
        await asyncio.to_thread(self._save, batch[-1].position)
        self._position = batch[-1].position
        self.published += len(batch)
        return len(batch)

    async def _publish(self, event: StoredEvent) -> None:
        await self.js.publish(
            subject_for(event),
            encode_stored(event),
            stream=EVENTS_STREAM,
            headers={"Nats-Msg-Id": event.event_id},
            timeout=10,
        )

    def _save(self, position: int) -> None:
        with self.store.transaction() as conn:
            self.store.save_checkpoint(conn, CHECKPOINT, position)

    async def run_forever(self, stop: asyncio.Event | None = None) -> None:
        await ensure_streams(self.js)
        woken = asyncio.Event()
        await wake_on_commit(self.nc, woken)
        idle = 0.005
        while stop is None or not stop.is_set():
            # Cleared before reading, not after waiting: a commit nudged during the read is not lost.
            woken.clear()
            try:
                count = await self.run_once()
            except Exception:
                log.exception("relay batch failed; retrying")
                self._position = None
                await asyncio.sleep(1.0)
                continue
            if count:
                idle = 0.005
            # Back off while the log is quiet so an idle stack costs (almost) no CPU.
            if count < self.batch_size:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(woken.wait(), idle)
                idle = min(idle * 2, self.max_idle_sleep)


def main() -> None:
    import nats

    from regatta_shared.service import configure_logging, make_store
    from regatta_shared.settings import load_settings

    configure_logging("relay")
    settings = load_settings()

    async def run() -> None:
        nc = await nats.connect(settings.nats_url, max_reconnect_attempts=-1, reconnect_time_wait=0.5)
        await Relay(make_store(settings), nc).run_forever()

    asyncio.run(run())


if __name__ == "__main__":
    main()
