"""The relay: tails the event store (which is the outbox) and publishes every event to JetStream.

At-least-once: the checkpoint only ever holds a position JetStream acknowledged, and it is saved at most
once a second (a write transaction per batch took the single SQLite writer lock from the services that
append). A crash republishes what followed the saved position, and JetStream drops those copies because
`Nats-Msg-Id` is the event id (its duplicate window, 10 minutes, is far longer than a second).

No single event can stop the log: one the bus cannot carry (its encoding is larger than the server's
max_payload, which the relay reads from the server's INFO) would fail on every retry and hold back
every later event. It is set aside instead: recorded in `relay_set_aside`, logged at ERROR, counted
in the gateway's ops health, and the relay moves on. The gateway refuses appends of such events, so
only a writer that bypassed it can store one.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time

import nats.errors
from nats.aio.client import Client as NATS
from regatta_shared.events import EVENT_TYPES
from regatta_shared.events.codec import encode_stored
from regatta_shared.eventstore import EventStore, StoredEvent
from regatta_shared.messaging.bus import EVENTS_STREAM, HEADERS_BYTES, event_subject
from regatta_shared.messaging.nudge import wake_on_commit
from regatta_shared.settings import load_settings
from regatta_shared.system.runtime import Service

log = logging.getLogger("regatta.relay")
CHECKPOINT = "relay"
SAVE_INTERVAL = 1.0  # seconds; see the module's docstring


def subject_for(event: StoredEvent) -> str:
    model = EVENT_TYPES.get(event.type)
    category = model.category if model else event.stream_id.split("-", 1)[0]
    return event_subject(category, event.type)


class Relay:
    # Every appender nudges the relay when it commits (nudge.py), so the quiet-time poll only
    # catches a lost nudge (or a writer without the bus): half a second of delay then, and an idle
    # stack's relay costs a fifth of what a 0.1 s poll did.
    def __init__(
        self, store: EventStore, nc: NATS, batch_size: int = 500, max_idle_sleep: float = 0.5
    ) -> None:
        self.store = store
        self.nc = nc
        self.js = nc.jetstream()
        self.batch_size = batch_size
        self.max_idle_sleep = max_idle_sleep
        self.published = 0
        self.set_aside = 0
        self._position: int | None = None  # published and acknowledged up to here
        self._saved: int | None = None
        self._saved_at = 0.0

    async def run_once(self) -> int:
        if self._position is None:
            # Read once: this relay is the only writer of its checkpoint while it runs.
            self._position = self._saved = await asyncio.to_thread(self.store.checkpoint, CHECKPOINT)
        position, due = self._position, self._save_due()
        # One thread hop: the checkpoint (when due) and the next batch.
        batch = await asyncio.to_thread(self._save_and_read, position, due)
        if not batch:
            return 0
        results = await asyncio.gather(*(self._publish(event) for event in batch))
        aside = [result for result in results if result is not None]
        if aside:
            # Recorded before the position moves past them: a crash in between sets them aside again.
            await asyncio.to_thread(self.store.record_set_aside, aside, "larger than the bus's max_payload")
            for event, size in aside:
                log.error(
                    "relay set aside event %s (%s at position %d, %d bytes > max_payload %d): "
                    "no subscriber will see it",
                    event.event_id,
                    event.type,
                    event.position,
                    size,
                    self.nc.max_payload,
                )
            self.set_aside += len(aside)
        self._position = batch[-1].position
        self.published += len(batch)
        return len(batch)

    def _save_due(self) -> bool:
        return self._position != self._saved and time.monotonic() - self._saved_at >= SAVE_INTERVAL

    def _save_and_read(self, position: int, save: bool) -> list[StoredEvent]:
        if save:
            self._save(position)
        return self.store.read_all(position, self.batch_size)

    async def _publish(self, event: StoredEvent) -> tuple[StoredEvent, int] | None:
        """Publish `event`; (event, size) instead when the bus cannot carry it."""
        body = encode_stored(event)
        if len(body) + HEADERS_BYTES > self.nc.max_payload:
            return event, len(body)
        try:
            await self.js.publish(
                subject_for(event),
                body,
                stream=EVENTS_STREAM,
                headers={"Nats-Msg-Id": event.event_id},
                timeout=10,
            )
        except nats.errors.MaxPayloadError:
            return event, len(body)
        return None

    def _save(self, position: int) -> None:
        with self.store.transaction() as conn:
            self.store.save_checkpoint(conn, CHECKPOINT, position)
        self._saved, self._saved_at = position, time.monotonic()

    async def save_checkpoint(self) -> None:
        """Save the acknowledged position now (at a quiet moment, or before stopping)."""
        if self._position is not None and self._position != self._saved:
            await asyncio.to_thread(self._save, self._position)

    async def run_forever(self, stop: asyncio.Event | None = None) -> None:
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
                if self._save_due():
                    await self.save_checkpoint()
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(woken.wait(), idle)
                idle = min(idle * 2, self.max_idle_sleep)
        await self.save_checkpoint()


async def setup(service: Service) -> None:
    service.loop("relay", Relay(service.store, service.nc).run_forever)


def main() -> None:
    Service("relay", load_settings()).run(setup)
