"""Server-sent events: a run's progress and a benchmark's sync, pushed as they change."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Callable
from typing import Any

from regatta_shared.rules.benchmark_status import SETTLED
from regatta_shared.runs import TERMINAL

TERMINAL_RUN = TERMINAL
TERMINAL_SYNC = SETTLED


async def changes(
    read: Callable[[], dict[str, Any]],
    done: Callable[[dict[str, Any]], bool],
    event: str,
    interval: float = 0.5,
    max_seconds: float = 3600.0,
) -> AsyncIterator[str]:
    """Emit the snapshot whenever it changes; end after a terminal snapshot (or max_seconds)."""
    last = None
    waited = 0.0
    while waited <= max_seconds:
        snapshot = await asyncio.to_thread(read)
        text = json.dumps(snapshot, sort_keys=True)
        if text != last:
            last = text
            yield f"event: {event}\ndata: {text}\n\n"
            if done(snapshot):
                return
        else:
            yield ": keep-alive\n\n"
        await asyncio.sleep(interval)
        waited += interval
