"""A running attempt's live output, relayed from its subject on the LIVE stream
(regatta_shared.messaging.live) as
server-sent events: everything the stream still holds for the attempt first, then each chunk as it comes,
with the attempt's status; the stream ends once the attempt has an outcome and its executor said `done`
(or nothing more came for a while after the outcome).

While the stream is open the gateway says so on the attempt's watch subject (regatta_shared.messaging.live):
an environment whose output costs engine round trips to read is read only while someone watches."""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import AsyncIterator, Callable
from typing import Any

import nats.errors
from nats.aio.client import Client as NATS
from nats.js.api import DeliverPolicy
from pydantic import ValidationError
from regatta_shared.messaging.live import WATCH_EVERY, LiveChunk

# Seconds between looks at the attempt's status while no chunk comes; and how many such looks after its
# outcome the stream stays open for the executor's last chunks.
_POLL = 1.0
_AFTER_OUTCOME = 3


def _step(text: str) -> dict[str, Any] | None:
    """A trajectory step as the executor sent it: a JSON object, or nothing to show."""
    try:
        step = json.loads(text)
    except ValueError:
        return None
    return step if isinstance(step, dict) else None


def _event(name: str, data: dict[str, Any]) -> str:
    return f"event: {name}\ndata: {json.dumps(data, sort_keys=True)}\n\n"


async def attempt_events(
    nc: NATS,
    subject: str,
    read_status: Callable[[], dict[str, Any]],
    max_seconds: float = 6 * 3600.0,
    watch: str | None = None,
) -> AsyncIterator[str]:
    """`status` (the attempt's state), `phase`, `output` ({file, text}), `step` ({index, step}: a step of
    the agent's trajectory, again when it changed) and `truncated` events. `watch`: the attempt's watch
    subject, published on now and every WATCH_EVERY seconds while the stream is open."""
    status = await asyncio.to_thread(read_status)
    yield _event("status", status)
    said = float("-inf")

    async def say_watched() -> None:
        nonlocal said
        if watch is not None and time.monotonic() - said >= WATCH_EVERY:
            said = time.monotonic()
            # A heartbeat lost costs a watcher a late line, never the stream.
            with contextlib.suppress(Exception):
                await nc.publish(watch, b"")

    await say_watched()
    sub = await nc.jetstream().subscribe(subject, ordered_consumer=True, deliver_policy=DeliverPolicy.ALL)
    try:
        waited, quiet_after_outcome = 0.0, 0
        while waited <= max_seconds:
            await say_watched()
            try:
                msg = await sub.next_msg(timeout=_POLL)
            except nats.errors.TimeoutError:
                waited += _POLL
                latest = await asyncio.to_thread(read_status)
                if latest != status:
                    status = latest
                    yield _event("status", status)
                if status.get("outcome"):
                    quiet_after_outcome += 1
                    if quiet_after_outcome >= _AFTER_OUTCOME:
                        return
                yield ": keep-alive\n\n"
                continue
            try:
                chunk = LiveChunk.model_validate_json(msg.data)
            except ValidationError:
                continue  # not ours to show: only well-formed chunks reach a browser
            if chunk.phase:
                yield _event("phase", {"phase": chunk.phase, "at": chunk.at})
            if chunk.step is not None:
                step = _step(chunk.text)
                if step is not None:
                    yield _event("step", {"index": chunk.step, "step": step, "seq": chunk.seq})
            elif chunk.text:
                yield _event("output", {"file": chunk.file or "", "text": chunk.text, "seq": chunk.seq})
            if chunk.truncated:
                yield _event("truncated", {"at": chunk.at, "seq": chunk.seq})
            if chunk.phase == "done":
                yield _event("status", await asyncio.to_thread(read_status))
                return
    finally:
        await sub.unsubscribe()
