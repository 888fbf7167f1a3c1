"""Wake the relay as soon as a writer commits, instead of waiting for its next poll.

A core NATS message, fire and forget: losing one only costs the relay's idle back-off (≤ 100 ms), so no
delivery guarantee is needed. The relay still polls, so correctness never depends on a nudge.
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

from nats.aio.client import Client as NATS
from sqlalchemy import event

from regatta_shared.eventstore import EventStore

NUDGE_SUBJECT = "regatta.store.committed"


def nudge_relay_on_commit(store: EventStore, nc: NATS) -> None:
    loop = asyncio.get_running_loop()
    pending: set[asyncio.Task[None]] = set()

    def publish() -> None:
        with contextlib.suppress(Exception):
            task = loop.create_task(nc.publish(NUDGE_SUBJECT, b""))
            pending.add(task)
            task.add_done_callback(pending.discard)

    @event.listens_for(store.engine, "commit")
    def _committed(_conn: Any) -> None:
        # Called on whichever thread committed; hand the publish to the event loop's thread.
        with contextlib.suppress(RuntimeError):
            loop.call_soon_threadsafe(publish)
