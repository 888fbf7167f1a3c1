"""Wake the relay (and the gateway's projections) as soon as a writer commits, not at their next poll.

A core NATS message, fire and forget: losing one only costs the relay's idle back-off (≤ 0.5 s), so no
delivery guarantee is needed. The relay still polls, so correctness never depends on a nudge.
"""

from __future__ import annotations

import asyncio
import contextlib

from nats.aio.client import Client as NATS
from sqlalchemy import Connection, event

from regatta_shared.eventstore import EventStore
from regatta_shared.eventstore.store import APPENDED

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
    def _committed(conn: Connection) -> None:
        # Only transactions that stored events: a read model's or a checkpoint's commit would wake the
        # relay for nothing. Called on whichever thread committed; the publish goes to the loop's thread.
        if conn.info.pop(APPENDED, False):
            with contextlib.suppress(RuntimeError):
                loop.call_soon_threadsafe(publish)

    @event.listens_for(store.engine, "rollback")
    def _rolled_back(conn: Connection) -> None:
        conn.info.pop(APPENDED, None)


async def wake_on_commit(nc: NATS, wake: asyncio.Event) -> None:
    """Set `wake` whenever any writer commits events, so a poller of the store (a projection runner)
    can sleep long while the log is quiet and still react at once."""

    async def _woken(_msg: object) -> None:
        wake.set()

    await nc.subscribe(NUDGE_SUBJECT, cb=_woken)
